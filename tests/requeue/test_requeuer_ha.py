"""Two requeuers, one Lease (serve --leader-elect): only the leader patches, a hand-over
patches what the first leader had not, and no pod is patched twice for one revision.

Each replica has its own API connection through a proxy (tests/support/replicas.py),
so one can be cut off while the other keeps the API server. Hand-overs use the short
test durations (lease 1 s, renew 0.6 s, retry 0.1 s); waits are bounded polls.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.class_revisions import revision_digest, scheduling_revision
from extender.requeue.requeuer import RequeueOptions
from tests.support.apiserver import PODS, RUNTIME_CLASSES, FakeApiServer, make_pod, make_runtime_class
from tests.support.replicas import FAST_REQUEUE, SCHED, Replica, Start, nudges, replica_set
from tests.support.waiting import eventually

SENT = "runtimeclass_extender_requeue_nudges_sent_total"


@pytest.fixture
async def replicas(fake_apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Start]:
    async with replica_set(fake_apiserver, tmp_path) as start:
        yield start


def pending(name: str, runtime_class: str = "gvisor") -> dict[str, Any]:
    return make_pod(name, runtime_class=runtime_class, scheduler_name=SCHED)


def digest_of(server: FakeApiServer, name: str) -> str:
    from extender.cluster.objects import runtime_class_from_api

    obj = server.get(RUNTIME_CLASSES, name)
    return revision_digest(scheduling_revision(runtime_class_from_api(obj) if obj is not None else None))


async def one_leader(*replicas: Replica) -> Replica:
    await eventually(
        lambda: sum(r.leading for r in replicas) == 1 and all(r.synced() for r in replicas),
        what="one leader, all synced",
    )
    (leader,) = [r for r in replicas if r.leading]
    return leader


async def test_only_the_leader_patches(fake_apiserver: FakeApiServer, replicas: Start) -> None:
    for i in range(10):
        fake_apiserver.add(PODS, pending(f"p{i}"))
    a, b = await replicas("a"), await replicas("b")
    leader = await one_leader(a, b)
    follower = b if leader is a else a
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc"))
    digest = digest_of(fake_apiserver, "gvisor")
    await eventually(lambda: len(nudges(fake_apiserver)) == 10, what="every pod nudged")
    # The server applies a patch before it answers: the last success is counted a moment
    # after the server shows it.
    await eventually(lambda: leader.metric(SENT) == 10, what="every nudge counted")
    # The follower plans and queues nothing (level-triggered: a term starts with a pass).
    assert follower.requeuer is not None and not follower.requeuer.busy
    assert nudges(fake_apiserver) == {f"default/p{i}": [digest] for i in range(10)}
    assert leader.metric(SENT) == 10 and follower.metric(SENT) == 0
    assert follower.metric("runtimeclass_extender_requeue_nudges_skipped_total", reason="already_nudged") == 0
    patchers = {r.path for r in fake_apiserver.requests if r.verb == "patch"}
    assert len(patchers) == 10  # one PATCH per pod, in all


@pytest.mark.parametrize("how", ["cancelled", "cut-off"])
async def test_the_other_takes_over_and_patches_only_what_the_first_had_not(
    fake_apiserver: FakeApiServer, replicas: Start, how: str
) -> None:
    count = 40
    for i in range(count):
        fake_apiserver.add(PODS, pending(f"p{i:02}"))
    # Slow patches, so the hand-over falls in the middle of the batch.
    slow = replace(FAST_REQUEUE, rate=20.0, burst=1)
    a = await replicas("a", requeue=slow)
    await one_leader(a)
    b = await replicas("b", requeue=slow)
    await one_leader(a, b)
    assert a.leading
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc"))
    digest = digest_of(fake_apiserver, "gvisor")
    # Counted by a, not only applied: a nudge applied while its answer is lost in the
    # cut stays uncounted, which the sums below allow for once (it ran flaky under load).
    await eventually(lambda: a.metric(SENT) >= 5, what="the first leader's first nudges")
    if how == "cancelled":
        await a.stop()
    else:
        a.proxy.blackhole()
    await eventually(lambda: b.leading, what="b takes over")
    await eventually(lambda: len(nudges(fake_apiserver)) == count, timeout=20, what="every pod nudged")
    applied = nudges(fake_apiserver)
    assert applied == {f"default/p{i:02}": [digest] for i in range(count)}, applied
    by_a, by_b = a.metric(SENT), b.metric(SENT)
    # A patch the API server applied just as a's term ended may not have been counted
    # by a (its answer was cut off); the server's history above is the exact record.
    assert by_a >= 5 and by_b >= 1 and count - 1 <= by_a + by_b <= count
    assert b.requeuer is not None
    await eventually(lambda: b.requeuer is not None and not b.requeuer.busy, what="b idle")
    assert nudges(fake_apiserver) == applied  # nothing more
    if how == "cut-off":
        # Reconnected, a finds everything done: no patch from it, now or later.
        a.proxy.restore()
        await eventually(lambda: a.gate.holder == b.gate.identity, what="a sees b")
        await eventually(lambda: a.requeuer is not None and not a.requeuer.busy, what="a idle")
        assert a.metric(SENT) == by_a


async def test_soak_leadership_moves_under_churn_and_every_pod_is_nudged_once_per_change(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """Class changes, pods coming and going, and the Lease moving between two replicas
    (cut off and back, or stopped and replaced): every pod pending at a class change is
    nudged exactly once for that change's revision."""
    rng = random.Random(19)
    options: RequeueOptions = replace(FAST_REQUEUE, rate=100.0, burst=5)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"pool": "v0"}))
    for i in range(20):
        fake_apiserver.add(PODS, pending(f"p{i:02}"))
    live = [await replicas("r0", requeue=options), await replicas("r1", requeue=options)]
    await one_leader(*live)
    expected: dict[str, list[str]] = {}
    serial = 2
    for round_ in range(1, 7):
        # Churn: a few pods leave (bound or deleted) and new ones arrive.
        names = [p["metadata"]["name"] for p in fake_apiserver.objects(PODS)]
        for name in rng.sample(names, 3):
            fake_apiserver.delete(PODS, name)
        for _ in range(3):
            fake_apiserver.add(PODS, pending(f"n{round_}-{rng.randrange(10**6)}"))
        # Every replica has seen the pods as they are now before the class changes (the
        # same names, not only as many: three left and three came).
        await eventually(
            lambda: all(
                r.requeuer is not None
                and set(r.requeuer.pods)
                == {f"default/{o['metadata']['name']}" for o in fake_apiserver.objects(PODS)}
                for r in live
            ),
            what="pods seen",
        )
        fake_apiserver.modify(
            RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"pool": f"v{round_}"}}}
        )
        digest = digest_of(fake_apiserver, "gvisor")
        for obj in fake_apiserver.objects(PODS):
            expected.setdefault(f"default/{obj['metadata']['name']}", []).append(digest)
        # Move the Lease while the batch goes out.
        await eventually(
            lambda digest=digest: sum(d[-1:] == [digest] for d in nudges(fake_apiserver).values()) >= 3,
            what="the batch under way",
        )
        (leader,) = [r for r in live if r.leading]
        if round_ % 2:
            leader.proxy.blackhole()
            await eventually(lambda leader=leader: not leader.leading, what="the cut-off leader stops")
            await eventually(lambda: any(r.leading for r in live), what="a new leader")
            leader.proxy.restore()
        else:
            await leader.stop()
            live.remove(leader)
            live.append(await replicas(f"r{serial}", requeue=options))
            serial += 1
            await one_leader(*live)
        current = {f"default/{o['metadata']['name']}" for o in fake_apiserver.objects(PODS)}
        await eventually(
            lambda current=current, digest=digest: all(
                nudges(fake_apiserver).get(key, [])[-1:] == [digest] for key in current
            ),
            timeout=20,
            what=f"round {round_}: every pending pod nudged",
        )
        await eventually(
            lambda: all(r.requeuer is not None and not r.requeuer.busy for r in live), what="idle"
        )
    # Exactly once per change, for every pod pending at it (deleted ones included).
    assert nudges(fake_apiserver) == expected
