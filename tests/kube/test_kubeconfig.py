"""Broken kubeconfigs: one line on stderr and exit status 2, through the real commands.

Each case is written to disk and handed to ``classes --kubeconfig`` and ``serve
--kubeconfig`` as subprocesses, the way an operator meets them: the point is what the
terminal shows (no parser trace), so nothing is imported from the package. The merge
cases set ``KUBECONFIG`` to several files and check kubectl's rules (client-go
clientcmd loader.go ``ClientConfigLoadingRules.Load``): the first file that sets
current-context wins, and the first definition of a name wins.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from extender.kube.api import request_json
from extender.kube.connect import connect
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.paths import REPO
from tests.support.ports import free_port

EXAMPLE_CLUSTER = REPO / "deploy" / "examples" / "cluster.yaml"
EXIT_USAGE = 2
# Only reached when a command hangs (serve got past its checks): the test then fails.
COMMAND_TIMEOUT_SECONDS = 30.0


# https: kubernetes-asyncio only reads certificate files for an https server, and the
# checks under test must not depend on that.
UNREACHABLE_SERVER = f"https://127.0.0.1:{free_port()}"


def kubeconfig(
    *,
    server: str | None = UNREACHABLE_SERVER,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    current: str | None = "main",
) -> dict[str, Any]:
    """A well-formed one-context kubeconfig; the keyword arguments break one part of it."""
    cluster_body: dict[str, Any] = {} if server is None else {"server": server}
    cluster_body.update(cluster or {})
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "main", "cluster": cluster_body}],
        "users": [{"name": "main", "user": user if user is not None else {"token": "t"}}],
        "contexts": [{"name": "main", "context": context or {"cluster": "main", "user": "main"}}],
    }
    if current is not None:
        config["current-context"] = current
    return config


def _dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)


@dataclass(frozen=True)
class Case:
    """A kubeconfig problem: the files to write, how to point at them, what to expect.

    ``files`` maps a path under the case directory to its text (or bytes). The first
    file is passed with --kubeconfig unless ``kubeconfig_env`` lists files for
    KUBECONFIG instead. ``expected`` strings must all appear in the one stderr line,
    after ``{dir}`` is replaced with the case directory.
    """

    files: dict[str, str | bytes]
    expected: tuple[str, ...]
    extra_args: tuple[str, ...] = ()
    kubeconfig_env: tuple[str, ...] = ()
    prepare: Callable[[Path], None] | None = field(default=None, compare=False)


def _unreadable(name: str) -> Callable[[Path], None]:
    def prepare(directory: Path) -> None:
        path = directory / name
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as a user that reads any file (root): cannot make a file unreadable")

    return prepare


NOT_A_CERTIFICATE = "this is not a PEM certificate\n"

CASES: dict[str, Case] = {
    "not valid YAML": Case(
        {"bad.yaml": "apiVersion: v1\nkind: Config: broken\n"},
        ("kubeconfig {dir}/bad.yaml: not valid YAML (line 2)",),
    ),
    "unclosed flow list": Case(
        {"bad.yaml": "apiVersion: v1\nclusters: [\n  - name: a\n"},
        ("kubeconfig {dir}/bad.yaml: not valid YAML (line",),
    ),
    "bytes that are not text": Case(
        {"bad.yaml": b"apiVersion: v1\nkind: \xc3\x28\n"}, ("{dir}/bad.yaml", "not valid YAML", "not UTF-8")
    ),
    "a list, not a mapping": Case(
        {"list.yaml": "- a\n- b\n"}, ("{dir}/list.yaml", "not a kubeconfig", "list")
    ),
    "a scalar, not a mapping": Case(
        {"text.yaml": "just some text\n"}, ("{dir}/text.yaml", "not a kubeconfig")
    ),
    "a cluster file, not a kubeconfig": Case(
        {"cluster.yaml": EXAMPLE_CLUSTER.read_text(encoding="utf-8")},
        ("{dir}/cluster.yaml", "not a kubeconfig", "List"),
    ),
    "clusters is not a list": Case(
        {"k.yaml": _dump({**kubeconfig(), "clusters": {"main": {"server": UNREACHABLE_SERVER}}})},
        ("{dir}/k.yaml", "clusters must be a list"),
    ),
    "a cluster without a name": Case(
        {"k.yaml": _dump({**kubeconfig(), "clusters": [{"cluster": {"server": UNREACHABLE_SERVER}}]})},
        ("{dir}/k.yaml", "clusters[0] has no name"),
    ),
    "a context defined twice in one file": Case(
        {"k.yaml": _dump({**kubeconfig(), "contexts": kubeconfig()["contexts"] * 2})},
        ("{dir}/k.yaml", 'context "main" is defined twice'),
    ),
    "no current-context": Case(
        {"k.yaml": _dump(kubeconfig(current=None))},
        ("{dir}/k.yaml", "no current-context", "--context", "main"),
    ),
    "current-context not defined": Case(
        {"k.yaml": _dump(kubeconfig(current="gone"))},
        ("{dir}/k.yaml", 'current-context "gone" is not defined', "main"),
    ),
    "--context not defined": Case(
        {"k.yaml": _dump(kubeconfig())},
        ("--context nope", "{dir}/k.yaml", "main"),
        extra_args=("--context", "nope"),
    ),
    "context names a missing cluster": Case(
        {"k.yaml": _dump(kubeconfig(context={"cluster": "elsewhere", "user": "main"}))},
        ('cluster "elsewhere"', "not defined", "{dir}/k.yaml"),
    ),
    "context names no cluster": Case(
        {"k.yaml": _dump(kubeconfig(context={"user": "main"}))},
        ('context "main" names no cluster', "{dir}/k.yaml"),
    ),
    "context names a missing user": Case(
        {"k.yaml": _dump(kubeconfig(context={"cluster": "main", "user": "somebody"}))},
        ('user "somebody"', "not defined", "{dir}/k.yaml"),
    ),
    "cluster without server": Case(
        {"k.yaml": _dump(kubeconfig(server=None))}, ('cluster "main" has no server', "{dir}/k.yaml")
    ),
    "certificate-authority missing": Case(
        {"k.yaml": _dump(kubeconfig(cluster={"certificate-authority": "/nonexistent/ca.crt"}))},
        ("certificate-authority /nonexistent/ca.crt: no such file", 'cluster "main"'),
    ),
    # Relative to the kubeconfig's directory, not the working directory (the repository).
    "relative certificate-authority missing": Case(
        {"k.yaml": _dump(kubeconfig(cluster={"certificate-authority": "certs/ca.crt"}))},
        ("certificate-authority {dir}/certs/ca.crt: no such file",),
    ),
    "certificate-authority is not a certificate": Case(
        {
            "k.yaml": _dump(kubeconfig(cluster={"certificate-authority": "ca.crt"})),
            "ca.crt": NOT_A_CERTIFICATE,
        },
        ("certificate-authority {dir}/ca.crt", "not a PEM CA certificate"),
    ),
    "certificate-authority unreadable": Case(
        {"k.yaml": _dump(kubeconfig(cluster={"certificate-authority": "ca.crt"})), "ca.crt": "x"},
        ("certificate-authority {dir}/ca.crt: cannot read it",),
        prepare=_unreadable("ca.crt"),
    ),
    # Readable by nobody, not even root: the one unreadable case that runs everywhere.
    "certificate-authority is a directory": Case(
        {"k.yaml": _dump(kubeconfig(cluster={"certificate-authority": "certs"})), "certs/ca.crt": "x"},
        ("certificate-authority {dir}/certs: cannot read it",),
    ),
    "client-certificate missing": Case(
        {"k.yaml": _dump(kubeconfig(user={"client-certificate": "user.crt", "client-key": "user.key"}))},
        ('user "main" client-certificate {dir}/user.crt: no such file',),
    ),
    "client-key missing": Case(
        {
            "k.yaml": _dump(kubeconfig(user={"client-certificate": "user.crt", "client-key": "user.key"})),
            "user.crt": NOT_A_CERTIFICATE,
        },
        ('user "main" client-key {dir}/user.key: no such file',),
    ),
    "client-key unreadable": Case(
        {
            "k.yaml": _dump(kubeconfig(user={"client-certificate": "user.crt", "client-key": "user.key"})),
            "user.crt": NOT_A_CERTIFICATE,
            "user.key": NOT_A_CERTIFICATE,
        },
        ("client-key {dir}/user.key: cannot read it",),
        prepare=_unreadable("user.key"),
    ),
    "client-certificate without client-key": Case(
        {"k.yaml": _dump(kubeconfig(user={"client-certificate-data": "eA=="}))},
        ('user "main" has a client-certificate but no client-key',),
    ),
    "tokenFile missing": Case(
        {"k.yaml": _dump(kubeconfig(user={"tokenFile": "token"}))},
        ('user "main" tokenFile {dir}/token: no such file',),
    ),
    # KUBECONFIG lists: a file that does not parse is an error even if unused (loader.go).
    "KUBECONFIG with one broken file": Case(
        {"a.yaml": _dump(kubeconfig()), "b.yaml": "kind: Config: broken\n"},
        ("kubeconfig {dir}/b.yaml: not valid YAML (line 1)",),
        kubeconfig_env=("a.yaml", "b.yaml"),
    ),
    # The first current-context wins: a.yaml's "main", defined only in b.yaml, whose
    # cluster has no server. (The second file's current-context would be fine.)
    "KUBECONFIG current-context from the first file": Case(
        {
            "a.yaml": _dump({"apiVersion": "v1", "kind": "Config", "current-context": "main"}),
            "b.yaml": _dump({**kubeconfig(server=None), "current-context": "other"}),
        },
        ('kubeconfig {dir}/b.yaml: cluster "main" has no server',),
        kubeconfig_env=("a.yaml", "b.yaml"),
    ),
}


def _environment(home: Path, kubeconfig_env: str | None) -> dict[str, str]:
    # Only what the case sets: no settings, kubeconfig or service account of the host.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNTIMECLASS_EXTENDER_", "KUBERNETES_SERVICE_")) and k != "KUBECONFIG"
    }
    env["HOME"] = str(home)
    if kubeconfig_env is not None:
        env["KUBECONFIG"] = kubeconfig_env
    return env


def _write_case(case: Case, directory: Path) -> list[str]:
    """Write the case's files; the kubeconfig arguments to pass (none for KUBECONFIG)."""
    directory.mkdir()
    for name, content in case.files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    if case.prepare is not None:
        case.prepare(directory)
    if case.kubeconfig_env:
        return [*case.extra_args]
    return ["--kubeconfig", str(directory / next(iter(case.files))), *case.extra_args]


