"""How the keeper writes: through the leader's write queue (rate limit, one write per
object, backoff, damping), only on the leader, and each caBundle patch conditional on
the resourceVersion it read."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta
from pathlib import Path

from extender.leader.gate import ElectionOptions, LeaderGate
from tests.support.apiserver import MUTATING_WEBHOOKS, SECRETS, FakeApiServer
from tests.support.apiserver.server import RecordedRequest
from tests.support.waiting import eventually, stays
from tests.support.webhook_certificates import (
    CONFIGURATION,
    MUTATING_HOOK,
    NAMESPACE,
    OPTIONS,
    SECRET,
    Clock,
    add_webhook_configurations,
    ca_bundles,
    secret_data,
    settled,
    start_keeper,
    writes_by,
)


def _bundle_patches(server: FakeApiServer, user: str) -> list[int]:
    """Indexes in ``server.requests`` of ``user``'s PATCHes of the mutating configuration."""
    return [
        i
        for i, r in enumerate(server.requests)
        if r.user == user and r.verb == "patch" and "/mutatingwebhookconfigurations/" in r.path
    ]


async def test_a_reverted_cabundle_is_written_back_at_a_damped_rate(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """A GitOps tool that takes the caBundle back right after every write: the keeper
    keeps writing it, but backs off to one write per ``retry_max``, never a hot loop."""
    add_webhook_configurations(fake_apiserver)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    loop = asyncio.get_running_loop()
    written_at: list[float] = []

    def revert() -> None:
        fake_apiserver.modify(
            MUTATING_WEBHOOKS,
            CONFIGURATION,
            lambda obj: obj["webhooks"][0]["clientConfig"].pop("caBundle"),
        )

    async def revert_every_write() -> None:
        seen = len(_bundle_patches(fake_apiserver, "a"))
        revert()
        while True:
            await asyncio.sleep(0.001)
            patches = len(_bundle_patches(fake_apiserver, "a"))
            if patches > seen and ca_bundles(fake_apiserver)[MUTATING_HOOK]:
                seen = patches
                written_at.append(loop.time())
                revert()

    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        gitops = asyncio.create_task(revert_every_write())
        window = 2.0
        try:
            await asyncio.sleep(window)
        finally:
            gitops.cancel()
        # Doubling from retry_initial to retry_max, then one per retry_max.
        most = round(window / OPTIONS.retry_max) + 8
        assert 3 <= len(written_at) <= most, written_at
        gaps = [b - a for a, b in itertools.pairwise(written_at)]
        assert min(gaps[-3:]) >= 0.8 * OPTIONS.retry_max, gaps
        # It still wins as soon as the tool stops.
        await eventually(lambda: bool(ca_bundles(fake_apiserver)[MUTATING_HOOK]), what="the caBundle back")
    finally:
        await replica.stop()


async def test_a_cabundle_patch_is_conditional_and_a_conflict_is_read_again(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Someone writes the configuration between the keeper's read and its patch: the
    patch carries the resourceVersion it read, so it gets 409 and is made again from
    a fresh read, without undoing the other writer's change."""
    add_webhook_configurations(fake_apiserver)
    interleaved: list[str] = []

    def write_in_between(request: RecordedRequest) -> bool:
        if request.verb == "patch" and "/mutatingwebhookconfigurations/" in request.path and not interleaved:
            interleaved.append(request.user)
            fake_apiserver.modify(
                MUTATING_WEBHOOKS,
                CONFIGURATION,
                lambda obj: obj["metadata"].setdefault("annotations", {}).update(owner="someone"),
            )
        return False  # not a failure of its own: the real precondition answers

    fake_apiserver.fail_next(1, status=500, verbs={"patch"}, only_if=write_in_between)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        assert interleaved == ["a"]
        patches = _bundle_patches(fake_apiserver, "a")
        assert len(patches) == 2  # the one refused with 409, and the one after a fresh read
        between = fake_apiserver.requests[patches[0] + 1 : patches[1]]
        assert any(r.verb == "get" and "/mutatingwebhookconfigurations/" in r.path for r in between)
        configuration = fake_apiserver.get(MUTATING_WEBHOOKS, CONFIGURATION)
        assert configuration is not None
        assert configuration["metadata"]["annotations"] == {"owner": "someone"}
    finally:
        await replica.stop()


async def test_only_the_leader_writes_even_the_first_secret(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    election = ElectionOptions("l", NAMESPACE, lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
    replicas = [await start_keeper(fake_apiserver, tmp_path, name, clock=clock) for name in ("a", "b")]
    gates = [LeaderGate(r.name, election) for r in replicas]
    try:
        for replica, gate in zip(replicas, gates, strict=True):
            replica.observe()
            replica.lead(gate)
        # No leader yet: nobody creates the Secret, nobody serves.
        await stays(
            lambda: fake_apiserver.get(SECRETS, SECRET, namespace=NAMESPACE) is None,
            duration=0.3,
            what="no Secret without a leader",
        )
        await gates[1].set_leading(True)
        for replica in replicas:
            await settled(replica, fake_apiserver)
        first = secret_data(fake_apiserver)
        # The lead moves to "a": it keeps what "b" made, writing nothing.
        await gates[1].set_leading(False)
        await gates[0].set_leading(True)
        await stays(lambda: "a" not in writes_by(fake_apiserver), duration=0.3, what="a writing nothing")
        assert secret_data(fake_apiserver) == first
        # A renewal falls to "a" alone.
        clock.advance(timedelta(days=300))
        replicas[0].keeper.wake()
        await eventually(lambda: secret_data(fake_apiserver) != first, what="the renewal")
        for replica in replicas:
            await settled(replica, fake_apiserver)
        writers = writes_by(fake_apiserver)
        assert sorted(writers["b"]) == [
            "PATCH mutatingwebhookconfigurations",
            "PATCH validatingwebhookconfigurations",
            "POST secrets",
        ]
        assert writers["a"] == ["PUT secrets"]
        assert set(writers) == {"a", "b"}
    finally:
        for replica in replicas:
            await replica.stop()
