"""The node labeller (serve --label-nodes) against the test API server.

The production code runs unmodified over an ordinary kubeconfig: the cluster watch
feeds the state, the labeller's writes are real merge PATCHes the server applies, and
what the nodes end up carrying is read back from the server. The expected labels come
from ``expected_labels`` below, a reference written from the raw API objects
(independent of extender/cluster/class_labels.py). Waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from extender.labeller.labeller import LabelOptions
from extender.settings import DEFAULT_STARTUP_TAINT
from tests.support.apiserver import (
    NODES,
    PODS,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_pod,
    make_runtime_class,
)
from tests.support.paths import FIXTURES
from tests.support.replicas import FAST_ELECTION, Start, replica_set
from tests.support.waiting import eventually, stays

PREFIX = "runtimeclass.node-restriction.kubernetes.io"
SLOW_ELECTION = replace(FAST_ELECTION, lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)
FAST = LabelOptions(rate=2000.0, burst=200, concurrency=10, request_timeout=2.0, drain_timeout=1.0)
ADDED = "runtimeclass_extender_node_labels_added_total"
REMOVED = "runtimeclass_extender_node_labels_removed_total"


def expected_labels(server: FakeApiServer) -> dict[str, dict[str, str]]:
    """Per node, the prefix labels it should carry: every class with a non-empty
    scheduling.nodeSelector whose every entry the node's labels match (taints aside)."""
    classes = {}
    for obj in server.objects(RUNTIME_CLASSES):
        selector = (obj.get("scheduling") or {}).get("nodeSelector") or {}
        if selector:
            classes[obj["metadata"]["name"]] = selector
    expected = {}
    for obj in server.objects(NODES):
        labels = obj["metadata"].get("labels") or {}
        expected[obj["metadata"]["name"]] = {
            f"{PREFIX}/{name}": "true"
            for name, selector in classes.items()
            if all(labels.get(k) == v for k, v in selector.items())
        }
    return expected


def actual_labels(server: FakeApiServer) -> dict[str, dict[str, str]]:
    return {
        obj["metadata"]["name"]: {
            k: v for k, v in (obj["metadata"].get("labels") or {}).items() if k.startswith(PREFIX + "/")
        }
        for obj in server.objects(NODES)
    }


def node_patches(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.verb == "patch" and r.path.startswith("/api/v1/nodes/"))


def in_line(server: FakeApiServer) -> Callable[[], bool]:
    return lambda: actual_labels(server) == expected_labels(server)


@pytest.fixture
async def replicas(fake_apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Start]:
    async with replica_set(fake_apiserver, tmp_path, requeue=None, label=FAST) as start:
        yield start


def pool(server: FakeApiServer, count: int, **labels: str) -> None:
    for i in range(count):
        server.add(NODES, make_node(f"{labels.get('sandbox', 'plain')}-{i}", labels=labels))


async def test_labels_land_on_exactly_the_fitting_nodes_and_nothing_else_changes(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.labeller")
    pool(fake_apiserver, 3, sandbox="gvisor")
    pool(fake_apiserver, 2)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc"))  # no rules: no label
    before = {o["metadata"]["name"]: dict(o["metadata"]["labels"]) for o in fake_apiserver.objects(NODES)}
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    await eventually(in_line(fake_apiserver), what="labels in line")
    assert actual_labels(fake_apiserver)["gvisor-0"] == {f"{PREFIX}/gvisor": "true"}
    assert actual_labels(fake_apiserver)["plain-0"] == {}
    for obj in fake_apiserver.objects(NODES):
        others = {k: v for k, v in obj["metadata"]["labels"].items() if not k.startswith(PREFIX)}
        assert others == before[obj["metadata"]["name"]]  # nobody else's label touched
    assert node_patches(fake_apiserver) == 3  # one per node that differed
    await eventually(lambda: a.metric(ADDED) == 3, what="counted")

    # The class moves to another pool: one log line says what moves, the labels follow.
    pool(fake_apiserver, 2, sandbox="gvisor2")
    await eventually(lambda: "gvisor2-1" in a.state.nodes, what="the new pool seen")
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"sandbox": "gvisor2"}}})
    await eventually(in_line(fake_apiserver), what="labels moved")
    assert actual_labels(fake_apiserver)["gvisor-0"] == {}
    assert actual_labels(fake_apiserver)["gvisor2-1"] == {f"{PREFIX}/gvisor": "true"}
    await eventually(lambda: a.metric(REMOVED) == 3 and a.metric(ADDED) == 5, what="counted")
    assert any(
        r.getMessage() == "RuntimeClass gvisor: node labels: 2 to add, 3 to remove" for r in caplog.records
    )

    # A deleted class leaves no label behind.
    fake_apiserver.delete(RUNTIME_CLASSES, "gvisor")
    await eventually(in_line(fake_apiserver), what="labels removed")
    assert all(labels == {} for labels in actual_labels(fake_apiserver).values())


