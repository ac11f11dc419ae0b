"""Warning events on pending pods whose RuntimeClass fits no node (serve --label-nodes),
against the test API server: what they say, on which pods, and never twice for one pod
and class revision, whichever replica writes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.objects import nodes_from_api, runtime_class_from_api
from extender.cluster.pending_pods import PendingPod
from extender.cluster.state import ClusterState
from extender.kube.answer import Sent
from extender.labeller import event_decisions
from extender.labeller.events import REASON, REPORTING_CONTROLLER, ClassEvents, PodEvent, event_name
from extender.leader.results import Done, Result, Retry, Unchanged, Write
from extender.leader.runner import LeaderRunner
from extender.leader.writes import Turn
from extender.policy_file import load_policy
from tests.support import replicas as replica_support
from tests.support.apiserver import (
    EVENTS,
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.replicas import Start, replica_set
from tests.support.waiting import eventually

PREFIX = "runtimeclass.node-restriction.kubernetes.io"
SCHED = "runtimeclass-scheduler"


def events(server: FakeApiServer) -> list[dict[str, Any]]:
    return server.objects(EVENTS)


def posts(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.verb == "post" and r.path.endswith("/events"))


@pytest.fixture
async def replicas(fake_apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Start]:
    async with replica_set(fake_apiserver, tmp_path, requeue=None, events=True) as start:
        yield start


def scarce_cluster(server: FakeApiServer, *, pods: int = 3) -> None:
    for i in range(4):
        server.add(NODES, make_node(f"n{i}", labels={"runtime/pool": "a"}))
    server.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"runtime/pool": "b"}))
    server.add(RUNTIME_CLASSES, make_runtime_class("runc", node_selector={"runtime/pool": "a"}))
    for i in range(pods):
        server.add(PODS, make_pod(f"sandboxed-{i}", runtime_class="gvisor", scheduler_name=SCHED))
    server.add(PODS, make_pod("fits", runtime_class="runc", scheduler_name=SCHED))
    server.add(PODS, make_pod("bound", runtime_class="gvisor", node_name="n0"))


async def test_one_warning_per_pending_pod_of_a_class_that_fits_no_node(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    scarce_cluster(fake_apiserver)
    a = await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 3, what="three events")
    by_pod = {e["regarding"]["name"]: e for e in events(fake_apiserver)}
    assert sorted(by_pod) == ["sandboxed-0", "sandboxed-1", "sandboxed-2"]  # not "fits", not "bound"
    event = by_pod["sandboxed-0"]
    pod = fake_apiserver.get(PODS, "sandboxed-0", namespace="default")
    assert pod is not None
    # events.k8s.io/v1 as the API server validates it (pkg/apis/core/validation/events.go).
    assert event["type"] == "Warning" and event["reason"] == REASON and event["action"] == "Scheduling"
    assert event["reportingController"] == REPORTING_CONTROLLER
    assert event["reportingInstance"] == a.gate.identity
    assert event["note"] == 'RuntimeClass "gvisor": 0 of 4 nodes match scheduling.nodeSelector runtime/pool=b'
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "default",
        "name": "sandboxed-0",
        "uid": pod["metadata"]["uid"],
    }
    assert len(event["eventTime"].split(".")[1]) == len("123456Z")  # six fractional digits
    assert event["metadata"]["namespace"] == "default"
    # The deprecated core/v1 fields stay unset.
    assert not {"message", "source", "firstTimestamp", "lastTimestamp", "count"} & set(event)

    # Nothing new happens: nothing is written again, however many passes run.
    written = posts(fake_apiserver)
    fake_apiserver.modify(NODES, "n3", {"metadata": {"labels": {"other": "x"}}})
    fake_apiserver.add(PODS, make_pod("sandboxed-new", runtime_class="gvisor", scheduler_name=SCHED))
    await eventually(lambda: len(events(fake_apiserver)) == 4, what="the new pod's event")
    assert posts(fake_apiserver) == written + 1

    # The class is edited (a new revision) and still fits nothing: one more each.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"runtime/pool": "c"}}})
    await eventually(lambda: len(events(fake_apiserver)) == 8, what="one event per pod for the new revision")
    # It fits now: nothing more.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"runtime/pool": "a"}}})
    await eventually(
        lambda: a.metric("runtimeclass_extender_runtimeclass_events_total", result="written") == 8
    )
    assert len(events(fake_apiserver)) == 8


async def test_a_new_leader_writes_no_event_twice(fake_apiserver: FakeApiServer, replicas: Start) -> None:
    scarce_cluster(fake_apiserver, pods=5)
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    b = await replicas("b")
    await eventually(lambda: len(events(fake_apiserver)) == 5, what="five events")
    await eventually(lambda: b.synced(), what="b synced")
    await a.stop()
    await eventually(lambda: b.leading, what="b takes over")
    existing = "runtimeclass_extender_runtimeclass_events_total"
    # b finds each event written (409 AlreadyExists), writes none of its own.
    await eventually(lambda: b.metric(existing, result="existing") == 5, what="b checked them")
    assert b.metric(existing, result="written") == 0
    assert len(events(fake_apiserver)) == 5


def test_event_names_are_dns_subdomains_per_pod_and_class_revision() -> None:
    pod = PendingPod("default", "x" * 253, "uid-1", "gvisor", SCHED)
    name = event_name(pod, "gvisor", "7")
    assert len(name) <= 253 and name.startswith("x") and ".runtimeclass-" in name
    assert event_name(pod, "gvisor", "8") != name  # another revision, another event
    dashed = PendingPod("default", "a-" * 120 + "b", "uid-2", "gvisor", SCHED)
    assert "-." not in event_name(dashed, "gvisor", "7")


async def test_the_runner_waits_for_pods_nodes_and_classes(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path
) -> None:
    from extender.cluster.state import ClusterState
    from extender.kube import connect as kube

    conn = await kube.connect(kubeconfig=str(fake_kubeconfig))
    try:
        actor = ClassEvents(conn.api, ClusterState(), load_policy(), prefix=PREFIX)
        waiting = LeaderRunner([actor], None).waiting()
        assert waiting == [
            "nodes: not listed yet",
            "runtimeclasses: not listed yet",
            "pods: not listed yet",
        ]
    finally:
        await conn.api.close()


async def test_an_edit_of_the_class_that_decides_nothing_writes_no_event(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """Events are keyed by the revision of what decides the class's nodes, not by its
    resourceVersion: a label or annotation edit of the class is no new revision."""
    scarce_cluster(fake_apiserver)
    a = await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 3, what="three events")
    written = posts(fake_apiserver)
    for n in range(3):
        fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"metadata": {"labels": {"edit": str(n)}}})
    await eventually(
        lambda: (
            a.state.runtime_classes["gvisor"].resource_version
            == fake_apiserver.get(RUNTIME_CLASSES, "gvisor")["metadata"]["resourceVersion"]
        ),  # type: ignore[index]
        what="the edits seen",
    )
    await asyncio.sleep(0.3)  # several passes (interval 0.05 s)
    assert posts(fake_apiserver) == written
    assert len(events(fake_apiserver)) == 3


async def test_refused_events_are_tried_again_with_backoff_not_on_every_pass(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """Three events refused (403: the RBAC is missing) while twenty node updates each
    start a pass: the refusal is said once, and the events are tried again as the
    probe's turns allow, not once per pass (it was 63 POSTs and 63 warnings)."""
    caplog.set_level(logging.WARNING, logger="extender.labeller")
    scarce_cluster(fake_apiserver)
    fake_apiserver.fail_next(10_000, 403, verbs={"post"}, resource=EVENTS, message="events is forbidden")
    a = await replicas("a")
    await eventually(lambda: posts(fake_apiserver) >= 3, what="the first attempts")
    for n in range(20):
        fake_apiserver.modify(NODES, f"n{n % 4}", {"metadata": {"labels": {"tick": str(n)}}})
        await asyncio.sleep(0.02)
    # 0.4 s of passes, and the test options' backoff is 0.5 s: at most two attempts of
    # each so far (one, unless the machine is slow).
    assert posts(fake_apiserver) <= 6
    failed = a.metric("runtimeclass_extender_runtimeclass_events_total", result="failed")
    assert failed == 1
    assert len([r for r in caplog.records if r.getMessage().startswith("cannot write the event")]) == 1
    fake_apiserver.clear_failures()
    await eventually(lambda: len(events(fake_apiserver)) == 3, timeout=5.0, what="written once allowed")


