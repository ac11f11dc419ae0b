"""What an operator meets at the edges: busy ports, clients that hang up, wrong URLs,
wrong objects, help text, metrics that must agree with the tools.

Everything runs through the real command line (subprocesses) and real sockets, and
nothing is imported from the package: these tests state behaviour, and must keep
holding while the modules behind the commands move around.

Conventions: ``serve`` is started on port 0 on loopback with JSON logs, and its port is
read from the ``serving`` log line. Every wait is bounded; nothing is sent anywhere but
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.ports import free_port

EXAMPLES = REPO / "deploy" / "examples"
EXAMPLE_CLUSTER = EXAMPLES / "cluster.yaml"
EXAMPLE_REQUEST = EXAMPLES / "filter-request.json"

EXTENDER = [sys.executable, "-m", "extender"]


def _kubectl_plugin_command() -> list[str]:
    """The ``kubectl-runtimeclass`` executable, run as the installed script would run it.

    Read from pyproject.toml's [project.scripts] so that moving the entry point does not
    leave this test pointing at the old module (the installed script is regenerated
    only by a reinstall).
    """
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["kubectl-runtimeclass"].partition(":")
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())"]


KUBECTL_PLUGIN = _kubectl_plugin_command()

# The header that marks a request sent by `replay --url` (name not final): the serving
# extender must not capture it, or replaying a capture directory grows it.
REPLAY_HEADER = "X-Runtimeclass-Extender-Replay"
ANNOTATION = "runtimeclass-extender.dev/node-selector-term"
PREFIX = "runtimeclass_extender_"

EXIT_USAGE = 2
# Upper bounds, reached only when something hangs (the test then fails).
STARTUP_DEADLINE_SECONDS = 60.0
COMMAND_TIMEOUT_SECONDS = 60.0
HTTP_TIMEOUT_SECONDS = 10.0
CAPTURE_DEADLINE_SECONDS = 15.0
# "At once" for a request the server can refuse from its headers alone: far below the
# 30 s body-read timeout, generous for a loaded test machine.
PROMPT_ANSWER_SECONDS = 5.0


# ----- processes ----------------------------------------------------------------------


def _environment(home: Path) -> dict[str, str]:
    """The test's environment minus anything that would configure the extender."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNTIMECLASS_EXTENDER_", "KUBERNETES_SERVICE_")) and k != "KUBECONFIG"
    }
    env["HOME"] = str(home)  # no ~/.kube/config of the machine running the tests
    return env


def run(
    argv: list[str], home: Path, *, timeout: float = COMMAND_TIMEOUT_SECONDS
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=REPO, env=_environment(home), capture_output=True, text=True, timeout=timeout, check=False
    )