async def test_labels_follow_random_changes_exactly(fake_apiserver: FakeApiServer, replicas: Start) -> None:
    rng = random.Random(7)
    values = ["a", "b", "c"]
    names = [f"n{i}" for i in range(12)]
    for name in names[:8]:
        fake_apiserver.add(
            NODES, make_node(name, labels={"pool": rng.choice(values), "zone": rng.choice(values)})
        )
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    classes: set[str] = set()
    for step in range(40):
        op = rng.random()
        if op < 0.35:
            name = rng.choice(names)
            labels = {"pool": rng.choice(values), "zone": rng.choice(values)}
            if fake_apiserver.get(NODES, name) is None:
                fake_apiserver.add(NODES, make_node(name, labels=labels))
            elif rng.random() < 0.2:
                fake_apiserver.delete(NODES, name)
            else:
                fake_apiserver.modify(NODES, name, {"metadata": {"labels": labels}})
        elif op < 0.5 and classes:
            name = rng.choice(sorted(classes))
            fake_apiserver.delete(RUNTIME_CLASSES, name)
            classes.discard(name)
        else:
            name = f"rc-{rng.randrange(4)}"
            selector = {"pool": rng.choice(values)}
            if rng.random() < 0.5:
                selector["zone"] = rng.choice(values)
            if name in classes:
                fake_apiserver.modify(RUNTIME_CLASSES, name, {"scheduling": {"nodeSelector": selector}})
            else:
                fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class(name, node_selector=selector))
                classes.add(name)
        if step % 5 == 4:
            await eventually(in_line(fake_apiserver), what=f"labels in line after step {step}")
    await eventually(in_line(fake_apiserver), what="labels in line at the end")


