"""Self-managed webhook certificates on the test API server: first start, restart,
two replicas racing, renewal, CA rotation with overlap, unusable Secrets, a pair that
does not load. Each replica serves a real TLS listener on its switching context; the
API server's side of the handshake is played by ``ssl`` with the caBundle the keeper
wrote, for ``<service>.<namespace>.svc``."""

from __future__ import annotations

import base64
import logging
import ssl
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from extender.certificates.authority import new_ca, new_serving, read_bundle
from extender.certificates.secret import CA_CERT, MANAGED_BY, MANAGER, PREVIOUS_CA_CERT, TLS_CERT, TLS_KEY
from tests.support.apiserver import MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS, FakeApiServer
from tests.support.waiting import eventually
from tests.support.webhook_certificates import (
    CONFIGURATION,
    DNS_NAME,
    MUTATING_HOOK,
    NAMESPACE,
    SECRET,
    SERVICE,
    VALIDATING_HOOK,
    Clock,
    add_webhook_configurations,
    ca_bundles,
    kept,
    secret_data,
    settled,
    start_keeper,
    writes_by,
)

DAY = timedelta(days=1)


def _bundle_fingerprints(server: FakeApiServer) -> dict[str, set[str]]:
    return {hook: {c.fingerprint for c in read_bundle(pem)} for hook, pem in ca_bundles(server).items()}


