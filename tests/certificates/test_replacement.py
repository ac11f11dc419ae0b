"""A new CA while replicas serve: the Secret deleted (the documented fix for a bad
certificate) or edited by hand. Two replicas, each with its own informers and its own
TLS listener, one leading; the test plays the API server, dialling both listeners
without pause and verifying each handshake against the caBundle stored at that
moment, while every listener checks, at the moment it picks a certificate, that both
stored caBundles trust it. The pod webhook is ``failurePolicy: Fail``: any failed
handshake is a pod that could not be created."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from extender.certificates.authority import new_ca, new_serving, read_bundle
from extender.certificates.secret import CA_CERT, CA_KEY, MANAGED_BY, MANAGER, TLS_CERT, TLS_KEY
from extender.leader.gate import ElectionOptions, LeaderGate
from tests.support.apiserver import SECRETS, FakeApiServer
from tests.support.ports import free_port
from tests.support.waiting import eventually, stays
from tests.support.webhook_certificates import (
    DNS_NAME,
    ENDPOINT_SLICES,
    NAMESPACE,
    SECRET,
    SERVICE,
    Clock,
    Dialler,
    Keeper,
    add_endpoint_slice,
    add_webhook_configurations,
    bundle_cas,
    der_of,
    secret_data,
    settled,
    start_keeper,
)

ELECTION = ElectionOptions("l", NAMESPACE, lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
# Handshakes the dialler must have made, at least, around the take-over.
ENOUGH_HANDSHAKES = 30


@asynccontextmanager
async def two_replicas(server: FakeApiServer, directory: Path) -> AsyncIterator[list[Keeper]]:
    """Replicas "a" (leading) and "b", settled on a first CA, each checking every
    certificate it picks against the stored caBundles."""
    add_webhook_configurations(server)
    clock = Clock()
    replicas = [await start_keeper(server, directory, name, clock=clock) for name in ("a", "b")]
    gates = [LeaderGate(r.name, ELECTION) for r in replicas]
    try:
        for replica, gate in zip(replicas, gates, strict=True):
            replica.observe()
            replica.lead(gate)
        await gates[0].set_leading(True)
        for replica in replicas:
            await settled(replica, server)
        yield replicas
    finally:
        for replica in replicas:
            await replica.stop()


async def _replaced_without_an_untrusted_handshake(
    server: FakeApiServer, replicas: list[Keeper], replace: Callable[[], None]
) -> None:
    old_ca = secret_data(server)[CA_CERT]
    violations: list[str] = []
    for replica in replicas:
        replica.check_every_choice(violations)
    dialler = Dialler(server, replicas)
    dialler.start()
    try:
        await eventually(lambda: dialler.handshakes > 10, what="the dialler under way")
        replace()

        async def taken_over() -> bool:
            data = secret_data(server) if server.get(SECRETS, SECRET, namespace=NAMESPACE) else {}
            if data.get(CA_CERT, old_ca) == old_ca:
                return False
            served = {await replica.peer_certificate() for replica in replicas}
            return served == {der_of(data[TLS_CERT])} and bundle_cas(server) == {
                read_bundle(data[CA_CERT])[0].fingerprint
            }

        await eventually(taken_over, timeout=20.0, what="the new CA alone in the bundles, its leaf served")
        before = dialler.handshakes
        await eventually(lambda: dialler.handshakes > before + 10, what="handshakes after the take-over")
    finally:
        await dialler.stop()
    assert violations == []
    assert dialler.failures == []
    assert dialler.handshakes > ENOUGH_HANDSHAKES
    for replica in replicas:
        await settled(replica, server)


async def test_a_deleted_secret_is_replaced_without_an_untrusted_handshake(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    async with two_replicas(fake_apiserver, tmp_path) as replicas:
        await _replaced_without_an_untrusted_handshake(
            fake_apiserver,
            replicas,
            lambda: fake_apiserver.delete(SECRETS, SECRET, namespace=NAMESPACE),
        )


async def test_a_hand_edited_secret_is_taken_over_without_an_untrusted_handshake(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Someone puts a CA and a pair of their own into the Secret, labelled as the
    extender's: both replicas keep the old pair until both caBundles trust the new CA."""
    async with two_replicas(fake_apiserver, tmp_path) as replicas:
        clock = Clock()
        ca = new_ca(clock.now, timedelta(days=3650), common_name="by hand")
        leaf = new_serving(ca, [SERVICE, f"{SERVICE}.{NAMESPACE}", DNS_NAME], clock.now, timedelta(days=365))
        data = {CA_CERT: ca.cert_pem, CA_KEY: ca.key_pem, TLS_CERT: leaf.cert_pem, TLS_KEY: leaf.key_pem}

        def edit() -> None:
            fake_apiserver.put(
                SECRETS,
                {
                    "metadata": {"name": SECRET, "namespace": NAMESPACE, "labels": {MANAGED_BY: MANAGER}},
                    "type": "kubernetes.io/tls",
                    "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
                },
            )

        await _replaced_without_an_untrusted_handshake(fake_apiserver, replicas, edit)
        # The hand-made pair is the one served: nothing needed reissuing.
        assert secret_data(fake_apiserver)[TLS_CERT] == leaf.cert_pem