async def test_nothing_is_removed_before_nodes_and_classes_are_listed(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    # Labels left by an earlier leader for a class that still exists, and one stale.
    fake_apiserver.add(
        NODES,
        make_node(
            "gvisor-0", labels={"sandbox": "gvisor", f"{PREFIX}/gvisor": "true", f"{PREFIX}/old": "true"}
        ),
    )
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    # The RuntimeClass LIST is refused for a while: with no classes known, every label
    # would look unexplained.
    fake_apiserver.fail_next(10_000, 403, verbs={"list"}, resource=RUNTIME_CLASSES, message="forbidden")
    a = await replicas("a")
    await eventually(lambda: a.state.nodes.synced, what="nodes listed")
    await eventually(lambda: bool(a.gate.waiting_for), what="waiting for the classes")
    assert not a.leading and node_patches(fake_apiserver) == 0
    fake_apiserver.clear_failures()
    await eventually(lambda: a.leading, what="a leads")
    await eventually(in_line(fake_apiserver), what="labels in line")
    # Only the unexplained label went; the class's own stayed untouched in between.
    assert actual_labels(fake_apiserver)["gvisor-0"] == {f"{PREFIX}/gvisor": "true"}
    assert node_patches(fake_apiserver) == 1


async def test_a_new_leader_resumes_without_churn(fake_apiserver: FakeApiServer, replicas: Start) -> None:
    pool(fake_apiserver, 20, sandbox="gvisor")
    pool(fake_apiserver, 5)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    b = await replicas("b")
    await eventually(in_line(fake_apiserver), what="labels in line")
    await eventually(lambda: b.synced(), what="b synced")
    patched = node_patches(fake_apiserver)
    assert patched == 20
    await a.stop()
    await eventually(lambda: b.leading, what="b takes over")
    await eventually(lambda: b.labeller is not None and not b.labeller.queue.busy, what="b idle")
    assert node_patches(fake_apiserver) == patched  # nothing rewritten
    # And b keeps them in line from then on.
    fake_apiserver.modify(NODES, "plain-0", {"metadata": {"labels": {"sandbox": "gvisor"}}})
    await eventually(in_line(fake_apiserver), what="b labels the new member")
    assert node_patches(fake_apiserver) == patched + 1


async def test_a_write_the_admission_policy_denies_is_said_once_and_tried_again_with_backoff(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """The ValidatingAdmissionPolicy's answer as kube-apiserver 1.36.2 gave it
    (tests/data/fixtures/kube-apiserver/node-patch-denied-by-admission-policy.json):
    422. That patch cannot succeed as it is, but what is still wrong may be written
    once the refusal ends (a policy fixed, a prefix aligned): counted and logged once,
    then come back to with backoff, never once per event of the node."""
    denied = json.loads(
        (FIXTURES / "kube-apiserver" / "node-patch-denied-by-admission-policy.json").read_text()
    )
    caplog.set_level(logging.WARNING, logger="extender.labeller")
    pool(fake_apiserver, 1, sandbox="gvisor")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    fake_apiserver.fail_next(
        3, denied["httpStatus"], verbs={"patch"}, resource=NODES, message=denied["response"]["message"]
    )
    a = await replicas("a", label=replace(FAST, retry_initial=0.05, retry_max=0.2))
    errors = "runtimeclass_extender_node_label_write_errors_total"
    await eventually(in_line(fake_apiserver), what="labelled once allowed")
    assert a.metric(errors, reason="rejected") == 1  # one streak, said once
    assert node_patches(fake_apiserver) == 4  # three refused, then the one that went through
    (record,) = [r for r in caplog.records if r.getMessage().startswith("cannot label node")]
    assert getattr(record, "status", 0) == 422 and "denied request" in getattr(record, "error", "")


async def test_refused_for_a_while_then_exactly_right_without_flapping(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """Node writes refused for a while during a relabel (an admission policy denying
    the extender's updates, say), then allowed: every node ends with exactly the right
    labels within the backoff's cap of the refusal's end, with no node event to prompt
    it, and no label is set and removed again on the way."""
    pool(fake_apiserver, 12, sandbox="a")
    pool(fake_apiserver, 12, sandbox="b")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "a"}))
    a = await replicas("a", label=replace(FAST, retry_initial=0.05, retry_max=0.3))
    await eventually(in_line(fake_apiserver), what="labelled")
    written = len(fake_apiserver.changes(NODES))
    fake_apiserver.fail_next(10_000, 422, verbs={"patch"}, resource=NODES, message="denied by policy")
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"sandbox": "b"}}})
    await eventually(lambda: node_patches(fake_apiserver) >= 24 + 24, what="every move refused")
    assert actual_labels(fake_apiserver) != expected_labels(fake_apiserver)
    fake_apiserver.clear_failures()
    await eventually(in_line(fake_apiserver), timeout=5.0, what="in line after the refusal")
    # Each node changed once: 24 moves, no flapping.
    moved = fake_apiserver.changes(NODES)[written:]
    assert len(moved) == 24 and len({obj["metadata"]["name"] for _, obj, _ in moved}) == 24
    # The refusal is the labeller's condition, counted once (it was once per node).
    assert a.metric("runtimeclass_extender_node_label_write_errors_total", reason="rejected") == 1


async def test_a_class_that_loses_its_rules_keeps_its_label_while_pods_require_it(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """A pod admitted with the class's label in its (immutable) nodeSelector must stay
    schedulable: when its class loses its node rules, the label is not removed but put
    on every node (all can run the class now). Deleting the class removes it."""
    pool(fake_apiserver, 2, sandbox="gvisor")
    pool(fake_apiserver, 2)
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    key = f"{PREFIX}/gvisor"
    waiting = make_pod("waiting", runtime_class="gvisor", scheduler_name="runtimeclass-scheduler")
    waiting["spec"]["nodeSelector"] = {key: "true"}
    fake_apiserver.add(PODS, waiting)
    a = await replicas("a")
    await eventually(in_line(fake_apiserver), what="labelled")
    assert sum(key in labels for labels in actual_labels(fake_apiserver).values()) == 2

    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", lambda obj: obj.pop("scheduling", None))
    await eventually(
        lambda: all(labels.get(key) == "true" for labels in actual_labels(fake_apiserver).values()),
        what="the label on every node",
    )
    # A node joining later gets it too.
    fake_apiserver.add(NODES, make_node("late"))
    await eventually(lambda: actual_labels(fake_apiserver)["late"].get(key) == "true", what="on the new node")

    fake_apiserver.delete(RUNTIME_CLASSES, "gvisor")
    await eventually(
        lambda: all(labels == {} for labels in actual_labels(fake_apiserver).values()), what="removed"
    )
    assert a.labeller is not None


async def test_a_class_without_rules_whose_label_nobody_uses_gets_none(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    pool(fake_apiserver, 2, sandbox="gvisor")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "other"}))
    await replicas("a")
    await eventually(in_line(fake_apiserver), what="in line")
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", lambda obj: obj.pop("scheduling", None))
    await eventually(in_line(fake_apiserver), what="still none")
    await asyncio.sleep(0.3)
    assert all(labels == {} for labels in actual_labels(fake_apiserver).values())
    assert node_patches(fake_apiserver) == 0


