"""The audit with leader election (serve --leader-elect): every replica keeps its index,
only the leader logs the per-pod lines and exports the gauges, and a new leader takes
over speaking with one summary line, not a repeat of every warning.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.replicas import Replica, Start, replica_set
from tests.support.waiting import eventually, stays

GVISOR = {"runtime": "gvisor"}
MISPLACED = "runtimeclass_extender_misplaced_pods"


@pytest.fixture
async def replicas(fake_apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Start]:
    async with replica_set(fake_apiserver, tmp_path, requeue=None, audit=True) as start:
        yield start


def running(name: str, node: str) -> dict[str, Any]:
    return make_pod(name, node_name=node, runtime_class="gvisor", phase="Running")


def warnings(caplog: pytest.LogCaptureFixture, pod: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == "extender.audit"
        and r.getMessage() == "running pod is misplaced"
        and getattr(r, "pod", "") == pod
    )


def indexed(replica: Replica, pod: str) -> bool:
    return replica.auditor is not None and any(m.key == pod for m in replica.auditor.index.misplaced())


async def test_one_replica_speaks_and_a_new_leader_does_not_repeat_warnings(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.audit")
    fake_apiserver.add(NODES, make_node("gv-1", labels=GVISOR))
    fake_apiserver.add(NODES, make_node("plain-1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector=GVISOR))
    fake_apiserver.add(PODS, running("a", "gv-1"))
    a, b = await replicas("a"), await replicas("b")
    await eventually(
        lambda: sum(r.leading for r in (a, b)) == 1 and a.synced() and b.synced(), what="a leader"
    )
    leader, follower = (a, b) if a.leading else (b, a)

    # A misplaced pod: both replicas know it, one warning in all, one gauge.
    fake_apiserver.add(PODS, running("x", "plain-1"))
    await eventually(lambda: indexed(a, "default/x") and indexed(b, "default/x"), what="both indexed")
    await eventually(lambda: warnings(caplog, "default/x") == 1, what="the warning")
    # Exactly one: a duplicate (from the follower, or the leader again) would come later.
    await stays(lambda: warnings(caplog, "default/x") == 1, what="one warning for x")
    assert leader.metric(MISPLACED, runtime_class="gvisor", problem="selector-mismatch") == 1
    assert (
        follower.registry.get_sample_value(
            MISPLACED, {"runtime_class": "gvisor", "problem": "selector-mismatch"}
        )
        is None
    )

    # The leader goes: the other says what it found once, and speaks from then on. The
    # records are kept (not cleared), so x's count covers the whole test.
    handover = len(caplog.records)
    await leader.stop()
    await eventually(lambda: follower.leading, what="the follower takes over")
    await eventually(
        lambda: any(
            r.getMessage() == "audited running pods: 1 of 2 misplaced" for r in caplog.records[handover:]
        ),
        what="the new leader's summary",
    )
    await stays(lambda: warnings(caplog, "default/x") == 1, what="x not warned again")
    assert follower.metric(MISPLACED, runtime_class="gvisor", problem="selector-mismatch") == 1
    fake_apiserver.add(PODS, running("y", "plain-1"))
    await eventually(lambda: warnings(caplog, "default/y") == 1, what="the new leader's warning")
    await stays(
        lambda: warnings(caplog, "default/y") == 1 and warnings(caplog, "default/x") == 1,
        what="one warning each",
    )
    assert follower.metric(MISPLACED, runtime_class="gvisor", problem="selector-mismatch") == 2