def extender(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([*EXTENDER, *args], home)


def assert_one_line_error(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Exit status 2, exactly one non-empty line on stderr, no trace; the line."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == EXIT_USAGE, f"exit {done.returncode}: {done.stderr}"
    assert len(lines) == 1, f"expected one stderr line, got {done.stderr!r}"
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


@dataclass
class Server:
    """A running ``serve`` and everything it has logged so far."""

    process: subprocess.Popen[str]
    port: int | None = None
    entries: list[dict[str, Any]] = field(default_factory=list)  # the JSON log lines
    other_lines: list[str] = field(default_factory=list)  # anything else on stderr
    changed: threading.Condition = field(default_factory=threading.Condition)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self.changed:
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = None
                if isinstance(entry, dict):
                    self.entries.append(entry)
                    if entry.get("msg") == "serving" and self.port is None:
                        self.port = int(str(entry["listen"]).rsplit(":", 1)[1])
                else:
                    self.other_lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def logged(self) -> tuple[list[dict[str, Any]], list[str]]:
        with self.changed:
            return list(self.entries), list(self.other_lines)


@contextlib.contextmanager
def serving(home: Path, *args: str) -> Iterator[Server]:
    """``serve ARGS`` on a free loopback port with JSON logs; stopped on exit."""
    process = subprocess.Popen(
        [*EXTENDER, "serve", "--host", "127.0.0.1", "--port", "0", "--log-format", "json", *args],
        cwd=REPO,
        env=_environment(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = Server(process)
    reader = threading.Thread(target=server.read_stderr, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        with server.changed:
            while server.port is None:
                if process.poll() is not None and not reader.is_alive():
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                server.changed.wait(min(remaining, 0.5))
        if server.port is None:
            entries, other = server.logged()
            raise AssertionError(f"serve never said it was serving: {entries} {other}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=5)


def serving_example(home: Path, *args: str) -> contextlib.AbstractContextManager[Server]:
    return serving(home, "--cluster-file", str(EXAMPLE_CLUSTER), *args)


# ----- HTTP ----------------------------------------------------------------------------

# No proxies: a proxy from the environment must not stand between the test and loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(
    url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post_json(url: str, body: bytes, **headers: str) -> tuple[int, bytes]:
    return http(url, method="POST", body=body, headers={"Content-Type": "application/json", **headers})


def example_request(pod_name: str | None = None) -> bytes:
    """deploy/examples/filter-request.json, optionally with its pod renamed (to find its capture)."""
    document = json.loads(EXAMPLE_REQUEST.read_bytes())
    if pod_name is not None:
        document["Pod"]["metadata"]["name"] = pod_name
    return json.dumps(document).encode()


def raw_exchange(port: int, data: bytes, *, wait: float) -> tuple[bytes, float]:
    """Send ``data`` on a fresh connection, keep it open, and read the answer's first bytes.

    Returns what arrived within ``wait`` seconds (empty if nothing) and how long it took.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        started = time.monotonic()
        sock.sendall(data)
        try:
            answer = sock.recv(65536)
        except TimeoutError:
            answer = b""
        return answer, time.monotonic() - started


def filter_head(port: int, content_length: int) -> bytes:
    return (
        f"POST /filter HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {content_length}\r\n\r\n"
    ).encode()


# ----- metrics -------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def metric_value(text: str, name: str, **labels: str) -> float | None:
    for sample_name, sample_labels, value in metric_samples(text):
        if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
            return value
    return None


def scrape(server: Server) -> str:
    status, body = http(server.url("/metrics"))
    assert status == 200
    return body.decode()


# ----- tables --------------------------------------------------------------------------


def parse_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """A kubectl-style table (columns start where their headers start) up to a blank line."""
    lines = text.splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    rows = []
    for line in lines[1:]:
        if not line.strip():
            break
        bounds = [*starts[1:], None]
        rows.append(
            {name: line[start:end].strip() for name, start, end in zip(names, starts, bounds, strict=True)}
        )
    return names, rows


# ----- helpers for files ---------------------------------------------------------------


def example_cluster_with(*objects: dict[str, Any]) -> str:
    document = yaml.safe_load(EXAMPLE_CLUSTER.read_text(encoding="utf-8"))
    document["items"] = [*document["items"], *objects]
    return yaml.safe_dump(document, sort_keys=False)


def runtime_class(name: str, *, handler: str = "runc", annotation: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if annotation is not None:
        metadata["annotations"] = {ANNOTATION: annotation}
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": metadata, "handler": handler}


def _kubeconfig_for(directory: Path, server_url: str) -> Path:
    kubeconfig = directory / "kubeconfig.yaml"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server_url}}],
                "contexts": [{"name": "c", "context": {"cluster": "c"}}],
                "current-context": "c",
            }
        ),
        encoding="utf-8",
    )
    return kubeconfig


def capture_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.iterdir() if p.name.startswith("capture-") and p.name.endswith(".json")
    )


def wait_for_capture_of(directory: Path, pod_name: str) -> None:
    """Until a capture file of the pod named ``pod_name`` is written (bounded)."""
    deadline = time.monotonic() + CAPTURE_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if any(pod_name in p.read_text(encoding="utf-8") for p in capture_files(directory)):
            return
        time.sleep(0.05)
    raise AssertionError(f"no capture of pod {pod_name} in {directory}")


def captured_pods(directory: Path, *names: str) -> list[str]:
    """Which of ``names`` appear in capture files, once per file."""
    found: list[str] = []
    for path in capture_files(directory):
        text = path.read_text(encoding="utf-8")
        found.extend(name for name in names if name in text)
    return found


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture directory holding one capture of the example request, made by ``serve``."""
    home = tmp_path_factory.mktemp("home")
    directory = tmp_path_factory.mktemp("captures")
    with serving_example(home, "--capture-dir", str(directory)) as server:
        status, _ = post_json(server.url("/filter"), example_request("captured-app"))
        assert status == 200
        wait_for_capture_of(directory, "captured-app")
    return directory


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds (bound and listening) while it runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _mentions_any(line: str, *phrases: str) -> bool:
    lowered = line.lower()
    return any(phrase.lower() in lowered for phrase in phrases)


# ===== 1. listening fails ==============================================================


def test_busy_port_is_one_line_naming_the_flag(tmp_path: Path, busy_port: int) -> None:
    done = extender(
        tmp_path,
        "serve",
        "--cluster-file",
        str(EXAMPLE_CLUSTER),
        "--host",
        "127.0.0.1",
        "--port",
        str(busy_port),
    )
    line = assert_one_line_error(done, "--port", str(busy_port))
    assert _mentions_any(line, os.strerror(errno.EADDRINUSE), "in use"), line


FOREIGN_ADDRESS = "10.255.255.1"  # TEST-NET-like private address, assumed not on this machine


def test_host_not_on_this_machine_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((FOREIGN_ADDRESS, 0))
        except OSError:
            pass
        else:
            pytest.skip(f"{FOREIGN_ADDRESS} is an address of this machine")
    done = extender(
        tmp_path, "serve", "--cluster-file", str(EXAMPLE_CLUSTER), "--host", FOREIGN_ADDRESS, "--port", "0"
    )
    line = assert_one_line_error(done, "--host", FOREIGN_ADDRESS)
    assert _mentions_any(
        line, os.strerror(errno.EADDRNOTAVAIL), "not available", "not an address", "not on this machine"
    ), line


@pytest.mark.parametrize(
    ("host", "reason"),
    [("a" * 300, "label too long"), ("a..b", "label empty or too long"), ("x." + "b" * 64 + ".com", "label")],
    ids=["too-long", "empty-label", "label-over-63"],
)
def test_host_that_is_no_host_name_is_one_line_naming_the_flag(
    tmp_path: Path, host: str, reason: str
) -> None:
    # Refused before any lookup (the name cannot be encoded for one), never a trace.
    done = extender(tmp_path, "serve", "--cluster-file", str(EXAMPLE_CLUSTER), "--host", host, "--port", "0")
    line = assert_one_line_error(done, "--host", "not a host name", reason)
    assert len(line) < 300, line  # the name is shortened in the line


# ===== 3. a client that hangs up mid-body ==============================================


def _filter_outcomes(metrics: str) -> dict[str, float]:
    return {
        labels.get("outcome", ""): value
        for name, labels, value in metric_samples(metrics)
        if name == PREFIX + "filter_requests_total"
    }


def test_client_disconnect_mid_body_is_no_error(tmp_path: Path) -> None:
    with serving_example(tmp_path) as server:
        assert server.port is not None
        before = _filter_outcomes(scrape(server))
        with socket.create_connection(("127.0.0.1", server.port), timeout=HTTP_TIMEOUT_SECONDS) as sock:
            sock.sendall(filter_head(server.port, 1000) + b'{"Pod": {"metadata": {"name": "gone"')
        # The server notices the hang-up on its own schedule: wait (bounded) for it to count it.
        deadline = time.monotonic() + PROMPT_ANSWER_SECONDS
        after = before
        while after == before and time.monotonic() < deadline:
            time.sleep(0.05)
            after = _filter_outcomes(scrape(server))
        assert after.get("client_disconnected", 0) - before.get("client_disconnected", 0) == 1, after
        assert after.get("error", 0) == before.get("error", 0), after

        status, _ = post_json(server.url("/filter"), example_request())
        assert status == 200  # still serving
        entries, other = server.logged()
    assert not [e for e in entries if e.get("level") in ("error", "critical")], entries
    assert not [e for e in entries if "exception" in e or "Traceback" in json.dumps(e)], entries
    assert not any("Traceback" in line for line in other), other


# ===== 4. replay --url mistakes ========================================================


def test_replay_url_that_is_not_an_extender(tmp_path: Path, captures: Path) -> None:
    with serving_example(tmp_path) as server:
        done = extender(tmp_path, "replay", str(captures), "--url", server.url("/nope"))
    assert_one_line_error(done, "is not a RuntimeClass extender (HTTP 404)")


def test_replay_url_without_scheme(tmp_path: Path, captures: Path) -> None:
    done = extender(tmp_path, "replay", str(captures), "--url", f"127.0.0.1:{free_port()}")
    assert_one_line_error(done, "http://", "https://")


# ===== 5. explain warns about every broken selector annotation =========================

BROKEN_ANNOTATIONS = {
    "broken-yaml": ("{matchExpressions: [}", "not valid JSON or YAML"),
    "broken-operator": (
        '{"matchExpressions": [{"key": "a", "operator": "Sometimes", "values": ["x"]}]}',
        "Sometimes",
    ),
    "broken-shape": ('{"matchExpressions": "everything"}', "must be a list"),
}


def test_explain_names_each_class_with_a_broken_annotation(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        example_cluster_with(
            *(runtime_class(name, annotation=text) for name, (text, _) in BROKEN_ANNOTATIONS.items())
        ),
        encoding="utf-8",
    )
    done = extender(tmp_path, "explain", "gvisor", "--cluster-file", str(cluster))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    naming = {}
    for name, (_, error) in BROKEN_ANNOTATIONS.items():
        matching = [line for line in lines if name in line]
        assert len(matching) == 1, f"{name}: expected one warning line, got {matching} in {lines}"
        assert error in matching[0], matching[0]
        naming[name] = matching[0]
    assert len(set(naming.values())) == len(BROKEN_ANNOTATIONS), naming


# ===== 6. POST /explain with the wrong object ==========================================


def _error_text(body: bytes) -> str:
    document = json.loads(body)
    return f"{document.get('error', '')} {document.get('detail', '')}"


def test_explain_endpoint_refuses_a_node(tmp_path: Path) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {}}
    with serving_example(tmp_path) as server:
        status, body = post_json(server.url("/explain"), json.dumps(node).encode())
    assert status == 400, body
    assert "expected kind Pod, got Node" in _error_text(body)


def test_explain_endpoint_refuses_a_filter_request_with_a_hint(tmp_path: Path) -> None:
    with serving_example(tmp_path) as server:
        status, body = post_json(server.url("/explain"), example_request())
    assert status == 400, body
    message = _error_text(body)
    assert "Pod" in message and ("ExtenderArgs" in message or "/filter" in message), message


# ===== 7. replayed requests are not captured ===========================================


def test_replayed_requests_are_not_captured(tmp_path: Path, captures: Path) -> None:
    capture_dir = tmp_path / "captures"
    capture_dir.mkdir()
    # Unique pod names tell the captures apart; the capture writer keeps request order,
    # so once a later request's file is there, an earlier one's would be too.
    marked, first, sentinel = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("marked", "first", "sentinel"))
    with serving_example(tmp_path, "--capture-dir", str(capture_dir)) as server:
        assert post_json(server.url("/filter"), example_request(marked), **{REPLAY_HEADER: "1"})[0] == 200
        assert post_json(server.url("/filter"), example_request(first))[0] == 200
        wait_for_capture_of(capture_dir, first)
        assert captured_pods(capture_dir, marked, first) == [first]

        # replay --url against the capturing server itself: its requests carry the mark.
        done = extender(tmp_path, "replay", str(captures), "--url", server.url())
        assert done.returncode in (0, 1), done.stderr
        assert post_json(server.url("/filter"), example_request(sentinel))[0] == 200
        wait_for_capture_of(capture_dir, sentinel)
        assert len(capture_files(capture_dir)) == 2, [p.name for p in capture_files(capture_dir)]


# ===== 8. a declared body over the limit is refused at once ============================


def test_declared_oversized_body_gets_413_at_once(tmp_path: Path) -> None:
    with serving_example(tmp_path, "--max-body-bytes", "10000") as server:
        assert server.port is not None
        answer, took = raw_exchange(
            server.port, filter_head(server.port, 20000) + b'{"Pod": {', wait=PROMPT_ANSWER_SECONDS
        )
        # The server is fine afterwards.
        assert post_json(server.url("/filter"), example_request())[0] == 200
    assert answer.startswith(b"HTTP/1.1 413"), (answer[:200], took)
    assert took < PROMPT_ANSWER_SECONDS


# ===== 9. a configuration that can only answer one way is warned about =================


def _warnings(entries: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(e).lower() for e in entries if e.get("level") == "warning"]


def test_empty_cluster_file_warns(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: List\nitems: []\n", encoding="utf-8")
    with serving(tmp_path, "--cluster-file", str(empty)) as server:
        status, body = http(server.url("/readyz"))
        entries, _ = server.logged()
    warnings = _warnings(entries)
    assert any(
        "0 nodes" in w and _mentions_any(w, "0 runtimeclasses", "0 runtime classes", "0 classes")
        for w in warnings
    ), entries
    ready = json.loads(body)
    assert status == 200, ready
    assert isinstance(ready.get("warnings"), list), ready
    assert any("0 nodes" in str(w).lower() for w in ready["warnings"]), ready


def test_policy_without_predicates_warns(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: runtimeclass-extender.dev/v1alpha1\nkind: Policy\npredicates: []\n", encoding="utf-8"
    )
    with serving_example(tmp_path, "--policy-file", str(policy)) as server:
        status, body = http(server.url("/readyz"))
        entries, _ = server.logged()
    assert any("every node" in w for w in _warnings(entries)), entries
    ready = json.loads(body)
    assert status == 200, ready
    assert isinstance(ready.get("warnings"), list), ready
    assert any("every node" in str(w).lower() for w in ready["warnings"]), ready


# ===== 10. help text ===================================================================


def _help(home: Path, argv: list[str]) -> str:
    done = run([*argv, "--help"], home)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _option_help(help_text: str, option: str) -> str:
    """The help of one option, its wrapped lines joined."""
    blocks: list[str] = []
    for line in help_text.splitlines():
        if re.match(r"^\s{2}-", line):
            blocks.append(line)
        elif blocks and line.startswith(" "):
            blocks[-1] += " " + line.strip()
        else:
            blocks.append("")  # a section title ends the option before it
    for block in blocks:
        # "  --kubeconfig PATH  help", or "  -o {a,b}, --output {a,b}  help".
        if re.match(rf"^\s*(-\w[^,]*, )?{re.escape(option)}\b", block):
            return " ".join(block.split())
    raise AssertionError(f"{option} not in help:\n{help_text}")


def test_serve_help_names_the_endpoints_and_log_levels(tmp_path: Path) -> None:
    text = " ".join(_help(tmp_path, [*EXTENDER, "serve"]).split())
    for endpoint in ("/metrics", "/explain"):
        assert endpoint in text, f"serve --help does not mention {endpoint}"
    log_level = _option_help(_help(tmp_path, [*EXTENDER, "serve"]), "--log-level")
    for level in ("debug", "info", "warning", "error"):
        assert level in log_level, log_level


@pytest.mark.parametrize(
    ("program", "argv", "prog"),
    [
        (EXTENDER, ["classes", "--no-such-flag"], "runtimeclass-extender classes"),
        (EXTENDER, ["serve", "--no-such-flag"], "runtimeclass-extender serve"),
        (EXTENDER, ["check", "x.yaml", "--no-such-flag"], "runtimeclass-extender check"),
        (KUBECTL_PLUGIN, ["explain", "gvisor", "--no-such-flag"], "kubectl runtimeclass explain"),
    ],
    ids=["classes", "serve", "check", "kubectl-explain"],
)
def test_an_unknown_flag_prints_the_commands_usage(
    tmp_path: Path, program: list[str], argv: list[str], prog: str
) -> None:
    done = run([*program, *argv], tmp_path)
    assert done.returncode == EXIT_USAGE, done.stderr
    # Two lines: the command's usage, short, and the error.
    usage, error = done.stderr.splitlines()
    assert usage.startswith(f"usage: {prog} [options]") and usage.endswith("(--help lists the options)"), (
        usage
    )
    assert error == f"{prog}: error: unrecognized arguments: --no-such-flag"


HELP_COMMANDS = {
    "runtimeclass-extender": [],
    "serve": ["serve"],
    "filter": ["filter"],
    "explain": ["explain"],
    "classes": ["classes"],
    "replay": ["replay"],
}


@pytest.mark.parametrize("command", list(HELP_COMMANDS))
def test_no_help_says_default_none(tmp_path: Path, command: str) -> None:
    text = " ".join(_help(tmp_path, [*EXTENDER, *HELP_COMMANDS[command]]).split())
    found = re.search(r".{60}default:? None\b", text)
    assert found is None, found.group(0)


@pytest.mark.parametrize("command", ["explain", "classes"])
def test_kubeconfig_help_mentions_the_service_account(tmp_path: Path, command: str) -> None:
    kubeconfig = _option_help(_help(tmp_path, [*EXTENDER, command]), "--kubeconfig")
    assert "service account" in kubeconfig, kubeconfig


@pytest.mark.parametrize("argv", [["explain", "gvisor"], ["classes"]], ids=["explain", "classes"])
def test_wide_output_adds_selector_and_tolerations(tmp_path: Path, argv: list[str]) -> None:
    cluster = ["--cluster-file", str(EXAMPLE_CLUSTER)]
    default = extender(tmp_path, *argv, *cluster)
    wide = extender(tmp_path, *argv, *cluster, "-o", "wide")
    assert default.returncode == 0, default.stderr
    assert wide.returncode == 0, wide.stderr
    default_columns, default_rows = parse_table(default.stdout)
    wide_columns, wide_rows = parse_table(wide.stdout)
    assert set(default_columns) < set(wide_columns), (default_columns, wide_columns)
    added = [c for c in wide_columns if c not in default_columns]
    assert any("SELECTOR" in c for c in wide_columns), wide_columns
    assert any("TOLERATION" in c for c in wide_columns), wide_columns
    assert added, wide_columns
    assert len(wide_rows) == len(default_rows)


# ===== 11. metrics and the classes table agree =========================================


def test_selected_and_fitting_gauges_match_the_classes_table(tmp_path: Path) -> None:
    table = extender(tmp_path, "classes", "--cluster-file", str(EXAMPLE_CLUSTER))
    assert table.returncode == 0, table.stderr
    columns, rows = parse_table(table.stdout)
    assert "SELECTED" in columns and "FITTING" in columns, columns
    with serving_example(tmp_path) as server:
        metrics = scrape(server)
    assert rows
    for row in rows:
        name = row["NAME"]
        selected = metric_value(metrics, PREFIX + "runtimeclass_nodes_selected", runtime_class=name)
        fitting = metric_value(metrics, PREFIX + "runtimeclass_nodes_fitting", runtime_class=name)
        assert selected is not None and fitting is not None, name
        # The table may show "n" or "n/total"; the count comes first.
        assert int(row["SELECTED"].split("/")[0]) == selected, (name, row)
        assert int(row["FITTING"].split("/")[0]) == fitting, (name, row)


def test_filter_requests_are_counted_by_runtimeclass(tmp_path: Path) -> None:
    name = PREFIX + "filter_requests_by_runtimeclass_total"
    with serving_example(tmp_path) as server:
        before = metric_value(scrape(server), name, runtime_class="gvisor") or 0.0
        assert post_json(server.url("/filter"), example_request())[0] == 200
        after = metric_value(scrape(server), name, runtime_class="gvisor")
    assert after == before + 1


# ===== 12. one shape for empty selectors and for errors ================================


def test_classes_json_shows_empty_selectors_alike(tmp_path: Path) -> None:
    done = extender(tmp_path, "classes", "--cluster-file", str(EXAMPLE_CLUSTER), "-o", "json")
    assert done.returncode == 0, done.stderr
    example = yaml.safe_load(EXAMPLE_CLUSTER.read_text(encoding="utf-8"))["items"]
    without_annotation = {
        item["metadata"]["name"]
        for item in example
        if item.get("kind") == "RuntimeClass"
        and ANNOTATION not in (item["metadata"].get("annotations") or {})
    }
    classes = json.loads(done.stdout)["runtimeClasses"]
    plain = [c for c in classes if c["name"] in without_annotation]
    assert plain, without_annotation
    for rc in plain:
        assert ("matchExpressions" in rc) == ("matchFields" in rc), rc
        assert rc.get("matchExpressions") == rc.get("matchFields"), rc


ERROR_KEYS = {"error", "detail"}

BAD_REQUESTS: dict[str, tuple[str, str, bytes, dict[str, str]]] = {
    # name: (method, path, body, headers)
    "filter: not JSON": ("POST", "/filter", b"{not json", {"Content-Type": "application/json"}),
    "filter: not ExtenderArgs": (
        "POST",
        "/filter",
        b'{"kind": "Node"}',
        {"Content-Type": "application/json"},
    ),
    "filter: wrong content type": ("POST", "/filter", b"{}", {"Content-Type": "text/plain"}),
    "filter: GET": ("GET", "/filter", b"", {}),
    "filter: Pod not an object": (
        "POST",
        "/filter",
        b'{"Pod": 3, "NodeNames": []}',
        {"Content-Type": "application/json"},
    ),
    "explain: not JSON": ("POST", "/explain", b"{not json", {"Content-Type": "application/json"}),
    "explain: a Node": (
        "POST",
        "/explain",
        b'{"kind": "Node", "metadata": {}}',
        {"Content-Type": "application/json"},
    ),
    "explain: wrong content type": ("POST", "/explain", b"{}", {"Content-Type": "text/plain"}),
    "explain: unknown RuntimeClass": ("GET", "/explain/runtimeclasses/nope", b"", {}),
    "explain: PUT": ("PUT", "/explain", b"{}", {"Content-Type": "application/json"}),
    "admission: not an AdmissionReview": (
        "POST",
        "/admission/runtimeclasses",
        b"[]",
        {"Content-Type": "application/json"},
    ),
    "no such endpoint": ("GET", "/nope", b"", {}),
}


MAX_BODY_BYTES = 100_000
MAX_NODES = 100
BAD_REQUESTS.update(
    {
        "filter: body over max-body-bytes": (
            "POST",
            "/filter",
            b" " * (MAX_BODY_BYTES + 1),
            {"Content-Type": "application/json"},
        ),
        "filter: more nodes than max-nodes-per-request": (
            "POST",
            "/filter",
            json.dumps(
                {**json.loads(example_request()), "NodeNames": [f"n{i}" for i in range(MAX_NODES + 1)]}
            ).encode(),
            {"Content-Type": "application/json"},
        ),
    }
)


def _assert_error_shape(name: str, status: int, body: bytes) -> None:
    assert 400 <= status < 600, (name, status, body)
    document = json.loads(body)
    assert isinstance(document, dict), (name, body)
    # Exactly the two keys (docs/reference.md, "HTTP endpoints"), each a non-empty line.
    assert set(document) == ERROR_KEYS, (name, document)
    for key in ERROR_KEYS:
        assert isinstance(document[key], str) and document[key], (name, document)
        assert "\n" not in document[key], (name, document)


def test_error_bodies_have_one_shape(tmp_path: Path) -> None:
    answers = {}
    limits = ["--max-body-bytes", str(MAX_BODY_BYTES), "--max-nodes-per-request", str(MAX_NODES)]
    with serving_example(tmp_path, *limits) as server:
        for name, (method, path, body, headers) in BAD_REQUESTS.items():
            answers[name] = http(server.url(path), method=method, body=body or None, headers=headers)
    for name, (status, body) in answers.items():
        assert status < 500, (name, status, body)
        _assert_error_shape(name, status, body)


def test_not_synced_error_body_has_the_same_shape(tmp_path: Path) -> None:
    """Live mode with an API server that never answers: /explain refuses until synced."""
    kubeconfig = _kubeconfig_for(tmp_path, f"http://127.0.0.1:{free_port()}")
    with serving(tmp_path, "--kubeconfig", str(kubeconfig)) as server:
        answers = {
            "explain: runtimeclass, not synced": http(server.url("/explain/runtimeclasses/gvisor")),
            "explain: pod, not synced": post_json(server.url("/explain"), b'{"spec": {"containers": []}}'),
        }
    for name, (status, body) in answers.items():
        assert status == 503, (name, status, body)
        _assert_error_shape(name, status, body)


# ===== the walk: no traceback from any command =========================================


@dataclass(frozen=True)
class Inputs:
    """Bad (and a few good) inputs shared by the walk's cases, by placeholder name."""

    values: dict[str, str]

    def expand(self, argv: list[str]) -> list[str]:
        return [arg.format(**self.values) for arg in argv]


def _write_inputs(directory: Path, captures: Path, busy: int) -> Inputs:
    bad_yaml = directory / "bad.yaml"
    bad_yaml.write_text("items: [\n  - : :\n  nope\n", encoding="utf-8")
    node = directory / "node.json"
    node.write_text(
        json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}), encoding="utf-8"
    )
    kubeconfig = _kubeconfig_for(directory, f"http://127.0.0.1:{free_port()}")
    unreadable = directory / "unreadable.yaml"
    unreadable.write_text(EXAMPLE_CLUSTER.read_text(encoding="utf-8"), encoding="utf-8")
    unreadable.chmod(0)
    empty_dir = directory / "empty-dir"
    empty_dir.mkdir()
    bad_captures = directory / "bad-captures"
    bad_captures.mkdir()
    (bad_captures / "capture-20250101T000000Z-0001.json").write_text("{not json", encoding="utf-8")
    a_file = directory / "a-file"
    a_file.write_text("x", encoding="utf-8")
    return Inputs(
        {
            "missing": str(directory / "missing.yaml"),
            "unreadable": str(unreadable),
            "bad_yaml": str(bad_yaml),
            "node": str(node),
            "kubeconfig": str(kubeconfig),
            "empty_dir": str(empty_dir),
            "bad_captures": str(bad_captures),
            "a_file": str(a_file),
            "captures": str(captures),
            "cluster": str(EXAMPLE_CLUSTER),
            "request": str(EXAMPLE_REQUEST),
            "busy_port": str(busy),
            "closed_port": str(free_port()),
        }
    )


SERVE = [*EXTENDER, "serve", "--host", "127.0.0.1"]
CLUSTER = ["--cluster-file", "{cluster}"]

WALK: dict[str, list[str]] = {
    # serve
    "serve: cluster file missing": [*SERVE, "--port", "0", "--cluster-file", "{missing}"],
    "serve: cluster file unreadable": [*SERVE, "--port", "0", "--cluster-file", "{unreadable}"],
    "serve: cluster file not YAML": [*SERVE, "--port", "0", "--cluster-file", "{bad_yaml}"],
    "serve: cluster file is a kubeconfig": [*SERVE, "--port", "0", "--cluster-file", "{kubeconfig}"],
    # A directory where a file belongs: unreadable even for root.
    "serve: cluster file is a directory": [*SERVE, "--port", "0", "--cluster-file", "{empty_dir}"],
    "serve: policy file missing": [*SERVE, "--port", "0", *CLUSTER, "--policy-file", "{missing}"],
    "serve: policy file not YAML": [*SERVE, "--port", "0", *CLUSTER, "--policy-file", "{bad_yaml}"],
    "serve: policy file is a Node": [*SERVE, "--port", "0", *CLUSTER, "--policy-file", "{node}"],
    "serve: busy port": [*SERVE, "--port", "{busy_port}", *CLUSTER],
    "serve: port out of range": [*SERVE, "--port", "70000", *CLUSTER],
    "serve: config file missing": [*SERVE, "--port", "0", "--config", "{missing}"],
    "serve: config file not YAML": [*SERVE, "--port", "0", "--config", "{bad_yaml}"],
    "serve: kubeconfig not YAML": [*SERVE, "--port", "0", "--kubeconfig", "{bad_yaml}"],
    "serve: TLS files missing": [
        *SERVE,
        "--port",
        "0",
        *CLUSTER,
        "--tls-cert-file",
        "{missing}",
        "--tls-key-file",
        "{missing}",
    ],
    "serve: capture dir is a file": [*SERVE, "--port", "0", *CLUSTER, "--capture-dir", "{a_file}"],
    "serve: policy file is a directory": [*SERVE, "--port", "0", *CLUSTER, "--policy-file", "{empty_dir}"],
    "serve: config file is a Node": [*SERVE, "--port", "0", "--config", "{node}"],
    "serve: log level unknown": [*SERVE, "--port", "0", *CLUSTER, "--log-level", "loud"],
    "serve: TLS certificate not PEM": [
        *SERVE,
        "--port",
        "0",
        *CLUSTER,
        "--tls-cert-file",
        "{a_file}",
        "--tls-key-file",
        "{a_file}",
    ],
    # filter
    "filter: request missing": [*EXTENDER, "filter", "{missing}", *CLUSTER],
    "filter: request is a directory": [*EXTENDER, "filter", "{empty_dir}", *CLUSTER],
    "filter: request not JSON": [*EXTENDER, "filter", "{bad_yaml}", *CLUSTER],
    "filter: request is a Node": [*EXTENDER, "filter", "{node}", *CLUSTER],
    "filter: cluster file missing": [*EXTENDER, "filter", "{request}", "--cluster-file", "{missing}"],
    "filter: cluster file unreadable": [*EXTENDER, "filter", "{request}", "--cluster-file", "{unreadable}"],
    "filter: cluster file not YAML": [*EXTENDER, "filter", "{request}", "--cluster-file", "{bad_yaml}"],
    "filter: policy file not YAML": [
        *EXTENDER,
        "filter",
        "{request}",
        *CLUSTER,
        "--policy-file",
        "{bad_yaml}",
    ],
    # explain
    "explain: pod missing": [*EXTENDER, "explain", "--pod", "{missing}", *CLUSTER],
    "explain: pod is a directory": [*EXTENDER, "explain", "--pod", "{empty_dir}", *CLUSTER],
    "explain: pod not YAML": [*EXTENDER, "explain", "--pod", "{bad_yaml}", *CLUSTER],
    "explain: pod is a Node": [*EXTENDER, "explain", "--pod", "{node}", *CLUSTER],
    "explain: pod is a filter request": [*EXTENDER, "explain", "--pod", "{request}", *CLUSTER],
    "explain: policy file not YAML": [
        *EXTENDER,
        "explain",
        "gvisor",
        *CLUSTER,
        "--policy-file",
        "{bad_yaml}",
    ],
    "explain: unknown RuntimeClass": [*EXTENDER, "explain", "nope", *CLUSTER],
    "explain: nothing to explain": [*EXTENDER, "explain", *CLUSTER],
    "explain: cluster file not YAML": [*EXTENDER, "explain", "gvisor", "--cluster-file", "{bad_yaml}"],
    "explain: cluster file unreadable": [*EXTENDER, "explain", "gvisor", "--cluster-file", "{unreadable}"],
    "explain: kubeconfig not YAML": [*EXTENDER, "explain", "gvisor", "--kubeconfig", "{bad_yaml}"],
    "explain: kubeconfig server down": [*EXTENDER, "explain", "gvisor", "--kubeconfig", "{kubeconfig}"],
    # classes
    "classes: cluster file missing": [*EXTENDER, "classes", "--cluster-file", "{missing}"],
    "classes: cluster file is a kubeconfig": [*EXTENDER, "classes", "--cluster-file", "{kubeconfig}"],
    "classes: cluster file is a directory": [*EXTENDER, "classes", "--cluster-file", "{empty_dir}"],
    "classes: policy file is a directory": [*EXTENDER, "classes", *CLUSTER, "--policy-file", "{empty_dir}"],
    "classes: policy file is a Node": [*EXTENDER, "classes", *CLUSTER, "--policy-file", "{node}"],
    "classes: kubeconfig missing": [*EXTENDER, "classes", "--kubeconfig", "{missing}"],
    "classes: kubeconfig is a directory": [*EXTENDER, "classes", "--kubeconfig", "{empty_dir}"],
    # replay
    "replay: directory missing": [*EXTENDER, "replay", "{missing}"],
    "replay: directory is a file": [*EXTENDER, "replay", "{a_file}"],
    "replay: no captures": [*EXTENDER, "replay", "{empty_dir}"],
    "replay: capture not JSON": [*EXTENDER, "replay", "{bad_captures}"],
    "replay: url without scheme": [*EXTENDER, "replay", "{captures}", "--url", "127.0.0.1:{closed_port}"],
    "replay: url nothing listens on": [
        *EXTENDER,
        "replay",
        "{captures}",
        "--url",
        "http://127.0.0.1:{closed_port}",
    ],
    "replay: url not a URL": [*EXTENDER, "replay", "{captures}", "--url", "http://["],
    "replay: url of another scheme": [
        *EXTENDER,
        "replay",
        "{captures}",
        "--url",
        "ftp://127.0.0.1:{closed_port}",
    ],
    "replay: cluster file not YAML": [*EXTENDER, "replay", "{captures}", "--cluster-file", "{bad_yaml}"],
    "replay: policy file not YAML": [*EXTENDER, "replay", "{captures}", "--policy-file", "{bad_yaml}"],
    # the kubectl plugin
    "kubectl explain: pod missing": [*KUBECTL_PLUGIN, "explain", "--pod", "{missing}", *CLUSTER],
    "kubectl classes: cluster file not YAML": [*KUBECTL_PLUGIN, "classes", "--cluster-file", "{bad_yaml}"],
    "kubectl classes: cluster file unreadable": [
        *KUBECTL_PLUGIN,
        "classes",
        "--cluster-file",
        "{unreadable}",
    ],
    "kubectl replay: directory missing": [*KUBECTL_PLUGIN, "replay", "{missing}"],
    "kubectl replay: url without scheme": [
        *KUBECTL_PLUGIN,
        "replay",
        "{captures}",
        "--url",
        "127.0.0.1:{closed_port}",
    ],
}


@pytest.mark.parametrize("case", list(WALK))
def test_no_traceback_anywhere(case: str, tmp_path: Path, captures: Path, busy_port: int) -> None:
    inputs = _write_inputs(tmp_path, captures, busy_port)
    argv = inputs.expand(WALK[case])
    if "{unreadable}" in " ".join(WALK[case]) and os.access(inputs.values["unreadable"], os.R_OK):
        pytest.skip("running as a user that reads any file (root): cannot make a file unreadable")
    done = run(argv, tmp_path)
    assert_one_line_error(done)


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "gvisor", "--cluster-file", "{missing}"],
        ["explain", "--pod", "{missing}", *CLUSTER],
        ["filter", "{missing}", *CLUSTER],
        ["node-template", "--node", "{missing}", *CLUSTER],
        ["check", "{missing}"],
    ],
    ids=["cluster-file", "pod", "filter-request", "node", "check"],
)
def test_a_file_that_cannot_be_read_is_said_in_one_wording(
    tmp_path: Path, captures: Path, busy_port: int, argv: list[str]
) -> None:
    inputs = _write_inputs(tmp_path, captures, busy_port)
    done = run([*EXTENDER, *inputs.expand(argv)], tmp_path)
    missing = inputs.values["missing"]
    lines = [line for line in done.stderr.splitlines() if not line.startswith("note: ")]
    assert done.returncode == EXIT_USAGE, done.stderr
    assert len(lines) == 1, done.stderr
    # check prints an error line per input; the commands of one file the program's.
    assert re.fullmatch(
        rf"(runtimeclass-extender: )?error: {re.escape(missing)}: no such file or directory", lines[0]
    ), lines[0]