async def test_a_pod_requiring_the_label_of_a_deleted_class_hears_it_is_not_found(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """kube-scheduler rules every node out by the label (the extender is never asked),
    so the message the extender would give, RuntimeClass not found, comes as an event."""
    for i in range(2):
        fake_apiserver.add(NODES, make_node(f"n{i}"))
    key = f"{PREFIX}/gvisor"
    requiring = make_pod("requiring", runtime_class="gvisor", scheduler_name=SCHED)
    requiring["spec"]["nodeSelector"] = {key: "true"}
    fake_apiserver.add(PODS, requiring)
    fake_apiserver.add(PODS, make_pod("not-requiring", runtime_class="gvisor", scheduler_name=SCHED))
    await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 1, what="one event")
    (event,) = events(fake_apiserver)
    assert event["regarding"]["name"] == "requiring" and event["reason"] == "RuntimeClassNotFound"
    assert event["note"].startswith('RuntimeClass "gvisor" not found (the pod requires its node label ')
    assert key in event["note"]


async def test_shutdown_while_leading_writes_the_events_queued_within_the_bound(
    fake_apiserver: FakeApiServer, replicas: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping the leader gives the events it has queued ``drain_timeout`` to go out
    before the term is cancelled (the actor had no drain: they were dropped, and the
    pods went without theirs until another replica's term)."""
    # Five events a second, one at a time: six pods take a second, within the bound.
    slow = replace(replica_support.FAST_EVENTS, rate=5.0, burst=1)
    monkeypatch.setattr(replica_support, "FAST_EVENTS", slow)
    scarce_cluster(fake_apiserver, pods=6)
    a = await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 1, what="the first event")
    assert a.leading
    started = time.monotonic()
    await a.stop()
    assert time.monotonic() - started < 5.0  # EventOptions.drain_timeout
    assert len(events(fake_apiserver)) == 6
    assert posts(fake_apiserver) == 6


async def test_an_event_says_what_holds_when_it_is_written(
    fake_apiserver: FakeApiServer, replicas: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an event says is read from the caches when its turn comes: a node added
    while the events wait for the rate limit is counted by every one written after (a
    queued write carried the note of the pass that queued it, and one waiting for its
    token went out with it)."""
    slow = replace(replica_support.FAST_EVENTS, rate=2.0, burst=1)  # one every 0.5 s
    monkeypatch.setattr(replica_support, "FAST_EVENTS", slow)
    scarce_cluster(fake_apiserver, pods=3)
    await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 1, what="the first event")
    fake_apiserver.add(NODES, make_node("n4", labels={"runtime/pool": "a"}))
    await eventually(lambda: len(events(fake_apiserver)) == 3, timeout=5.0, what="three events")
    notes = sorted(e["note"] for e in events(fake_apiserver))
    assert notes == [
        'RuntimeClass "gvisor": 0 of 4 nodes match scheduling.nodeSelector runtime/pool=b',
        'RuntimeClass "gvisor": 0 of 5 nodes match scheduling.nodeSelector runtime/pool=b',
        'RuntimeClass "gvisor": 0 of 5 nodes match scheduling.nodeSelector runtime/pool=b',
    ]
    await asyncio.sleep(0.3)  # passes after the node's: nothing is written again
    assert posts(fake_apiserver) == 3


UNSCHEDULABLE = (
    "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector. "
    "no new claims to deallocate, preemption: 0/5 nodes are available: 2 No preemption victims found for "
    "incoming pod, 3 Preemption is not helpful for scheduling."
)


def unschedulable(pod: dict[str, Any], message: str = UNSCHEDULABLE) -> dict[str, Any]:
    """The pod as kube-scheduler leaves it after a failed try (schedule_one.go: PodScheduled
    False, reason Unschedulable, the FitError's message)."""
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    }
    return pod


def admitted(name: str, **extra: Any) -> dict[str, Any]:
    """A pod of gvisor as admission with the node labels leaves it: its class's label required,
    its class's toleration."""
    pod = make_pod(name, runtime_class="gvisor", tolerations=[SANDBOX_TOLERATION], **extra)
    pod["spec"]["nodeSelector"] = {f"{PREFIX}/gvisor": "true"}
    return pod


SANDBOX_TOLERATION = {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}


def pool_cluster(server: FakeApiServer) -> None:
    """Two nodes run gvisor (full), three do not."""
    for i in range(2):
        server.add(NODES, make_node(f"g{i}", labels={"pool": "gvisor", "tier": "a", f"{PREFIX}/gvisor": "true"}))
    for i in range(3):
        server.add(NODES, make_node(f"p{i}", labels={"pool": "plain"}))
    rc = make_runtime_class("gvisor", node_selector={"pool": "gvisor"})
    rc["scheduling"]["tolerations"] = [SANDBOX_TOLERATION]
    server.add(RUNTIME_CLASSES, rc)


async def test_a_pod_no_node_of_its_class_can_take_hears_so_naming_the_class(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """Nodes can run the class, and none has room: kube-scheduler's FailedScheduling says
    "3 node(s) didn't match Pod's node affinity/selector" and never names the class. The
    pod gets one event that does, with how many nodes run it and kube-scheduler's
    reasons; once kube-scheduler has tried it, and once per class revision."""
    pool_cluster(fake_apiserver)
    fake_apiserver.add(PODS, admitted("untried"))
    fake_apiserver.add(PODS, unschedulable(admitted("full")))
    a = await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 1, what="the event")
    (event,) = events(fake_apiserver)
    assert event["regarding"]["name"] == "full"  # not "untried": kube-scheduler has not said
    assert event["reason"] == "RuntimeClassNodesUnavailable" and event["type"] == "Warning"
    assert event["note"] == (
        'RuntimeClass "gvisor": 2 of 5 nodes can run it, and kube-scheduler found none of them can take the '
        "pod (kube-scheduler: 0/5 nodes are available: 2 Insufficient cpu, 3 node(s) didn't match Pod's node "
        "affinity/selector; the 3 nodes that cannot run the class are among those that didn't match the "
        "pod's node affinity/selector)"
    )
    # kube-scheduler tries again and words it otherwise: no second event.
    written = posts(fake_apiserver)
    fake_apiserver.modify(PODS, "full", lambda pod: unschedulable(pod, UNSCHEDULABLE.replace("cpu", "memory")), namespace="default")
    fake_apiserver.modify(PODS, "untried", lambda pod: unschedulable(pod), namespace="default")
    await eventually(lambda: len(events(fake_apiserver)) == 2, what="the untried pod's, once tried")
    assert posts(fake_apiserver) == written + 1
    # A new revision of the class (what decides its nodes changes; the same nodes): one more.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"pool": "gvisor", "tier": "a"}}})
    await eventually(lambda: len(events(fake_apiserver)) == 4, what="one each for the new revision")
    await eventually(
        lambda: a.metric("runtimeclass_extender_runtimeclass_events_total", result="written") == 4
    )


async def test_a_pod_admitted_without_its_classs_label_and_tolerations_hears_what_it_lacks(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """A pod of the class created before its class was in the pod admission table (or
    before the mode, or opted out): kube-scheduler's in-tree TaintToleration filter keeps
    it off the class's tainted nodes, and it never reaches the extender for them. Its
    event says what it lacks, and what to do."""
    pool_cluster(fake_apiserver)
    fake_apiserver.add(
        PODS,
        unschedulable(
            make_pod("early", runtime_class="gvisor"),
            "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 node(s) didn't match Pod's "
            "node affinity/selector. preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.",
        ),
    )
    await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 1, what="the event")
    note = events(fake_apiserver)[0]["note"]
    assert note.endswith(
        "; the pod lacks what pod admission gives a pod of the class: its node label requirement "
        f"({PREFIX}/gvisor) and its tolerations (sandbox Equal gvisor:NoSchedule): it was admitted before its "
        "class was in the pod admission table, before the mode was on, or opted out (recreate it)"
    ), note


async def test_a_pod_that_shows_its_classs_selector_is_not_told_it_lacks_the_label(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """A pod whose nodeSelector holds its class's whole selector (the in-tree plugin
    merged it) is admitted without the derived label on purpose: its own selector holds
    it to the class's nodes. Its event names only what it does lack."""
    pool_cluster(fake_apiserver)
    pod = make_pod("merged", runtime_class="gvisor")
    pod["spec"]["nodeSelector"] = {"pool": "gvisor"}
    fake_apiserver.add(
        PODS,
        unschedulable(
            pod,
            "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 node(s) didn't match Pod's "
            "node affinity/selector. preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.",
        ),
    )
    await replicas("a")
    await eventually(lambda: len(events(fake_apiserver)) == 1, what="the event")
    note = events(fake_apiserver)[0]["note"]
    assert "node label requirement" not in note, note
    assert "; the pod lacks what pod admission gives a pod of the class: its tolerations (sandbox Equal gvisor:NoSchedule)" in note, note


class Created(Turn):
    """A key's turn whose write is made at once and answered 201 Created."""

    def __init__(self) -> None:  # no pace, no damping
        pass

    async def write(self, plan: Callable[[], Write | Unchanged | Retry]) -> Result:
        wanted = plan()
        assert isinstance(wanted, Write)
        return Done(wanted, Sent(201))


async def test_a_pass_over_pods_whose_events_are_known_hashes_no_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The events known to exist are kept by what their names hold besides the pod: a
    pass over pending pods whose events were written queues none and makes no name
    (it hashed one per pod at every pass)."""
    state = ClusterState()
    state.nodes.replace(nodes_from_api([make_node(f"n{i}", labels={"runtime/pool": "a"}) for i in range(4)]))
    gvisor = make_runtime_class("gvisor", node_selector={"runtime/pool": "b"})
    state.runtime_classes.replace(runtime_class_from_api(c) for c in [gvisor])
    actor = ClassEvents(None, state, load_policy(), prefix=PREFIX)
    queued: list[PodEvent] = []
    monkeypatch.setattr(actor.queue, "add", lambda key, first=False: queued.append(key))
    for i in range(50):
        actor.pods.upsert(PendingPod("default", f"p{i}", f"uid-{i}", "gvisor", SCHED))
    await actor.resync()
    assert len(queued) == 50
    for key in queued:
        assert isinstance(await actor.reconcile(key, Created()), Done)

    names: list[str] = []

    def name(*args: Any) -> str:
        names.append(made := event_name(*args))
        return made

    monkeypatch.setattr(event_decisions, "event_name", name)
    queued.clear()
    await actor.resync()
    assert queued == [] and names == []
    # A new revision of the class: every pod is owed an event again.
    gvisor["scheduling"]["nodeSelector"] = {"runtime/pool": "c"}
    state.runtime_classes.upsert(runtime_class_from_api(gvisor))
    await actor.resync()
    assert len(queued) == 50 and names == []