COMMANDS = {
    "classes": ["classes"],
    "serve": ["serve", "--host", "127.0.0.1", "--port", "0"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_kubeconfig_is_one_line_and_exit_2(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    directory = tmp_path / "case"
    args = _write_case(case, directory)
    env_value = os.pathsep.join(str(directory / n) for n in case.kubeconfig_env) or None
    env = _environment(tmp_path, env_value)
    # Both commands at once: each spends most of its second importing.
    processes = {
        command: subprocess.Popen(
            [sys.executable, "-m", "extender", *argv, *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command, argv in COMMANDS.items()
    }
    try:
        results = {
            command: p.communicate(timeout=COMMAND_TIMEOUT_SECONDS) for command, p in processes.items()
        }
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    expected = [text.format(dir=directory) for text in case.expected]
    for command, (_, err) in results.items():
        lines = err.splitlines()
        assert processes[command].returncode == EXIT_USAGE, f"{command}: {err}"
        assert "Traceback" not in err, f"{command}: {err}"
        assert len(lines) == 1, f"{command}: expected one line on stderr, got {err!r}"
        for text in expected:
            assert text in lines[0], f"{command}: {text!r} not in {lines[0]!r}"


def test_explain_reports_a_bad_kubeconfig_the_same_way(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Config: broken\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "extender", "explain", "gvisor", "--kubeconfig", str(bad)],
        cwd=REPO,
        env=_environment(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == EXIT_USAGE
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"kubeconfig {bad}: not valid YAML (line 2)" in done.stderr


def _classes_error(kubeconfig_path: Path, home: Path) -> str:
    """stderr of ``classes`` against a kubeconfig whose server is not listening."""
    done = subprocess.run(
        [sys.executable, "-m", "extender", "classes", "--kubeconfig", str(kubeconfig_path)],
        cwd=REPO,
        env=_environment(home, None),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def test_good_relative_certificate_files_pass_the_checks(tmp_path: Path) -> None:
    """Relative paths resolved against the kubeconfig's directory reach the connection."""
    ca = trustme.CA()
    leaf = ca.issue_cert("runtimeclass-extender")
    certs = tmp_path / "conf" / "certs"
    certs.mkdir(parents=True)
    ca.cert_pem.write_to_path(str(certs / "ca.crt"))
    leaf.cert_chain_pems[0].write_to_path(str(certs / "user.crt"))
    leaf.private_key_pem.write_to_path(str(certs / "user.key"))
    config = tmp_path / "conf" / "kubeconfig"
    config.write_text(
        _dump(
            kubeconfig(
                cluster={"certificate-authority": "certs/ca.crt"},
                user={"client-certificate": "certs/user.crt", "client-key": "certs/user.key"},
            )
        ),
        encoding="utf-8",
    )
    # The only complaint left is the server that does not answer.
    err = _classes_error(config, tmp_path)
    assert UNREACHABLE_SERVER in err
    for word in ("certificate", "client-key", "no such file", "kubeconfig"):
        assert word not in err, err


def test_inline_certificate_data_needs_no_files(tmp_path: Path) -> None:
    ca = trustme.CA()
    leaf = ca.issue_cert("runtimeclass-extender")

    def b64(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    config = tmp_path / "kubeconfig"
    config.write_text(
        _dump(
            kubeconfig(
                cluster={"certificate-authority-data": b64(ca.cert_pem.bytes())},
                user={
                    "client-certificate-data": b64(leaf.cert_chain_pems[0].bytes()),
                    "client-key-data": b64(leaf.private_key_pem.bytes()),
                },
            )
        ),
        encoding="utf-8",
    )
    err = _classes_error(config, tmp_path)
    assert UNREACHABLE_SERVER in err
    assert "certificate" not in err and "kubeconfig" not in err, err


def _serving_kubeconfig(
    server: FakeApiServer, *, current: str, context: str, server_url: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": "shared", "cluster": {"server": server_url}}],
        "users": [{"name": "shared", "user": {"token": server.token} if server.token else {}}],
        "contexts": [{"name": context, "context": {"cluster": "shared", "user": "shared"}}],
    }


async def test_kubeconfig_list_merges_as_kubectl_does(fake_apiserver: FakeApiServer, tmp_path: Path) -> None:
    """KUBECONFIG=first:second, where the second file disagrees on everything it shares.

    kubectl takes the first file's current-context and the first file's definition of
    the cluster named "shared"; taking either from the second file points at a port
    nothing listens on.
    """
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc-merged", handler="runc"))
    first = tmp_path / "first.yaml"
    second = tmp_path / "second.yaml"
    first.write_text(
        _dump(
            _serving_kubeconfig(fake_apiserver, current="good", context="good", server_url=fake_apiserver.url)
        )
    )
    second.write_text(
        _dump(
            _serving_kubeconfig(fake_apiserver, current="bad", context="bad", server_url=UNREACHABLE_SERVER)
        )
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "extender",
        "classes",
        "-o",
        "json",
        cwd=REPO,
        env=_environment(tmp_path, f"{first}{os.pathsep}{second}"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_SECONDS)
    assert process.returncode == 0, err.decode()
    assert b"runc-merged" in out


@pytest.mark.parametrize(
    ("environ", "trusted"),
    [
        ({}, False),
        ({"NO_PROXY": "10.0.0.0/8"}, False),
        ({"HTTPS_PROXY": "http://proxy.example:3128"}, True),
        ({"http_proxy": "http://proxy.example:3128"}, True),
        ({"HTTPS_PROXY": ""}, False),
    ],
)
async def test_the_session_trusts_the_environment_only_to_find_a_proxy(
    fake_apiserver: FakeApiServer, tmp_path: Path, environ: dict[str, str], trusted: bool
) -> None:
    """aiohttp reads ~/.netrc in a worker thread for every request of a session that
    trusts the environment (ClientSession._request), a cost every LIST, watch and write
    would pay for nothing: the requests carry their own Authorization header. Only a
    proxy, which client-go also takes from the environment, is worth it."""
    kubeconfig = fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    conn = await connect(kubeconfig=str(kubeconfig), environ=environ, home=tmp_path)
    try:
        assert conn.api.rest_client.pool_manager.trust_env is trusted
        if not trusted:
            # Requests still go through (and nothing runs in the executor for them).
            fake_apiserver.add(NODES, make_node("n1"))
            loop = asyncio.get_running_loop()
            calls: list[Any] = []
            original = loop.run_in_executor

            def counting(*args: Any) -> Any:
                calls.append(args)
                return original(*args)

            loop.run_in_executor = counting  # type: ignore[method-assign]
            try:
                nodes = await request_json(conn.api, "GET", "/api/v1/nodes")
            finally:
                loop.run_in_executor = original  # type: ignore[method-assign]
            assert [n["metadata"]["name"] for n in nodes["items"]] == ["n1"]
            assert calls == []
    finally:
        await conn.api.close()


async def test_every_request_asks_the_configuration_for_its_token(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Requests go out on the client's session without its call_api, but still take
    their token from the configuration each time, running its refresh hook (what keeps
    an exec plugin's or a rotated in-cluster token fresh under a long watch)."""
    kubeconfig = fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    conn = await connect(kubeconfig=str(kubeconfig), environ={}, home=tmp_path)
    rotated = fake_apiserver.token_for("rotated")
    refreshed: list[bool] = []

    async def refresh(configuration: Any) -> None:
        refreshed.append(True)
        configuration.api_key["BearerToken"] = f"Bearer {rotated}"

    conn.api.configuration.refresh_api_key_hook = refresh
    try:
        nodes = await request_json(conn.api, "GET", "/api/v1/nodes")
    finally:
        await conn.api.close()
    assert refreshed == [True] and nodes["kind"] == "NodeList"
    (recorded,) = fake_apiserver.requests
    assert recorded.user == "rotated"