async def test_first_start_creates_the_secret_patches_both_bundles_and_serves_a_verifiable_certificate(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    add_webhook_configurations(fake_apiserver)
    before = {
        kind: fake_apiserver.get(kind, CONFIGURATION) for kind in (VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS)
    }
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    try:
        assert not replica.keeper.trust().trusted  # nothing served yet
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        secret = fake_apiserver.get(SECRETS, SECRET, namespace=NAMESPACE)
        assert secret is not None
        assert secret["type"] == "kubernetes.io/tls"
        assert secret["metadata"]["labels"][MANAGED_BY] == MANAGER
        data = secret_data(fake_apiserver)
        bundles = ca_bundles(fake_apiserver)
        assert set(bundles) == {VALIDATING_HOOK, MUTATING_HOOK}
        for bundle in bundles.values():
            assert bundle == data[CA_CERT]
            # The API server's handshake: verified against the caBundle, for <svc>.<ns>.svc.
            await replica.verified_handshake(bundle)
            with pytest.raises(ssl.SSLCertVerificationError):
                await replica.verified_handshake(bundle, server_name="elsewhere.example")
        leaf = x509.load_pem_x509_certificate(data[TLS_CERT])
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(names.get_values_for_type(x509.DNSName)) == {SERVICE, f"{SERVICE}.{NAMESPACE}", DNS_NAME}
        assert leaf.signature_hash_algorithm is not None and leaf.signature_hash_algorithm.name == "sha256"
        # Nothing but caBundle changed in either configuration.
        for kind, old in before.items():
            new = fake_apiserver.get(kind, CONFIGURATION)
            assert new is not None and old is not None
            for hook in new["webhooks"]:
                hook["clientConfig"].pop("caBundle")
            assert new["webhooks"] == old["webhooks"]
        details = replica.keeper.details()
        assert details["trusted"] is True and details["secret"] == f"{NAMESPACE}/{SECRET}"
    finally:
        await replica.stop()


async def test_a_restart_keeps_the_same_ca_and_writes_nothing(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    first = await start_keeper(fake_apiserver, tmp_path, "first", clock=clock)
    try:
        first.observe()
        first.lead()
        await settled(first, fake_apiserver)
    finally:
        await first.stop()
    data = secret_data(fake_apiserver)
    second = await start_keeper(fake_apiserver, tmp_path, "second", clock=clock)
    try:
        second.observe()
        second.lead()
        await settled(second, fake_apiserver)
        assert secret_data(fake_apiserver) == data
        assert "second" not in writes_by(fake_apiserver)
    finally:
        await second.stop()


async def test_a_follower_started_later_serves_what_is_in_place(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Nothing changes after it starts: it serves once its three informers have listed
    (each store hears its first LIST before it counts as listed)."""
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    leader = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    follower = await start_keeper(fake_apiserver, tmp_path, "b", clock=clock)
    try:
        leader.observe()
        leader.lead()
        await settled(leader, fake_apiserver)
        follower.observe()
        await settled(follower, fake_apiserver)
        assert "b" not in writes_by(fake_apiserver)
    finally:
        await follower.stop()
        await leader.stop()


async def test_two_writers_race_to_create_and_the_loser_reads_the_winners(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Only the leader writes, but a write of a term that just ended may still land
    beside the next leader's (two leading at once here, as a stand-in): both read "no
    Secret" and both POST; the API server accepts one and answers the other 409
    AlreadyExists, whose queue reads again and finds the winner's Secret."""
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    replicas = [await start_keeper(fake_apiserver, tmp_path, name, clock=clock) for name in ("a", "b")]
    try:
        # Both fresh reads answer "no Secret" whatever the order they arrive in.
        fake_apiserver.fail_next(2, status=404, verbs={"get"}, resource=SECRETS)
        for replica in replicas:
            replica.observe()
            replica.lead()

        def posters() -> list[str]:
            return sorted(
                r.user for r in fake_apiserver.requests if r.verb == "post" and r.path.endswith("/secrets")
            )

        await eventually(lambda: len(posters()) >= 2, what="both replicas' POSTs")
        for replica in replicas:
            await settled(replica, fake_apiserver)
        assert posters() == ["a", "b"]  # one got 201, the other 409 and read it
        assert [change for change, _, _ in fake_apiserver.changes(SECRETS)] == ["ADDED"]
        assert replicas[0].switching.pair == replicas[1].switching.pair
        assert await replicas[0].peer_certificate() == await replicas[1].peer_certificate()
    finally:
        for replica in replicas:
            await replica.stop()


async def test_the_leaf_is_renewed_ahead_and_served_without_a_restart(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        first = secret_data(fake_apiserver)
        clock.advance(270 * DAY)  # not yet within 90 days of the end
        assert (await replica.keeper.check()).idle
        clock.advance(10 * DAY)
        replica.keeper.wake()
        await eventually(lambda: secret_data(fake_apiserver)[TLS_CERT] != first[TLS_CERT], what="a new leaf")
        renewed = secret_data(fake_apiserver)
        assert renewed[CA_CERT] == first[CA_CERT]  # same CA: the bundles stay
        await settled(replica, fake_apiserver)
        leaf = x509.load_pem_x509_certificate(renewed[TLS_CERT])
        assert leaf.not_valid_after_utc - clock.now > timedelta(days=364)
        assert leaf.not_valid_before_utc == clock.now.replace(microsecond=0) - timedelta(hours=1)
        assert {fp for fps in _bundle_fingerprints(fake_apiserver).values() for fp in fps} == {
            read_bundle(first[CA_CERT])[0].fingerprint
        }
    finally:
        await replica.stop()


async def test_ca_rotation_overlaps_old_and_new_until_the_old_one_expires(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        old_ca = read_bundle(secret_data(fake_apiserver)[CA_CERT])[0]
        # Keep the leaf fresh until the CA is due (a year ahead of its ten).
        for _ in range(9):
            clock.advance(365 * DAY)
            await kept(replica)
        assert read_bundle(secret_data(fake_apiserver)[CA_CERT])[0] != old_ca
        data = secret_data(fake_apiserver)
        new_ca_facts = read_bundle(data[CA_CERT])[0]
        assert read_bundle(data[PREVIOUS_CA_CERT])[0] == old_ca
        for fingerprints in _bundle_fingerprints(fake_apiserver).values():
            assert fingerprints == {old_ca.fingerprint, new_ca_facts.fingerprint}
        await settled(replica, fake_apiserver)  # the leaf, by the new CA, is served
        assert replica.keeper.served is not None and replica.keeper.served.issuer == new_ca_facts
        # Past the old CA's end it leaves the Secret and both bundles.
        clock.now = old_ca.not_after + DAY
        await kept(replica)
        assert PREVIOUS_CA_CERT not in secret_data(fake_apiserver)
        for fingerprints in _bundle_fingerprints(fake_apiserver).values():
            assert fingerprints == {new_ca_facts.fingerprint}
        await settled(replica, fake_apiserver)
    finally:
        await replica.stop()


def _put_secret(server: FakeApiServer, data: dict[str, bytes], *, ours: bool) -> None:
    labels = {MANAGED_BY: MANAGER} if ours else {"app": "someone-else"}
    server.put(
        SECRETS,
        {
            "metadata": {"name": SECRET, "namespace": NAMESPACE, "labels": labels},
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        },
    )


@pytest.mark.parametrize("kind", ["foreign", "corrupt CA key"])
async def test_an_unusable_secret_is_a_clear_error_and_nothing_trusted_is_claimed(
    fake_apiserver: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    ca = new_ca(clock.now, 10 * DAY, common_name="someone else's")
    leaf = new_serving(ca, ["other.example"], clock.now, 5 * DAY)
    data = {CA_CERT: ca.cert_pem, "ca.key": ca.key_pem, TLS_CERT: leaf.cert_pem, TLS_KEY: leaf.key_pem}
    if kind == "corrupt CA key":
        data["ca.key"] = b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
    _put_secret(fake_apiserver, data, ours=kind != "foreign")
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    try:
        with caplog.at_level(logging.ERROR, logger="extender.certificates"):
            replica.observe()
            replica.lead()
            await eventually(lambda: bool(replica.keeper.problem), what="the problem reported")
            await eventually(lambda: replica.keeper.bundles() != {}, what="the configurations read")
        problem = replica.keeper.problem
        assert ("not labelled" in problem) if kind == "foreign" else ("ca.key" in problem)
        assert "delete it" in problem
        assert any(
            problem in record.getMessage() or problem == getattr(record, "problem", "")
            for record in caplog.records
        )
        # Not overwritten, no caBundle set, and readiness says no.
        assert secret_data(fake_apiserver) == data
        assert all(bundle == b"" for bundle in ca_bundles(fake_apiserver).values())
        assert "a" not in writes_by(fake_apiserver)
        details = replica.keeper.details()
        assert details["trusted"] is False and details["problem"] == problem
        # Neither someone else's pair nor one no caBundle trusts is served: handshakes
        # are refused (the API server could not verify the pair anyway).
        assert replica.switching.pair is None
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await replica.peer_certificate()
        assert not replica.keeper.trust().trusted
    finally:
        await replica.stop()


async def test_a_pair_that_does_not_load_leaves_the_previous_one_serving(
    fake_apiserver: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        served = await replica.peer_certificate()
        await replica.stop_lead()  # the test then edits the Secret as an operator would
        good = secret_data(fake_apiserver)
        # A key of another certificate: the pair cannot be loaded.
        other = new_serving(new_ca(clock.now, 10 * DAY, common_name="x"), [DNS_NAME], clock.now, 5 * DAY)
        with caplog.at_level(logging.ERROR, logger="extender.certificates"):
            _put_secret(fake_apiserver, {**good, TLS_KEY: other.key_pem}, ours=True)
            await eventually(
                lambda: any("keeping the one served before" in r.getMessage() for r in caplog.records),
                what="the failed reload logged",
            )
        assert await replica.peer_certificate() == served
        assert replica.keeper.trust().trusted
        await replica.verified_handshake(good[CA_CERT])
    finally:
        await replica.stop()


async def test_a_deleted_secret_is_recreated_by_the_leader(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    add_webhook_configurations(fake_apiserver)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        old = secret_data(fake_apiserver)
        fake_apiserver.delete(SECRETS, SECRET, namespace=NAMESPACE)
        await eventually(
            lambda: fake_apiserver.get(SECRETS, SECRET, namespace=NAMESPACE) is not None, what="recreated"
        )
        assert secret_data(fake_apiserver)[CA_CERT] != old[CA_CERT]
        await settled(replica, fake_apiserver)
    finally:
        await replica.stop()
