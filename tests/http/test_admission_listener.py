"""``serve --admission-port``: the webhook's own HTTPS listener, over real sockets.

``serve`` itself runs in the test's event loop (as the console command runs it), with
throwaway certificates from trustme; the ports are read from its log records. The
start-up failures run through the real command line, where exit status and stderr
are what an operator sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gc
import json
import logging
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
import yaml

from extender import cli
from extender.http import serve as serve_module
from extender.http.admission import PATH
from extender.settings import ServeSettings, default_serve_settings
from tests.support.admission import request, review, runtime_class
from tests.support.apps import AppFactory, ClientFactory
from tests.support.docs import page
from tests.support.paths import EXAMPLE_CLUSTER, REPO
from tests.support.waiting import eventually

EXAMPLE_REQUEST = REPO / "deploy" / "examples" / "filter-request.json"
ANNOTATION = "runtimeclass-extender.dev/node-selector-term"
JSON = {"Content-Type": "application/json"}
# What a refused handshake looks like from the client's side (see tests/http/test_tls.py).
REFUSED = (aiohttp.ClientError, ssl.SSLError, ConnectionError)
STARTUP_SECONDS = 20.0
COMMAND_TIMEOUT_SECONDS = 60.0


@dataclass
class Pki:
    ca_file: Path
    cert: Path
    key: Path
    client: trustme.LeafCert


def _write_leaf(leaf: trustme.LeafCert, cert: Path, key: Path) -> None:
    # Write-then-rename, as the kubelet's atomic Secret update does.
    for target, pems in ((cert, leaf.cert_chain_pems), (key, [leaf.private_key_pem])):
        scratch = target.with_suffix(".new")
        scratch.write_bytes(b"".join(pem.bytes() for pem in pems))
        scratch.replace(target)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    _write_leaf(ca.issue_cert("127.0.0.1"), cert, key)
    return Pki(ca_file=ca_file, cert=cert, key=key, client=ca.issue_cert("runtimeclass-scheduler"))


@dataclass
class Running:
    port: int
    admission_port: int


def _port_of(caplog: pytest.LogCaptureFixture, message: str) -> int | None:
    for record in caplog.records:
        if record.name == "extender" and record.getMessage() == message:
            return int(str(record.__dict__["listen"]).rsplit(":", 1)[1])
    return None


@contextlib.asynccontextmanager
async def running(settings: ServeSettings, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Running]:
    """``serve(settings)`` in this loop until the block ends (then stopped as on SIGTERM's
    way out: its cleanup runs)."""
    caplog.set_level(logging.INFO, logger="extender")
    task = asyncio.create_task(serve_module.serve(settings))
    try:

        def started() -> bool:
            if task.done():
                task.result()  # raises what stopped serve
                raise AssertionError("serve returned before serving")
            return _port_of(caplog, "serving") is not None

        await eventually(started, timeout=STARTUP_SECONDS, what="serve to start")
        main = _port_of(caplog, "serving")
        admission = _port_of(caplog, "serving admission webhook")
        assert main is not None and admission is not None
        yield Running(main, admission)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.unfreeze()  # serve freezes what it loaded; give the test process its collector back


def _settings(pki: Pki, **overrides: Any) -> ServeSettings:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "cluster_file": str(EXAMPLE_CLUSTER),
        "admission_port": 0,
        "admission_tls_cert_file": str(pki.cert),
        "admission_tls_key_file": str(pki.key),
    }
    return default_serve_settings(**{**values, **overrides})


def _trusting(pki: Pki | Path, client: trustme.LeafCert | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file if isinstance(pki, Pki) else pki))
    if client is not None:
        client.configure_cert(context)
    return context


async def _request(
    method: str, url: str, *, ssl_context: ssl.SSLContext | None = None, body: Any = None
) -> tuple[int, Any]:
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=JSON, ssl=ssl_context or False) as response,
    ):
        text = await response.text()
        return response.status, json.loads(text) if text.startswith(("{", "[")) else text


def _reviews_counted(metrics: str) -> float:
    prefix = "runtimeclass_extender_admission_reviews_total{"
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(prefix))


# ----- serving -------------------------------------------------------------------------


async def test_webhook_over_https_on_its_port_and_filter_only_on_the_main_port(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(_settings(pki), caplog) as ports:
        webhook = f"https://127.0.0.1:{ports.admission_port}"
        main = f"http://127.0.0.1:{ports.port}"
        assert ports.admission_port != ports.port

        # A class no example node carries the label of: allowed, with a warning.
        allowed = review(
            request(runtime_class("nowhere", node_selector={"example.com/none": "x"}), uid="over-https")
        )
        status, answer = await _request("POST", webhook + PATH, ssl_context=_trusting(pki), body=allowed)
        assert status == 200
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == "over-https"
        assert answer["response"]["allowed"] is True
        assert answer["response"]["warnings"]

        # The scheduler's verbs and the rest are not on the webhook's port.
        filter_request = json.loads(EXAMPLE_REQUEST.read_text())
        status, answer = await _request(
            "POST", webhook + "/filter", ssl_context=_trusting(pki), body=filter_request
        )
        assert status == 404
        assert "error" in answer
        for path in ("/metrics", "/explain/runtimeclasses/gvisor"):
            assert (await _request("GET", webhook + path, ssl_context=_trusting(pki)))[0] == 404
        # Probes may use it.
        status, ready = await _request("GET", webhook + "/readyz", ssl_context=_trusting(pki))
        assert (status, ready["status"]) == (200, "ready")
        assert (status, ready) == await _request("GET", main + "/readyz")
        assert (await _request("GET", webhook + "/healthz", ssl_context=_trusting(pki)))[0] == 200
        # HTTPS only.
        with pytest.raises(REFUSED):
            status, _ = await _request("GET", f"http://127.0.0.1:{ports.admission_port}/readyz")
            raise aiohttp.ClientError(f"answered plain HTTP with {status}")

        # The main port is as it was: plain HTTP, /filter, and the webhook path too.
        status, answer = await _request("POST", main + "/filter", body=filter_request)
        assert status == 200
        assert sorted(answer["NodeNames"]) == ["gvisor-1", "gvisor-2"]  # in any order
        status, answer = await _request(
            "POST", main + PATH, body=review(request(runtime_class("plain"), uid="on-main"))
        )
        assert (status, answer["response"]["uid"], answer["response"]["allowed"]) == (200, "on-main", True)

        # One registry: each review counted once, whichever listener answered it.
        status, metrics = await _request("GET", main + "/metrics")
        assert status == 200
        assert _reviews_counted(metrics) == 2


async def test_webhook_needs_no_client_certificate_where_the_main_port_does(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(
        pki,
        tls_cert_file=str(pki.cert),
        tls_key_file=str(pki.key),
        client_ca_file=str(pki.ca_file),
        # The webhook's pair defaults to the main listener's.
        admission_tls_cert_file=None,
        admission_tls_key_file=None,
    )
    async with running(settings, caplog) as ports:
        status, answer = await _request(
            "POST",
            f"https://127.0.0.1:{ports.admission_port}{PATH}",
            ssl_context=_trusting(pki),
            body=review(request(runtime_class("plain"), uid="no-client-cert")),
        )
        assert (status, answer["response"]["uid"]) == (200, "no-client-cert")
        # The main port still requires one ...
        main = f"https://127.0.0.1:{ports.port}/readyz"
        with pytest.raises(REFUSED):
            await _request("GET", main, ssl_context=_trusting(pki))
        # ... and accepts the scheduler's.
        assert (await _request("GET", main, ssl_context=_trusting(pki, pki.client)))[0] == 200


async def test_rotated_webhook_certificate_is_served_without_restart(
    pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reloaders serve attaches, checking often enough for a test.
    fast = functools.partial(serve_module.attach_certificate_reloader, interval=0.05)
    monkeypatch.setattr(serve_module, "attach_certificate_reloader", fast)
    async with running(_settings(pki), caplog) as ports:
        url = f"https://127.0.0.1:{ports.admission_port}/readyz"
        assert (await _request("GET", url, ssl_context=_trusting(pki)))[0] == 200

        new_ca = trustme.CA()
        new_ca_file = tmp_path / "new-ca.crt"
        new_ca.cert_pem.write_to_path(str(new_ca_file))
        _write_leaf(new_ca.issue_cert("127.0.0.1"), pki.cert, pki.key)

        async def new_certificate_served() -> bool:
            try:
                return (await _request("GET", url, ssl_context=_trusting(new_ca_file)))[0] == 200
            except REFUSED:
                return False

        await eventually(new_certificate_served, timeout=10, what="the new certificate")
        with pytest.raises(REFUSED):
            await _request("GET", url, ssl_context=_trusting(pki))


# ----- refusing to start ----------------------------------------------------------------


def _serve_args(*extra: str) -> list[str]:
    return ["serve", "--cluster-file", str(EXAMPLE_CLUSTER), "--host", "127.0.0.1", "--port", "0", *extra]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"expected one line, got {err!r}"
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        # No certificate anywhere: name both ways of giving one.
        (["--admission-port", "0"], ["admission-tls-cert-file", "tls-cert-file"]),
        (["--admission-port", "0", "--admission-tls-cert-file", "{cert}"], ["admission-tls-key-file"]),
        (["--admission-port", "0", "--admission-tls-key-file", "{key}"], ["admission-tls-cert-file"]),
        (["--admission-tls-cert-file", "{cert}", "--admission-tls-key-file", "{key}"], ["admission-port"]),
        (["--admission-port", "0", "--admission-tls-cert-file", "{missing}", "--admission-tls-key-file", "{key}"],
         ["admission-tls-cert-file", "{missing}"]),
        (["--admission-port", "0", "--admission-tls-cert-file", "{key}", "--admission-tls-key-file", "{key}"],
         ["admission-tls-cert-file", "cannot load"]),
        (["--admission-port", "70000", "--admission-tls-cert-file", "{cert}", "--admission-tls-key-file", "{key}"],
         ["--admission-port", "70000"]),
    ],
)  # fmt: skip
def test_bad_admission_settings_stop_with_one_line(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], named: list[str]
) -> None:
    paths = {"cert": str(pki.cert), "key": str(pki.key), "missing": str(tmp_path / "missing.crt")}
    assert cli.main(_serve_args(*(arg.format(**paths) for arg in extra))) == 2
    line = _one_line(capsys.readouterr().err)
    for text in named:
        assert text.format(**paths) in line, line


def test_admission_port_equal_to_the_main_port_is_refused(
    pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["serve", "--cluster-file", str(EXAMPLE_CLUSTER), "--port", "18443", "--admission-port", "18443"]
    args += ["--admission-tls-cert-file", str(pki.cert), "--admission-tls-key-file", str(pki.key)]
    assert cli.main(args) == 2
    line = _one_line(capsys.readouterr().err)
    assert "admission-port 18443" in line and "port" in line


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds (bound and listening) while it runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_busy_admission_port_is_one_line_and_exit_2(pki: Pki, busy_port: int) -> None:
    args = _serve_args(
        "--admission-port",
        str(busy_port),
        "--admission-tls-cert-file",
        str(pki.cert),
        "--admission-tls-key-file",
        str(pki.key),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTIMECLASS_EXTENDER_")}
    done = subprocess.run(
        [sys.executable, "-m", "extender", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    line = _one_line(done.stderr)  # refused before anything was loaded or logged
    assert f"--admission-port {busy_port}" in line, line
    assert os.strerror(errno.EADDRINUSE) in line, line


# ----- the docs' transcript (docs/admission-webhook.md) ------------------------------------------------------------

WEBHOOK = REPO / "deploy" / "components" / "admission-webhook" / "webhook.yaml"


def _fenced_block(text: str, opening: str) -> str:
    """The body of the fenced block whose first lines are ``opening``."""
    start = text.index(opening)
    body_start = text.index("\n", start) + 1
    return text[body_start : text.index("\n```", body_start)]


async def test_docs_transcript_is_what_the_webhook_answers(
    aiohttp_client: ClientFactory, make_app: AppFactory
) -> None:
    """docs/admission-webhook.md: each line kubectl prints, from the extender's answers
    for the page's file against the example cluster, in kubectl's words."""
    readme = page("admission-webhook.md")
    manifest = _fenced_block(readme, "```yaml\n# new-runtimeclasses.yaml")
    transcript = _fenced_block(readme, "```console\n$ kubectl apply -f new-runtimeclasses.yaml").splitlines()
    webhook_name = yaml.safe_load(WEBHOOK.read_text())["webhooks"][0]["name"]
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))

    expected: list[str] = []
    errors: list[str] = []  # kubectl apply reports failures after every object
    for obj in yaml.safe_load_all(manifest):
        name = obj["metadata"]["name"]
        answer = await client.post(PATH, json=review(request(obj)))
        assert answer.status == 200
        response = (await answer.json())["response"]
        # kubectl prints each Warning header the API server passes on as "Warning: <text>".
        expected += [f"Warning: {warning}" for warning in response.get("warnings", [])]
        if response["allowed"]:
            expected.append(f"runtimeclass.node.k8s.io/{name} created")
        else:
            # The API server's ToStatusErr wording; kubectl's "Error from server (<reason>)".
            status = response["status"]
            errors.append(
                f'Error from server ({status["reason"]}): error when creating "new-runtimeclasses.yaml": '
                f'admission webhook "{webhook_name}" denied the request: {status["message"]}'
            )
    assert transcript[1:] == expected + errors
    assert any(line.startswith("Warning: ") for line in transcript)