@pytest.mark.parametrize(("flag", "kind"), [("--pod", "Pod"), ("--node", "Node")], ids=["pod", "node"])
def test_a_file_of_another_kind_is_said_in_one_wording(tmp_path: Path, flag: str, kind: str) -> None:
    command = "explain" if flag == "--pod" else "node-template"
    done = extender(tmp_path, command, flag, str(EXAMPLE_CLUSTER), "--cluster-file", str(EXAMPLE_CLUSTER))
    line = assert_one_line_error(done)
    assert line == f"runtimeclass-extender: error: {EXAMPLE_CLUSTER}: expected kind {kind}, got List"


# ===== what a new user trips on (issue: from a clone to a cluster, section 4) ============


def _pyproject_version() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    version: str = project["version"]
    return version


@pytest.mark.parametrize("command", ["runtimeclass-extender", "kubectl-runtimeclass"])
def test_version_is_pyprojects(tmp_path: Path, command: str) -> None:
    argv = EXTENDER if command == "runtimeclass-extender" else KUBECTL_PLUGIN
    done = run([*argv, "--version"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "runtimeclass-extender" if command == "runtimeclass-extender" else "kubectl",
        *(["runtimeclass"] if command == "kubectl-runtimeclass" else []),
        _pyproject_version(),
    ]


def test_readyz_reports_pyprojects_version(tmp_path: Path) -> None:
    with serving_example(tmp_path) as server:
        status, body = http(server.url("/readyz"))
    assert status == 200, body
    assert json.loads(body)["version"] == _pyproject_version()


def test_readyz_reports_the_version_before_it_is_ready_too(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig_for(tmp_path, f"http://127.0.0.1:{free_port()}")
    with serving(tmp_path, "--kubeconfig", str(kubeconfig)) as server:
        status, body = http(server.url("/readyz"))
    assert status == 503, body
    assert json.loads(body)["version"] == _pyproject_version()


# The modules that make the server slow to import: none of them may load to parse
# arguments, print help or the version (bench/cli_startup.py measures the time).
HEAVY_MODULES = ("aiohttp", "kubernetes_asyncio", "pydantic", "prometheus_client")

LIGHT_INVOCATIONS = {
    "--version": [*EXTENDER, "--version"],
    "--help": [*EXTENDER, "--help"],
    "serve --help": [*EXTENDER, "serve", "--help"],
    "explain --help": [*EXTENDER, "explain", "--help"],
    "audit --help": [*EXTENDER, "audit", "--help"],
    "kubectl plugin --help": [*KUBECTL_PLUGIN, "--help"],
    "a mistyped flag": [*EXTENDER, "classes", "--no-such-flag"],
}


@pytest.mark.parametrize("case", list(LIGHT_INVOCATIONS))
def test_parsing_imports_nothing_of_the_server(tmp_path: Path, case: str) -> None:
    argv = LIGHT_INVOCATIONS[case]
    # -X importtime lists every module imported, one line each, on stderr.
    done = run([argv[0], "-X", "importtime", *argv[1:]], tmp_path)
    assert done.returncode in (0, EXIT_USAGE), done.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }
    assert "argparse" in imported  # the check sees imports at all
    loaded = sorted(m for m in imported if m.split(".")[0] in HEAVY_MODULES)
    assert loaded == [], f"{case} imported {loaded[:10]}"


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never answers (nor reads)."""
    held: list[socket.socket] = []
    stop = threading.Event()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.1)

        def accept() -> None:
            while not stop.is_set():
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    continue
                held.append(connection)

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        try:
            yield listener.getsockname()[1]
        finally:
            stop.set()
            acceptor.join(timeout=5)
            for connection in held:
                connection.close()


@pytest.mark.parametrize(
    "argv",
    [["classes"], ["audit"], ["explain", "gvisor"], ["audit", "-n", "default"]],
    ids=["classes", "audit", "explain", "audit-namespace"],
)
def test_request_timeout_names_the_reason(tmp_path: Path, silent_server: int, argv: list[str]) -> None:
    server_url = f"http://127.0.0.1:{silent_server}"
    kubeconfig = _kubeconfig_for(tmp_path, server_url)
    done = extender(tmp_path, *argv, "--kubeconfig", str(kubeconfig), "--request-timeout", "1s")
    line = assert_one_line_error(done, f"cannot list from {server_url}")
    # Never "cannot list from URL: " with nothing after it.
    reason = line.split(f"cannot list from {server_url}:", 1)[1].strip()
    assert reason == "no answer within 1s (--request-timeout)", line


def test_kubectl_plugin_has_the_request_timeout_too(tmp_path: Path, silent_server: int) -> None:
    kubeconfig = _kubeconfig_for(tmp_path, f"http://127.0.0.1:{silent_server}")
    done = run(
        [*KUBECTL_PLUGIN, "classes", "--kubeconfig", str(kubeconfig), "--request-timeout", "500ms"], tmp_path
    )
    assert_one_line_error(done, "no answer within 0.5s (--request-timeout)")


@pytest.mark.parametrize("value", ["abc", "-1s", "1x", "1.5", ""])
def test_request_timeout_refuses_what_is_no_duration(tmp_path: Path, value: str) -> None:
    # kubectl refuses all but the negative one, which means nothing as a timeout.
    done = extender(tmp_path, "classes", f"--request-timeout={value}")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr
    assert "--request-timeout" in done.stderr and "1s, 2m, 3h" in done.stderr, done.stderr


def test_request_timeout_help_says_zero_waits_without_a_limit(tmp_path: Path) -> None:
    for command in ("classes", "explain", "audit"):
        text = _option_help(_help(tmp_path, [*EXTENDER, command]), "--request-timeout")
        assert "0 waits without a limit" in text and "default: 30s" in text, text


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--port", "0", "--cluster-file", "{cluster}", "--cluster-file", "{cluster}"],
        ["filter", "{request}", "--cluster-file", "{cluster}", "--cluster-file", "{cluster}"],
        ["explain", "gvisor", "--cluster-file", "{cluster}", "--cluster-file", "{cluster}"],
        ["classes", "--cluster-file", "{cluster}", "--cluster-file", "{cluster}"],
        ["audit", "--cluster-file", "{cluster}", "--cluster-file", "{cluster}"],
        ["replay", "{captures}", "--cluster-file", "{cluster}", "--cluster-file", "{cluster}"],
    ],
    ids=["serve", "filter", "explain", "classes", "audit", "replay"],
)
def test_cluster_file_given_twice_is_an_error(tmp_path: Path, captures: Path, argv: list[str]) -> None:
    values = {"cluster": str(EXAMPLE_CLUSTER), "request": str(EXAMPLE_REQUEST), "captures": str(captures)}
    done = extender(tmp_path, *(arg.format(**values) for arg in argv))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr
    assert "--cluster-file given twice: it takes one file" in done.stderr, done.stderr


def test_replay_of_a_file_says_it_wants_the_directory(tmp_path: Path, captures: Path) -> None:
    one_capture = capture_files(captures)[0]
    done = extender(tmp_path, "replay", str(one_capture))
    line = assert_one_line_error(done, str(one_capture), "is a file", "capture directory")
    assert "Errno" not in line, line


def test_filter_endpoint_refuses_a_pod_with_a_hint(tmp_path: Path) -> None:
    pod = json.loads(example_request())["Pod"]
    with serving_example(tmp_path) as server:
        answers = [
            post_json(server.url("/filter"), json.dumps({"apiVersion": "v1", "kind": "Pod", **pod}).encode()),
            post_json(server.url("/filter"), json.dumps(pod).encode()),  # kube-scheduler's form: no kind
        ]
    for status, body in answers:
        assert status == 400, body
        _assert_error_shape("filter: a Pod", status, body)
        message = _error_text(body)
        assert "got a Pod" in message and "ExtenderArgs" in message and "/explain" in message, message


def test_filter_command_refuses_a_pod_with_a_hint(tmp_path: Path) -> None:
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(json.loads(example_request())["Pod"]), encoding="utf-8")
    done = extender(tmp_path, "filter", str(pod_file), "--cluster-file", str(EXAMPLE_CLUSTER))
    assert_one_line_error(done, str(pod_file), "got a Pod", "ExtenderArgs", "/explain")


def _filter_series(metrics: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the production /filter metrics, by name and labels."""
    production = (
        "filter_requests_total",
        "filter_requests_by_runtimeclass_total",
        "nodes_rejected_total",
        "runtime_rejections_total",
        "filter_duration_seconds_count",
    )
    return {
        (name, tuple(sorted(labels.items()))): value
        for name, labels, value in metric_samples(metrics)
        if name.removeprefix(PREFIX) in production
    }


def test_replayed_requests_are_counted_apart(tmp_path: Path, captures: Path) -> None:
    replayed = PREFIX + "replayed_filter_requests_total"
    with serving_example(tmp_path) as server:
        before = scrape(server)
        done = extender(tmp_path, "replay", str(captures), "--url", server.url())
        assert done.returncode in (0, 1), done.stderr
        # A marked request the server refuses is counted apart too, by its outcome.
        status, _ = post_json(server.url("/filter"), b"{not json", **{REPLAY_HEADER: "1"})
        assert status == 400
        after = scrape(server)
        # An unmarked request still counts as kube-scheduler's.
        assert post_json(server.url("/filter"), example_request())[0] == 200
        last = scrape(server)
    sent = len(capture_files(captures))
    assert sent >= 1
    assert (metric_value(after, replayed, outcome="ok") or 0) - (
        metric_value(before, replayed, outcome="ok") or 0
    ) == sent
    assert (metric_value(after, replayed, outcome="bad_request") or 0) == 1
    # None of it in the production filter metrics.
    assert _filter_series(after) == _filter_series(before)
    assert (
        metric_value(last, PREFIX + "filter_requests_total", outcome="ok")
        == (metric_value(before, PREFIX + "filter_requests_total", outcome="ok") or 0) + 1
    )