async def test_an_edit_that_moves_no_label_compares_nothing(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """A class's labels or annotations edited: nothing decides its nodes differently,
    so no pass over the nodes and no log line (at 15,000 nodes a compare is work)."""
    caplog.set_level(logging.INFO, logger="extender.labeller")
    pool(fake_apiserver, 3, sandbox="gvisor")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    a = await replicas("a")
    await eventually(in_line(fake_apiserver), what="labelled")
    assert a.labeller is not None
    compared: list[int] = []  # the compares a class change started, by nodes compared
    compare = a.labeller._compare

    async def counting(class_name: str | None) -> None:
        if class_name is not None:
            compared.append(len(a.state.nodes))
        await compare(class_name)

    a.labeller._compare = counting  # type: ignore[method-assign]
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"metadata": {"labels": {"team": "infra"}}})
    await eventually(
        lambda: (
            a.state.runtime_classes["gvisor"].resource_version
            == fake_apiserver.get(RUNTIME_CLASSES, "gvisor")["metadata"]["resourceVersion"]
        ),  # type: ignore[index]
        what="the edit seen",
    )
    await asyncio.sleep(0.2)
    assert compared == []
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", {"scheduling": {"nodeSelector": {"sandbox": "x"}}})
    await eventually(in_line(fake_apiserver), what="moved")
    assert compared and compared[0] == 3


async def test_a_compare_of_many_nodes_yields_the_loop(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """A term's first compare of every node against every class runs in slices: other
    work (here a ticker standing for /filter calls and Lease renewals) runs in between
    (bench/label_stall_bench.py measures the longest stall)."""
    for i in range(400):
        fake_apiserver.add(NODES, make_node(f"n{i}", labels={"pool": str(i % 4)}))
    for c in range(5):
        fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class(f"rc{c}", node_selector={"pool": str(c % 4)}))
    ticks = 0
    compares: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        # kube-scheduler's election durations: the ticker keeps the loop busy, and a
        # renewal late by more than the tests' fast deadline (0.6 s) on a loaded machine
        # would end the term before the labels are in.
        a = await replicas("a", label=replace(FAST, slice_seconds=0.0), election=SLOW_ELECTION)
        assert a.labeller is not None
        compare = a.labeller._compare

        async def counting(class_name: str | None) -> None:
            before = ticks
            await compare(class_name)
            compares.append(ticks - before)

        a.labeller._compare = counting  # type: ignore[method-assign]
        # 400 writes through the test API server, on a loop the ticker keeps busy: a bound
        # for a loaded machine, not a speed the test asks for.
        await eventually(in_line(fake_apiserver), timeout=120.0, what="labelled")
    finally:
        task.cancel()
    # The first compare (400 nodes, a slice each 16 nodes) let the ticker run at least
    # once per slice.
    assert compares and compares[0] >= 400 // 16


# --- a node group's new node: the startup taint, and labels it cannot claim ------------

STARTUP = {"key": DEFAULT_STARTUP_TAINT, "effect": "NoSchedule"}
# A NoExecute taint with its timeAdded: what eviction counts from, sent back as it was.
UNREACHABLE = {
    "key": "node.kubernetes.io/unreachable",
    "effect": "NoExecute",
    "timeAdded": "2026-11-25T10:00:00Z",
}


def taints_of(server: FakeApiServer, name: str) -> list[dict[str, str]]:
    return list(((server.get(NODES, name) or {}).get("spec") or {}).get("taints") or [])


