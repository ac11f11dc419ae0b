"""The count of nodes each class's node rules pass (extender/labeller/event_decisions.py,
``FittingNodes``), kept up under node and class changes: after every change of a table
of them it equals a count over every node, and a node event re-judges that node alone.
And what a pass does per pending pod: a class's revision is digested once, not per pod,
and no note is made until it is read."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from types import MappingProxyType

import pytest

from extender.cluster.class_labels import ClassLabels
from extender.cluster.pending_pods import PendingPod, PendingPods
from extender.cluster.state import ClusterState
from extender.kube.store import Named
from extender.labeller import event_decisions
from extender.labeller.event_decisions import UNAVAILABLE_REASON, Event, EventDecisions, FittingNodes
from extender.policy_file import load_policy
from policies.objects import NodeView, RuntimeClassView, RuntimeHandler, SelectorRequirement
from policies.registry import Policy, build_policy

PREFIX = "runtimeclass.node-restriction.kubernetes.io"
WITH_HANDLERS = build_policy(
    {
        "apiVersion": "runtimeclass-extender.dev/v1alpha1",
        "kind": "Policy",
        "predicates": [
            {"name": "RuntimeClassExists"},
            {"name": "RuntimeClassNodeSelector"},
            {"name": "RuntimeHandler", "options": {"nodesWithoutReport": "fail"}},
            {"name": "TaintToleration"},
        ],
    }
)


class CountingLabels(ClassLabels):
    """ClassLabels counting its rule checks (one per class and node judged)."""

    checks = 0

    def passes(self, runtime_class: RuntimeClassView, node: NodeView) -> bool:
        self.checks += 1
        return super().passes(runtime_class, node)


def node(name: str, handlers: tuple[str, ...] | None = ("runsc", "kata"), **labels: str) -> NodeView:
    return NodeView(
        name=name,
        labels=MappingProxyType(labels),
        runtime_handlers=None if handlers is None else tuple(RuntimeHandler(h) for h in handlers),
    )


def rc(name: str, handler: str = "runsc", **selector: str) -> RuntimeClassView:
    return RuntimeClassView(name=name, handler=handler, node_selector=MappingProxyType(selector))


FULL = "0/50 nodes are available: 3 Insufficient cpu, 47 node(s) didn't match Pod's node affinity/selector."


def in_pools(*pools: str) -> tuple[SelectorRequirement, ...]:
    return (SelectorRequirement("pool", "In", pools),)


Change = Callable[[ClusterState], None]


def upsert_node(view: NodeView) -> Change:
    return lambda state: state.nodes.upsert(view)


def delete_node(name: str) -> Change:
    return lambda state: state.nodes.delete(name)


def upsert_class(view: RuntimeClassView) -> Change:
    return lambda state: state.runtime_classes.upsert(view)


def delete_class(name: str) -> Change:
    return lambda state: state.runtime_classes.delete(name)


def relist_nodes(*views: NodeView) -> Change:
    return lambda state: state.nodes.replace(views)


# Each change, then every class's count compared with a count over every node.
CHANGES: list[tuple[str, Change]] = [
    ("a node that fits gvisor", upsert_node(node("n1", pool="a"))),
    ("a node that fits nothing but the class without rules", upsert_node(node("n2", pool="b"))),
    ("a node that fits kata", upsert_node(node("n3", pool="c"))),
    ("a node without handler reports", upsert_node(node("n4", handlers=None, pool="a"))),
    ("a node moves into gvisor's pool", upsert_node(node("n2", pool="a"))),
    ("a node moves out of it", upsert_node(node("n1", pool="c"))),
    ("a node updated to the same labels", upsert_node(node("n1", pool="c"))),
    ("a node's other labels change", upsert_node(node("n1", pool="c", zone="z1"))),
    ("a node stops running runsc", upsert_node(node("n2", handlers=("kata",), pool="a"))),
    ("a node is deleted", delete_node("n3")),
    ("a node never seen is deleted", delete_node("nowhere")),
    ("a node is added again", upsert_node(node("n3", pool="c"))),
    ("gvisor's selector is edited to pool c", upsert_class(rc("gvisor", pool="c"))),
    (
        "a metadata-only edit of kata",
        upsert_class(RuntimeClassView("kata", "kata", MappingProxyType({"pool": "c"}), resource_version="9")),
    ),
    ("kata's handler is edited", upsert_class(rc("kata", handler="runsc", pool="c"))),
    (
        "a class with an expressive selector",
        upsert_class(RuntimeClassView("wasm", "runsc", match_expressions=in_pools("a", "c"))),
    ),
    ("a node fits it", upsert_node(node("n5", pool="a"))),
    ("gvisor is deleted", delete_class("gvisor")),
    ("nodes change while it is gone", upsert_node(node("n6", pool="c"))),
    ("gvisor is created again", upsert_class(rc("gvisor", pool="a"))),
    (
        "a class whose annotation is broken",
        upsert_class(RuntimeClassView("broken", "runsc", selector_error="bad")),
    ),
    (
        "a re-LIST: n1 and n2 gone, n3 changed, n7 new, the rest as they were",
        relist_nodes(
            node("n3", pool="a"),
            node("n4", handlers=None, pool="a"),
            node("n5", pool="a"),
            node("n6", pool="c"),
            node("n7", pool="c"),
        ),
    ),
    ("a node after the re-LIST", upsert_node(node("n8", pool="a"))),
    ("every node deleted", relist_nodes()),
    ("a node in an empty cluster", upsert_node(node("n9", pool="c"))),
]

FIRST_CLASSES = (rc("gvisor", pool="a"), rc("kata", handler="kata", pool="c"), rc("plain"))


@pytest.mark.parametrize("policy", [load_policy(), WITH_HANDLERS], ids=["default policy", "runtime handlers"])
@pytest.mark.parametrize("asked", ["after every change", "every third change"])
def test_the_count_follows_every_node_and_class_change_exactly(policy: Policy, asked: str) -> None:
    state = ClusterState()
    labels = ClassLabels(PREFIX, policy)
    for view in FIRST_CLASSES:
        state.runtime_classes.upsert(view)
    fitting = FittingNodes(labels, state.nodes, state.runtime_classes)
    every = 1 if asked == "after every change" else 3
    for step, (what, change) in enumerate(CHANGES):
        change(state)
        if step % every and step != len(CHANGES) - 1:
            continue  # left to the events: counted (or moved) when next asked
        for runtime_class in state.runtime_classes.values():
            recount = sum(1 for n in state.nodes.values() if labels.passes(runtime_class, n))
            assert fitting.count(runtime_class) == recount, f"{what}: {runtime_class.name}"


def test_a_node_event_re_judges_that_node_alone_and_a_class_edit_recounts_that_class_alone() -> None:
    state = ClusterState()
    labels = CountingLabels(PREFIX, load_policy())
    classes = [rc(f"class-{c}", group=f"g{c}") for c in range(10)]
    for view in classes:
        state.runtime_classes.upsert(view)
    state.nodes.replace(node(f"n{i}", group=f"g{i % 10}") for i in range(1000))
    fitting = FittingNodes(labels, state.nodes, state.runtime_classes)
    assert [fitting.count(view) for view in classes] == [100] * 10
    assert labels.checks == 10 * 1000  # each class counted once

    labels.checks = 0
    state.nodes.upsert(node("n0", group="g1"))
    state.nodes.delete("n5")
    state.nodes.upsert(node("new", group="g0"))
    assert [fitting.count(view) for view in classes] == [100, 101, 100, 100, 100, 99, 100, 100, 100, 100]
    # Its old view and its new, for each class counted; nothing when asked.
    assert labels.checks == 2 * 10 + 10 + 10

    labels.checks = 0
    edited = rc("class-3", group="g4")
    state.runtime_classes.upsert(edited)
    assert fitting.count(edited) == 100
    assert [fitting.count(view) for view in classes if view.name != "class-3"] == [
        100,
        101,
        100,
        100,
        99,
        100,
        100,
        100,
        100,
    ]
    assert labels.checks == 1000  # that class over every node, the others not at all


def test_a_class_asked_about_before_its_change_reaches_the_index_is_counted_for_the_new_class() -> None:
    """A listener of the class store that runs before the index hears of the change and
    asks about the new class gets the new class's count, not the old one's."""
    state = ClusterState()
    labels = ClassLabels(PREFIX, load_policy())
    state.nodes.replace([node("n1", pool="a"), node("n2", pool="b"), node("n3", pool="b")])
    heard: list[int] = []
    index: list[FittingNodes] = []

    def asks(_kind: str, _old: Named | None, new: Named | None) -> None:
        if index and isinstance(new, RuntimeClassView):
            heard.append(index[0].count(new))

    state.runtime_classes.add_listener(asks)  # before the index's own listener
    state.runtime_classes.upsert(rc("gvisor", pool="a"))
    index.append(FittingNodes(labels, state.nodes, state.runtime_classes))
    assert index[0].count(state.runtime_classes["gvisor"]) == 1
    state.runtime_classes.upsert(rc("gvisor", pool="b"))
    assert heard == [2]
    assert index[0].count(state.runtime_classes["gvisor"]) == 2


def test_a_pass_after_node_events_judges_those_nodes_alone() -> None:
    """The events' decisions under node churn: each pass says how many nodes run the
    class as a count over every node would, and costs rule checks for the nodes that
    changed only (a recount of every node after each change made a pass at 15,000
    nodes and 10 classes take 0.2 to 0.4 s: bench/events_pass_bench.py)."""
    state = ClusterState()
    labels = CountingLabels(PREFIX, load_policy())
    pods = PendingPods()
    decisions = EventDecisions(labels, state.nodes, state.runtime_classes, pods)
    state.runtime_classes.upsert(rc("gvisor", pool="a"))
    state.nodes.replace(node(f"n{i}", pool="a" if i < 3 else "b") for i in range(50))
    pods.upsert(PendingPod("default", "p", "uid-p", "gvisor", "runtimeclass-scheduler", unschedulable=FULL))

    def told() -> str:
        (event,) = decisions.due_events()
        return event.note

    assert told().startswith('RuntimeClass "gvisor": 3 of 50 nodes can run it')
    for round_ in range(3):
        labels.checks = 0
        for i in range(5):
            state.nodes.upsert(node(f"n{10 + i}", pool="a" if round_ % 2 == 0 else "b", round=str(round_)))
        fitting = 8 if round_ % 2 == 0 else 3
        assert told().startswith(f'RuntimeClass "gvisor": {fitting} of 50 nodes can run it'), round_
        assert labels.checks == 2 * 5  # the five nodes, old and new: not the 50


class CountingDecisions(EventDecisions):
    """EventDecisions counting the unavailable notes it makes."""

    notes = 0

    def unavailable_note(self, runtime_class: RuntimeClassView, pod: PendingPod) -> str:
        self.notes += 1
        return super().unavailable_note(runtime_class, pod)


def test_a_pass_digests_each_class_once_and_makes_no_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass over many pending pods of one class no node of which can take them: the
    class's revision is digested once (and again only after the class store changes),
    and no pod's note is made until it is read (both were made for every pod at every
    pass: 14 µs a pod, a pass of 131 ms at 10,000 pods, bench/events_pass_bench.py)."""
    digested: list[Hashable] = []

    def digest(revision: Hashable) -> str:
        digested.append(revision)
        return revision_digest(revision)

    revision_digest = event_decisions.revision_digest
    monkeypatch.setattr(event_decisions, "revision_digest", digest)
    state = ClusterState()
    labels = ClassLabels(PREFIX, load_policy())
    pods = PendingPods()
    decisions = CountingDecisions(labels, state.nodes, state.runtime_classes, pods)
    state.runtime_classes.upsert(rc("gvisor", pool="a"))
    state.nodes.replace(node(f"n{i}", pool="a" if i < 3 else "b") for i in range(50))
    for i in range(200):
        pods.upsert(
            PendingPod("default", f"p{i}", f"uid-{i}", "gvisor", "runtimeclass-scheduler", unschedulable=FULL)
        )

    due = decisions.due_events()
    assert len(due) == 200 and {event.reason for event in due} == {UNAVAILABLE_REASON}
    assert len(digested) == 1 and decisions.notes == 0
    state.nodes.upsert(node("n0", pool="a", beat="1"))  # a node event: the class store is as it was
    assert len(decisions.due_events()) == 200
    assert len(digested) == 1 and decisions.notes == 0

    # A note is made when read, once, and says what one made then for the pod says.
    first = due[0]
    assert first.note.startswith('RuntimeClass "gvisor": 3 of 50 nodes can run it')
    assert first.note == decisions.unavailable_note(state.runtime_classes["gvisor"], first.pod)
    assert decisions.notes == 2  # the event's, and the one made to compare

    # The class edited: digested again, once, and every event is of the new revision.
    state.runtime_classes.upsert(rc("gvisor", pool="b"))
    again = decisions.due_events()
    assert len(digested) == 2 and decisions.notes == 2
    assert len({event.class_version for event in again}) == 1
    assert again[0].class_version != first.class_version
    assert again[0].class_version == revision_digest(labels.rules_key(state.runtime_classes["gvisor"]))


def test_events_are_equal_when_they_are_on_the_same_pod_for_the_same_revision_and_say_the_same() -> None:
    pod = PendingPod("default", "p", "uid-p", "gvisor", "runtimeclass-scheduler")
    said = Event(pod, "gvisor", "v1", "no node", UNAVAILABLE_REASON)
    made = Event(pod, "gvisor", "v1", lambda _pod: "no node", UNAVAILABLE_REASON)
    assert said == made and hash(said) == hash(made) and made.name == said.name
    assert said != Event(pod, "gvisor", "v1", lambda _pod: "another", UNAVAILABLE_REASON)
    assert said != Event(pod, "gvisor", "v2", "no node", UNAVAILABLE_REASON)
