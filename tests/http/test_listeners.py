"""``serve --probe-port`` and self-managed webhook certificates, over real sockets.

``/filter`` stays on the main listener (loopback in deploy/); the probes and the
metrics get a listener of their own that answers nothing else; with
``webhook-certificate-secret`` the admission listener serves the certificate the keeper
keeps, and its ``/readyz`` waits until both caBundles trust it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from extender import cli
from extender.http import serve as serve_module
from extender.http.admission import PATH, POD_PATH
from extender.settings import ServeSettings, SettingsError, default_serve_settings
from tests.support.apiserver import (
    NODES,
    RUNTIME_CLASSES,
    SECRETS,
    FakeApiServer,
    make_node,
    make_runtime_class,
)
from tests.support.paths import EXAMPLE_CLUSTER, REPO
from tests.support.waiting import eventually
from tests.support.webhook_certificates import (
    CONFIGURATION,
    DNS_NAME,
    MUTATING_HOOK,
    NAMESPACE,
    SECRET,
    add_webhook_configurations,
    ca_bundles,
)

EXAMPLE_REQUEST = json.loads((REPO / "deploy" / "examples" / "filter-request.json").read_text())
STARTUP_SECONDS = 20.0


def _address_of(caplog: pytest.LogCaptureFixture, message: str) -> tuple[str, int] | None:
    for record in caplog.records:
        if record.name == "extender" and record.getMessage() == message:
            host, port = str(record.__dict__["listen"]).rsplit(":", 1)
            return host, int(port)
    return None


@contextlib.asynccontextmanager
async def running(
    settings: ServeSettings, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[dict[str, tuple[str, int]]]:
    """``serve(settings)`` in this loop; the listeners' addresses by log message."""
    caplog.set_level(logging.INFO, logger="extender")
    task = asyncio.create_task(serve_module.serve(settings))
    try:

        def started() -> bool:
            if task.done():
                task.result()
                raise AssertionError("serve returned before serving")
            return _address_of(caplog, "serving") is not None

        await eventually(started, timeout=STARTUP_SECONDS, what="serve to start")
        found = {
            message: address
            for message in ("serving", "serving probes", "serving admission webhook")
            if (address := _address_of(caplog, message)) is not None
        }
        yield found
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gc.unfreeze()


async def _call(
    method: str, url: str, *, body: Any = None, ssl_context: ssl.SSLContext | bool = False
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=body, ssl=ssl_context) as response,
    ):
        text = await response.text()
        return response.status, json.loads(text) if text.startswith("{") else text


async def test_filter_is_not_on_the_probe_port(caplog: pytest.LogCaptureFixture) -> None:
    settings = default_serve_settings(
        host="127.0.0.1", port=0, probe_port=0, probe_host="127.0.0.1", cluster_file=str(EXAMPLE_CLUSTER)
    )
    async with running(settings, caplog) as listeners:
        main = "http://127.0.0.1:{}".format(listeners["serving"][1])
        probes = "http://127.0.0.1:{}".format(listeners["serving probes"][1])
        assert listeners["serving"][1] != listeners["serving probes"][1]
        status, answer = await _call("POST", probes + "/filter", body=EXAMPLE_REQUEST)
        assert status == 404 and answer["error"] == "not found"
        for path in ("/explain/runtimeclasses/gvisor", "/explain/runtimeclasses"):
            assert (await _call("GET", probes + path))[0] == 404
        for path in (PATH, POD_PATH):
            assert (await _call("POST", probes + path, body={}))[0] == 404
        # What the kubelet and a scraper ask for is there, the same answers as on the main port.
        for path in ("/healthz", "/readyz"):
            assert await _call("GET", probes + path) == await _call("GET", main + path)
        status, metrics = await _call("GET", probes + "/metrics")
        assert status == 200 and "runtimeclass_extender_nodes" in metrics
        # /filter on the main port, as the scheduler calls it.
        status, answer = await _call("POST", main + "/filter", body=EXAMPLE_REQUEST)
        # Passing names come in no particular order (docs/reference.md, the /filter rules).
        assert status == 200 and sorted(answer["NodeNames"]) == ["gvisor-1", "gvisor-2"]


async def test_the_deployments_shape_filter_on_loopback_probes_on_every_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """deploy/base: --host=127.0.0.1 --probe-port --probe-host=0.0.0.0."""
    settings = default_serve_settings(
        host="127.0.0.1", port=0, probe_port=0, probe_host="0.0.0.0", cluster_file=str(EXAMPLE_CLUSTER)
    )
    async with running(settings, caplog) as listeners:
        assert listeners["serving"][0] == "127.0.0.1"
        assert listeners["serving probes"][0] == "0.0.0.0"
        probes = "http://127.0.0.1:{}".format(listeners["serving probes"][1])
        assert (await _call("GET", probes + "/readyz"))[0] == 200
        assert (await _call("POST", probes + "/filter", body=EXAMPLE_REQUEST))[0] == 404


async def test_without_probe_port_nothing_changes(caplog: pytest.LogCaptureFixture) -> None:
    settings = default_serve_settings(host="127.0.0.1", port=0, cluster_file=str(EXAMPLE_CLUSTER))
    async with running(settings, caplog) as listeners:
        assert set(listeners) == {"serving"}
        main = "http://127.0.0.1:{}".format(listeners["serving"][1])
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await _call("GET", main + path))[0] == 200


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"port": 8888, "probe_port": 8888}, "probe-port 8888 is also port"),
        (
            {
                "admission_port": 9443,
                "probe_port": 9443,
                "admission_tls_cert_file": "c",
                "admission_tls_key_file": "k",
            },
            "also admission-port",
        ),
        ({"webhook_certificate_secret": "s"}, "webhook-certificate-secret is set but admission-port is not"),
        (
            {"webhook_certificate_secret": "s", "admission_port": 9443, "cluster_file": "f"},
            "needs a live cluster",
        ),
    ],
)
def test_listener_settings_that_cannot_work_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        default_serve_settings(**overrides)