async def test_a_new_node_loses_its_startup_taint_in_the_write_that_labels_it(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.labeller")
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    # Registered by its kubelet: the class's node selector, no derived label (a kubelet
    # cannot set one), the startup taint among others.
    fake_apiserver.add(
        NODES, make_node("gvisor-new", labels={"sandbox": "gvisor"}, taints=[UNREACHABLE, STARTUP])
    )
    await eventually(lambda: taints_of(fake_apiserver, "gvisor-new") == [UNREACHABLE], what="untainted")
    assert actual_labels(fake_apiserver)["gvisor-new"] == {f"{PREFIX}/gvisor": "true"}
    # One write did both: the labels were right the moment the taint went.
    writes = [
        r for r in fake_apiserver.requests if r.verb == "patch" and r.path == "/api/v1/nodes/gvisor-new"
    ]
    assert len(writes) == 1
    await eventually(
        lambda: a.metric("runtimeclass_extender_node_startup_taints_removed_total") == 1, what="counted"
    )
    assert any(r.getMessage() == "removed the startup taint" for r in caplog.records)

    # A node no class runs loses the taint too (its labels, none, are right at once).
    fake_apiserver.add(NODES, make_node("plain-new", taints=[STARTUP]))
    await eventually(lambda: taints_of(fake_apiserver, "plain-new") == [], what="plain node untainted")
    assert actual_labels(fake_apiserver)["plain-new"] == {}


async def test_the_startup_taint_is_left_alone_when_off(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    fake_apiserver.add(NODES, make_node("gvisor-new", labels={"sandbox": "gvisor"}, taints=[STARTUP]))
    async with replica_set(
        fake_apiserver, tmp_path, requeue=None, label=replace(FAST, startup_taint="")
    ) as start:
        a = await start("a")
        await eventually(lambda: a.leading, what="a leads")
        await eventually(in_line(fake_apiserver), what="labelled")
    assert taints_of(fake_apiserver, "gvisor-new") == [STARTUP]


async def test_a_node_claiming_a_class_it_cannot_run_loses_the_label(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """A node group's template copied a derived label onto a node that does not pass
    the class's rules (its nodes lack the class's node selector): the labeller owns the
    prefix and removes the claim; the node's startup taint goes in the same write."""
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    fake_apiserver.add(
        NODES, make_node("claims-gvisor", labels={f"{PREFIX}/gvisor": "true"}, taints=[STARTUP])
    )
    await eventually(lambda: actual_labels(fake_apiserver)["claims-gvisor"] == {}, what="the claim removed")
    await eventually(lambda: taints_of(fake_apiserver, "claims-gvisor") == [], what="untainted")
    assert node_writes(fake_apiserver, "claims-gvisor") == 1


KATA = "katacontainers.io/kata-runtime"


def node_writes(server: FakeApiServer, name: str) -> int:
    return sum(1 for r in server.requests if r.verb == "patch" and r.path == f"/api/v1/nodes/{name}")


async def test_a_new_node_keeps_its_startup_taint_for_a_label_its_pending_pod_waits_for(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """kata-deploy labels a node katacontainers.io/kata-runtime once its DaemonSet pod has
    run there, after the node registered. A kata pod waits; the new node fits runc (every
    linux node does) but not kata yet. It lost its startup taint at its first reconcile,
    and cluster-autoscaler, seeing a ready node the pod cannot use, added another. Now
    it keeps the taint while it fits none of the classes pending pods wait for, and
    loses it in the write that labels it when the label comes."""
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("runc", node_selector={"kubernetes.io/os": "linux"}))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata", node_selector={KATA: "true"}))
    fake_apiserver.add(PODS, make_pod("sandboxed-0", runtime_class="kata"))
    async with replica_set(
        fake_apiserver, tmp_path, requeue=None, label=replace(FAST, startup_taint_grace=600.0)
    ) as start:
        a = await start("a")
        await eventually(lambda: a.leading, what="a leads")
        fake_apiserver.add(NODES, make_node("kata-new", labels={"kubernetes.io/os": "linux"}, taints=[STARTUP]))
        await eventually(
            lambda: actual_labels(fake_apiserver)["kata-new"] == {f"{PREFIX}/runc": "true"}, what="runc's label"
        )
        await stays(lambda: taints_of(fake_apiserver, "kata-new") == [STARTUP], duration=0.3, what="still tainted")
        before = node_writes(fake_apiserver, "kata-new")
        fake_apiserver.modify(NODES, "kata-new", {"metadata": {"labels": {KATA: "true"}}})
        await eventually(lambda: taints_of(fake_apiserver, "kata-new") == [], what="untainted")
        assert actual_labels(fake_apiserver)["kata-new"] == {f"{PREFIX}/runc": "true", f"{PREFIX}/kata": "true"}
        # The label and the taint's removal in one write.
        assert node_writes(fake_apiserver, "kata-new") == before + 1
        await eventually(
            lambda: a.metric("runtimeclass_extender_node_startup_taints_removed_total") == 1, what="counted once"
        )


async def test_a_node_the_label_never_reaches_loses_its_startup_taint_when_its_grace_ends(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata", node_selector={KATA: "true"}))
    fake_apiserver.add(PODS, make_pod("sandboxed-0", runtime_class="kata"))
    async with replica_set(
        fake_apiserver, tmp_path, requeue=None, label=replace(FAST, startup_taint_grace=0.3)
    ) as start:
        a = await start("a")
        await eventually(lambda: a.leading, what="a leads")
        fake_apiserver.add(NODES, make_node("plain-new", taints=[STARTUP]))
        await eventually(lambda: taints_of(fake_apiserver, "plain-new") == [], what="untainted after its grace")
        assert actual_labels(fake_apiserver)["plain-new"] == {}


async def test_a_taint_added_between_the_read_and_the_patch_is_kept(
    fake_apiserver: FakeApiServer, replicas: Start
) -> None:
    """The untainting write reads the node, then patches on condition of that read's
    resourceVersion: a taint added in between makes it a 409, and the next attempt,
    reading again, sends the new taint back (the docs promise it is never lost)."""
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"sandbox": "gvisor"}))
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    added = {"key": "example.com/maintenance", "effect": "NoSchedule"}
    patched: list[int] = []

    def between(request: Any) -> bool:
        # As the labeller's first patch of the node arrives, after its read: someone
        # has just added a taint.
        if request.verb == "patch" and request.path == "/api/v1/nodes/gvisor-new" and not patched:
            patched.append(1)
            fake_apiserver.modify(
                NODES, "gvisor-new", lambda node: node["spec"].setdefault("taints", []).append(dict(added))
            )
        return False

    fake_apiserver.fail_next(1, only_if=between)
    fake_apiserver.add(NODES, make_node("gvisor-new", labels={"sandbox": "gvisor"}, taints=[STARTUP]))
    await eventually(lambda: taints_of(fake_apiserver, "gvisor-new") == [added], what="only the startup taint gone")
    assert actual_labels(fake_apiserver)["gvisor-new"] == {f"{PREFIX}/gvisor": "true"}
    statuses = [status for request, status in fake_apiserver.answers if request.path == "/api/v1/nodes/gvisor-new" and request.verb == "patch"]
    assert statuses[0] == 409 and statuses[-1] == 200, statuses


async def test_a_taint_gone_by_the_time_of_the_read_is_not_counted_as_removed(
    fake_apiserver: FakeApiServer, replicas: Start, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone else removed the startup taint after the cache saw it: the labeller's
    read finds it gone and sends nothing. The counter and the log line said a removal
    all the same."""
    caplog.set_level(logging.INFO, logger="extender.labeller")
    a = await replicas("a")
    await eventually(lambda: a.leading, what="a leads")
    read: list[int] = []

    def removed_first(request: Any) -> bool:
        if request.verb == "get" and request.path == "/api/v1/nodes/plain-new" and not read:
            read.append(1)
            fake_apiserver.modify(NODES, "plain-new", lambda node: node["spec"].pop("taints"))
        return False

    fake_apiserver.fail_next(1, only_if=removed_first)
    fake_apiserver.add(NODES, make_node("plain-new", taints=[STARTUP]))
    await eventually(lambda: bool(read), what="the labeller's read")
    await eventually(lambda: not a.labeller.queue.busy, what="the node reconciled")
    assert node_writes(fake_apiserver, "plain-new") == 0
    assert a.metric("runtimeclass_extender_node_startup_taints_removed_total") == 0
    assert not any(r.getMessage() == "removed the startup taint" for r in caplog.records)
