"""How the keeper writes: through the leader's queue (rate limit, one reconcile per
object, backoff, damping), only on the leader, each caBundle patch conditional on the
resourceVersion it read, each pass planned once; and the queue empty once its term
has ended."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from extender.certificates import replicas, writer
from extender.certificates.authority import new_ca
from extender.certificates.replicas import Observed
from extender.certificates.secret import CA_CERT, TLS_CERT
from extender.leader.gate import ElectionOptions, LeaderGate
from tests.support.apiserver import MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS, FakeApiServer
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
    bundle_cas,
    ca_bundles,
    secret_data,
    settled,
    start_keeper,
    writes_by,
)

MUTATING = f"MutatingWebhookConfiguration/{CONFIGURATION}"


def _take_back_mutating_bundle(server: FakeApiServer) -> None:
    server.modify(
        MUTATING_WEBHOOKS, CONFIGURATION, lambda obj: obj["webhooks"][0]["clientConfig"].pop("caBundle")
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


async def test_the_queue_is_empty_once_the_term_has_ended_and_a_follower_queues_nothing(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """A term that ends while a write backs off (refused) leaves nothing queued: no
    key, no delay, no backoff, no timed pass. What the replica hears as a follower
    queues nothing; its next term starts from what it observes."""
    add_webhook_configurations(fake_apiserver)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    queue = replica.keeper.queue
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        fake_apiserver.fail_next(1000, status=403, verbs={"patch"}, resource=MUTATING_WEBHOOKS)
        _take_back_mutating_bundle(fake_apiserver)
        # The key backs off between its attempts: waiting out a delay (counted by len),
        # not only being reconciled (in flight, which len leaves out).
        await eventually(
            lambda: len(_bundle_patches(fake_apiserver, "a")) >= 4 and len(queue) > 0,
            what="the patch refused, again, and the key waiting out its backoff",
        )
        assert queue.has(MUTATING) and len(queue) > 0
        await replica.stop_lead()
        assert not queue.running
        assert len(queue) == 0 and queue.in_flight == 0 and not queue.busy
        # A follower now: what it hears queues nothing.
        patches = len(_bundle_patches(fake_apiserver, "a"))
        fake_apiserver.modify(
            VALIDATING_WEBHOOKS, CONFIGURATION, {"metadata": {"annotations": {"edited": "by hand"}}}
        )
        replica.keeper.wake()
        await stays(lambda: len(queue) == 0 and not queue.busy, duration=0.3, what="nothing queued")
        fake_apiserver.clear_failures()
        await stays(
            lambda: len(_bundle_patches(fake_apiserver, "a")) == patches, duration=0.3, what="no write"
        )
        # The next term finds the caBundle to write back.
        replica.lead()
        await eventually(lambda: bool(ca_bundles(fake_apiserver)[MUTATING_HOOK]), what="the caBundle back")
    finally:
        await replica.stop()


async def test_a_pass_plans_once_and_its_writes_neither_plan_nor_probe_again(
    fake_apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CA of no one's in both caBundles, found at a term's start: the pass plans
    (asking the replicas what they serve, since a CA would leave the bundles), and the
    first patch's fresh read finds what that plan was made from, so it is made from
    that plan: one plan and one probe before it."""
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock)
    plans: list[int] = []  # at each plan, and each probe: the requests made before it
    probes: list[int] = []
    real_plan, real_observe = writer.plan, replicas.observe

    def counted_plan(*args: Any, **kwargs: Any) -> Any:
        plans.append(len(fake_apiserver.requests))
        return real_plan(*args, **kwargs)

    async def counted_observe(*args: Any, **kwargs: Any) -> Observed:
        probes.append(len(fake_apiserver.requests))
        return await real_observe(*args, **kwargs)

    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        await replica.stop_lead()
        ours = secret_data(fake_apiserver)[CA_CERT]
        stray = new_ca(clock.now, timedelta(days=30), common_name="no one's").cert_pem
        both = base64.b64encode(ours + stray).decode()
        for kind in (VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS):
            fake_apiserver.modify(
                kind, CONFIGURATION, lambda obj: obj["webhooks"][0]["clientConfig"].update(caBundle=both)
            )
        await eventually(lambda: len(bundle_cas(fake_apiserver)) == 2, what="the stray CA in the bundles")
        await eventually(
            lambda: all(len(b.cas) == 2 for b in replica.keeper.bundles().values()),
            what="the informers seeing it",
        )
        monkeypatch.setattr(writer, "plan", counted_plan)
        monkeypatch.setattr(replicas, "observe", counted_observe)
        first = len(fake_apiserver.requests)
        replica.lead()
        await eventually(lambda: len(bundle_cas(fake_apiserver)) == 1, what="the stray CA gone")
        made = [i for i, r in enumerate(fake_apiserver.requests) if i >= first and r.verb == "patch"]
        assert len(made) == 2
        assert len([at for at in plans if at <= made[0]]) == 1, plans
        assert len([at for at in probes if at <= made[0]]) == 1, probes
    finally:
        await replica.stop()


async def test_a_read_that_keeps_failing_is_reported_once_and_the_write_made_when_it_answers(
    fake_apiserver: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write's fresh read of the Secret answers 500, again and again: each failed read
    is an attempt of the write's streak (backoff doubling, one warning once
    ``max_attempts`` have failed), and the write is made once the read answers."""
    add_webhook_configurations(fake_apiserver)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=Clock())
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        attempts = OPTIONS.max_attempts
        fake_apiserver.fail_next(attempts, status=500, verbs={"get"}, resource=SECRETS)
        with caplog.at_level(logging.DEBUG, logger="extender.certificates"):
            _take_back_mutating_bundle(fake_apiserver)
            await eventually(
                lambda: bool(ca_bundles(fake_apiserver)[MUTATING_HOOK]), what="the caBundle back"
            )
        warnings = [
            r for r in caplog.records if r.levelno == logging.WARNING and "cannot keep" in r.getMessage()
        ]
        assert [(w.__dict__["write"], w.__dict__["status"], w.__dict__["reason"]) for w in warnings] == [
            (MUTATING, 500, "retries_exhausted")
        ]
        retries = [r for r in caplog.records if "made again from a new read" in r.getMessage()]
        delays = [r.__dict__["retryIn"] for r in retries]
        assert len(delays) == attempts and delays == sorted(delays) and delays[-1] > delays[0], delays
    finally:
        await replica.stop()


async def test_the_periodic_check_comes_back_without_any_change(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """Nothing changes and nobody wakes the leader: every ``check_interval`` it plans
    again all the same, and so renews a leaf the clock alone made due, twice over."""
    add_webhook_configurations(fake_apiserver)
    clock = Clock()
    options = dataclasses.replace(OPTIONS, check_interval=0.1)
    replica = await start_keeper(fake_apiserver, tmp_path, "a", clock=clock, options=options)
    try:
        replica.observe()
        replica.lead()
        await settled(replica, fake_apiserver)
        for _ in range(2):
            # Settled (the informers show every write made), and every change heard has
            # had its pass: only the timed passes are pending.
            await eventually(lambda: not replica.keeper.busy, what="nothing owed")
            leaf = secret_data(fake_apiserver)[TLS_CERT]
            clock.advance(timedelta(days=280))
            await eventually(
                lambda leaf=leaf: secret_data(fake_apiserver)[TLS_CERT] != leaf, what="the leaf renewed"
            )
            await settled(replica, fake_apiserver)
    finally:
        await replica.stop()