def test_admission_files_win_over_self_managed_certificates() -> None:
    """The cert-manager sub-components add the files to a deployment that names the
    Secret too: the files are used, and a cluster file is then fine."""
    settings = default_serve_settings(
        admission_port=9443,
        admission_tls_cert_file="tls.crt",
        admission_tls_key_file="tls.key",
        webhook_certificate_secret="s",
        cluster_file="f",
    )
    from extender.http.tls import admission_tls_files

    files = admission_tls_files(settings)
    assert files is not None and files.cert_file == "tls.crt"


def test_the_listener_flags_parse(tmp_path: Path) -> None:
    namespace = cli.build_parser().parse_args(
        [
            "serve",
            "--host=127.0.0.1",
            "--probe-port=8081",
            "--probe-host=0.0.0.0",
            "--admission-port=8443",
            "--admission-host=0.0.0.0",
            "--webhook-certificate-secret=runtimeclass-extender-webhook-certificate",
        ]
    )
    from extender.settings import resolve_serve

    settings = resolve_serve(namespace, environ={})
    assert (settings.probe_port, settings.probe_host, settings.admission_host) == (8081, "0.0.0.0", "0.0.0.0")
    assert settings.webhook_certificate_secret == "runtimeclass-extender-webhook-certificate"
    # No pod webhook unless its component names it (the API server's policies may do its job).
    assert (
        settings.webhook_service,
        settings.webhook_validating_configuration,
        settings.webhook_mutating_configuration,
    ) == (
        "runtimeclass-extender-webhook",
        "runtimeclass-extender",
        None,
    )
    with_pod_webhook = resolve_serve(
        cli.build_parser().parse_args(["serve", "--webhook-mutating-configuration=runtimeclass-extender"]),
        environ={},
    )
    assert with_pod_webhook.webhook_mutating_configuration == "runtimeclass-extender"


@pytest.mark.parametrize("leader_elect", [False, True], ids=["single", "leader-elect"])
@pytest.mark.parametrize("pod_webhook", [True, False], ids=["pod-webhook", "pod-admission-policy"])
async def test_self_managed_webhook_certificates_end_to_end(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    leader_elect: bool,
    pod_webhook: bool,
) -> None:
    """With the pod webhook (components/pod-webhook names its configuration) the CA goes
    into both configurations; without it (the API server's policies admit pods) into
    the RuntimeClass webhook's alone, and a MutatingWebhookConfiguration left behind is
    not touched (its right is not granted then)."""
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    settings = default_serve_settings(
        host="127.0.0.1",
        port=0,
        probe_port=0,
        probe_host="127.0.0.1",
        admission_port=0,
        admission_host="127.0.0.1",
        kubeconfig=str(fake_kubeconfig),
        webhook_certificate_secret=SECRET,
        webhook_mutating_configuration=CONFIGURATION if pod_webhook else None,
        leader_elect=leader_elect,
        leader_elect_lease_duration=1.0,
        leader_elect_renew_deadline=0.6,
        leader_elect_retry_period=0.1,
    )
    async with running(settings, caplog) as listeners:
        admission = "https://127.0.0.1:{}".format(listeners["serving admission webhook"][1])
        probes = "http://127.0.0.1:{}".format(listeners["serving probes"][1])

        await eventually(
            lambda: fake_apiserver.get(SECRETS, SECRET, namespace=NAMESPACE) is not None,
            what="the Secret created",
        )
        # No webhook configuration yet: no caBundle trusts the new pair, so it is not
        # served (the admission listener refuses handshakes), and the pod is not ready
        # (the probe port), so the webhook Service sends it no call.
        with pytest.raises(aiohttp.ClientError):
            await _call("GET", admission + "/readyz")
        status, body = await _call("GET", probes + "/readyz")
        assert status == 503 and body["status"] == "not ready"
        assert body["webhookCertificate"]["trusted"] is False
        assert body["webhookCertificate"]["reason"] == "no certificate is being served"
        status, body = await _call("GET", "http://127.0.0.1:{}/readyz".format(listeners["serving"][1]))
        assert status == 200  # kube-scheduler's: /filter does not depend on it

        add_webhook_configurations(fake_apiserver)

        async def trusted() -> bool:
            try:
                return (await _call("GET", admission + "/readyz"))[0] == 200
            except aiohttp.ClientError:
                return False  # not serving yet

        await eventually(trusted, what="both caBundles trusting the served certificate")
        status, body = await _call("GET", probes + "/readyz")
        assert status == 200 and body["webhookCertificate"]["trusted"] is True
        bundles = ca_bundles(fake_apiserver)
        if not pod_webhook:
            assert bundles.pop(MUTATING_HOOK) == b""
        assert bundles
        for bundle in bundles.values():
            context = ssl.create_default_context(cadata=bundle.decode())
            async with (
                aiohttp.ClientSession() as session,
                session.get(admission + "/healthz", ssl=context, server_hostname=DNS_NAME) as response,
            ):
                assert response.status == 200
        status, metrics = await _call("GET", probes + "/metrics")
        assert "runtimeclass_extender_webhook_certificate_expiry_timestamp_seconds" in metrics
        assert "runtimeclass_extender_webhook_certificate_trusted 1.0" in metrics
        assert fake_apiserver.get("validatingwebhookconfigurations", CONFIGURATION) is not None
