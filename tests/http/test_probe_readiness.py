"""The pod's readiness with self-managed webhook certificates: the kubelet probes
``/readyz`` on the probe port, and the webhook Service sends the API server's calls
only to ready pods, so that ``/readyz`` answers 503 while the pair the admission
listener serves is absent or untrusted by a caBundle, as the admission listener's
own ``/readyz`` does. The main port's ``/readyz`` (kube-scheduler's, on loopback) only
reports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from extender.http.admission_listener import create_admission_app
from extender.http.keys import WEBHOOK_CERTIFICATES
from extender.http.probe_listener import create_probe_app
from tests.support.apiserver import MUTATING_WEBHOOKS, FakeApiServer
from tests.support.apps import Client, ClientFactory, make_app
from tests.support.waiting import eventually
from tests.support.webhook_certificates import (
    CONFIGURATION,
    Clock,
    add_webhook_configurations,
    settled,
    start_keeper,
)


async def _status(client: Client, path: str = "/readyz") -> tuple[int, dict[str, Any]]:
    response = await client.get(path)
    return response.status, dict(await response.json())


async def test_the_probe_ports_readyz_waits_for_a_trusted_certificate(
    fake_apiserver: FakeApiServer, tmp_path: Path, aiohttp_client: ClientFactory
) -> None:
    add_webhook_configurations(fake_apiserver)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    main = make_app()
    main[WEBHOOK_CERTIFICATES] = replica.keeper
    probes = await aiohttp_client(create_probe_app(main))
    admission = await aiohttp_client(create_admission_app(main))
    scheduler = await aiohttp_client(main)

    async def statuses() -> tuple[int, int, int]:
        return (
            (await _status(probes))[0],
            (await _status(admission))[0],
            (await _status(scheduler))[0],
        )

    try:
        # Nothing served yet: not ready for the kubelet, as on the admission port.
        status, body = await _status(probes)
        assert status == 503 and body["status"] == "not ready"
        assert body["webhookCertificate"]["trusted"] is False
        assert await statuses() == (503, 503, 200)
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        assert await statuses() == (200, 200, 200)
        # The leader stops; a caBundle is taken back by hand: the served pair is no
        # longer trusted by both, and the pod leaves the Service's endpoints.
        lead = next(t for t in replica.tasks if t.get_name().endswith("-lead"))
        lead.cancel()
        fake_apiserver.modify(
            MUTATING_WEBHOOKS,
            CONFIGURATION,
            lambda obj: obj["webhooks"][0]["clientConfig"].pop("caBundle"),
        )

        async def untrusted() -> bool:
            return await statuses() == (503, 503, 200)

        await eventually(untrusted, what="the probe port not ready")
        status, body = await _status(probes)
        assert "does not hold" in body["webhookCertificate"]["reason"]
    finally:
        await replica.stop()


async def test_without_self_managed_certificates_the_probe_port_is_unchanged(
    aiohttp_client: ClientFactory,
) -> None:
    main: web.Application = make_app()
    probes = await aiohttp_client(create_probe_app(main))
    status, body = await _status(probes)
    assert status == 200 and "webhookCertificate" not in body