RETAINED_METRIC = "runtimeclass_extender_webhook_certificate_retained_cas"


@pytest.mark.parametrize("kind", ["refused", "silent", "serving nothing yet"])
async def test_a_replica_that_cannot_be_asked_keeps_the_old_ca_in_the_bundles(
    fake_apiserver: FakeApiServer, tmp_path: Path, kind: str
) -> None:
    """An endpoint of the Service the leader cannot ask what it serves (connection
    refused, no TLS answer, or no pair yet) might still serve a leaf of the old CA:
    the old CA stays in both bundles, visibly, until that endpoint is gone (its
    EndpointSlice deleted) or serves the new leaf."""
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    leader = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    registry = CollectorRegistry()
    leader.keeper.register_metrics(registry)
    other: Keeper | None = None
    silent: asyncio.Server | None = None
    try:
        leader.observe()
        leader.lead()
        await settled(leader, fake_apiserver)
        if kind == "serving nothing yet":
            # A replica that has not loaded a pair yet refuses every handshake.
            other = await start_keeper(fake_apiserver, tmp_path, "b", clock=clock)
            slice_name = other.endpoint_slice
        elif kind == "silent":
            # Accepts connections and never answers a ClientHello (probe_timeout ends it).
            silent = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
            slice_name = add_endpoint_slice(fake_apiserver, "silent", silent.sockets[0].getsockname()[1])
        else:
            port = free_port()  # nothing listens there
            slice_name = add_endpoint_slice(fake_apiserver, "refused", port)
        old_ca = read_bundle(secret_data(fake_apiserver)[CA_CERT])[0].fingerprint
        fake_apiserver.delete(SECRETS, SECRET, namespace=NAMESPACE)

        async def both_cas_and_the_new_leaf() -> bool:
            if fake_apiserver.get(SECRETS, SECRET, namespace=NAMESPACE) is None:
                return False
            data = secret_data(fake_apiserver)
            new = read_bundle(data[CA_CERT])[0].fingerprint
            return bundle_cas(fake_apiserver) == {old_ca, new} and await leader.peer_certificate() == der_of(
                data[TLS_CERT]
            )

        await eventually(both_cas_and_the_new_leaf, what="the new CA next to the old one, its leaf served")
        await stays(
            lambda: old_ca in bundle_cas(fake_apiserver),
            duration=0.5,
            what="the old CA kept while an endpoint cannot be asked",
        )
        assert registry.get_sample_value(RETAINED_METRIC) == 1.0
        retained = leader.keeper.details()["retained"]
        assert retained["cas"] == 1 and "127.0.0.1" in retained["reason"]
        if other is not None:
            other.observe()  # it loads the new pair, trusted by both bundles
        else:
            fake_apiserver.delete(ENDPOINT_SLICES, slice_name, namespace=NAMESPACE)
        new_ca = read_bundle(secret_data(fake_apiserver)[CA_CERT])[0].fingerprint
        await eventually(lambda: bundle_cas(fake_apiserver) == {new_ca}, what="the old CA gone")
        assert registry.get_sample_value(RETAINED_METRIC) == 0.0
        assert "retained" not in leader.keeper.details()
    finally:
        if other is not None:
            await other.stop()
        if silent is not None:
            silent.close()
        await leader.stop()
