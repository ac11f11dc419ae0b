"""The audit of running pods: which bound pods no longer fit their RuntimeClass's nodes.

Table-driven checks of each problem kind, the taint rules (NoSchedule after binding is
fine; NoExecute needs the pod's own toleration; tolerationSeconds as the taint manager
reads it), parsing, the cluster file with pods, and the key property: the incremental
``MisplacedIndex`` always agrees with a from-scratch ``audit()`` and reports each
transition exactly once.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from extender.audit.index import MisplacedIndex, Transition
from extender.audit.misplaced import (
    PROBLEM_NODE_NOT_FOUND,
    PROBLEM_NOEXECUTE_TAINT,
    PROBLEM_OVERHEAD_MISMATCH,
    PROBLEM_RUNTIMECLASS_DELETED,
    PROBLEM_SELECTOR_INVALID,
    PROBLEM_SELECTOR_MISMATCH,
    PROBLEMS,
    Misplaced,
    audit,
    misplaced_of,
    problems_of,
)
from extender.cluster.file_source import (
    ClusterFileError,
    load_cluster_file,
    load_cluster_file_with_pods,
    parse_cluster_with_pods,
)
from extender.cluster.objects import ObjectError
from extender.cluster.pod_views import ScheduledPod, TolerationInterner, is_audited, scheduled_pod_from_api
from extender.cluster.state import ClusterState
from extender.kube.store import Store
from policies.objects import NodeView, RuntimeClassView, SelectorRequirement, Taint, Toleration

GVISOR_LABELS = MappingProxyType({"runtime": "gvisor"})
SANDBOX_NOEXEC = Taint("sandbox", "NoExecute", "true")
SANDBOX_NOSCHED = Taint("sandbox", "NoSchedule", "true")
TOLERATE_SANDBOX = Toleration("sandbox", "Exists", "", "NoExecute")
TOLERATE_ALL = Toleration("", "Exists", "", "")


def node(
    name: str = "n1", *, labels: dict[str, str] | None = None, taints: tuple[Taint, ...] = ()
) -> NodeView:
    return NodeView(
        name=name,
        labels=MappingProxyType(dict(GVISOR_LABELS) if labels is None else labels),
        taints=taints,
    )


def gvisor(**changes: Any) -> RuntimeClassView:
    fields: dict[str, Any] = {"name": "gvisor", "handler": "runsc", "node_selector": GVISOR_LABELS}
    fields.update(changes)
    return RuntimeClassView(**fields)


def pod(
    name: str = "p",
    *,
    namespace: str = "default",
    runtime_class: str = "gvisor",
    node_name: str = "n1",
    tolerations: tuple[Toleration, ...] = (),
    zero_seconds: tuple[int, ...] = (),
    uid: str = "",
    terminal: bool = False,
    overhead: dict[str, str] | None = None,
) -> ScheduledPod:
    return ScheduledPod(
        overhead=overhead,
        namespace=namespace,
        pod_name=name,
        uid=uid or f"uid-{namespace}-{name}",
        runtime_class_name=runtime_class,
        node_name=node_name,
        tolerations=tolerations,
        zero_seconds=zero_seconds,
        terminal=terminal,
    )


def cluster(nodes: list[NodeView], classes: list[RuntimeClassView]) -> ClusterState:
    state = ClusterState()
    state.nodes.replace(nodes)
    state.runtime_classes.replace(classes)
    return state


# ----- problems_of: one row per situation ------------------------------------------------

KATA_OVERHEAD = MappingProxyType({"cpu": "250m", "memory": "160Mi"})

CASES = [
    pytest.param([node()], [gvisor()], pod(), [], id="fits"),
    pytest.param(
        [node()], [gvisor(overhead=KATA_OVERHEAD)], pod(), [PROBLEM_OVERHEAD_MISMATCH], id="overhead-missing"
    ),
    pytest.param(
        [node()],
        [gvisor(overhead=KATA_OVERHEAD)],
        pod(overhead={"cpu": "0.25", "memory": "167772160"}),
        [],
        id="overhead-equal-by-value",
    ),
    pytest.param(
        [node()],
        [gvisor(overhead=KATA_OVERHEAD)],
        pod(overhead={"cpu": "250m", "memory": "160M"}),
        [PROBLEM_OVERHEAD_MISMATCH],
        id="overhead-differs",
    ),
    pytest.param(
        [node()],
        [gvisor()],
        pod(overhead={"cpu": "1"}),
        [PROBLEM_OVERHEAD_MISMATCH],
        id="overhead-without-class-one",
    ),
    pytest.param([node()], [gvisor(overhead={})], pod(), [], id="class-overhead-empty"),
    pytest.param(
        [],
        [gvisor(overhead=KATA_OVERHEAD)],
        pod(),
        [PROBLEM_NODE_NOT_FOUND, PROBLEM_OVERHEAD_MISMATCH],
        id="node-gone-and-overhead-missing",
    ),
    pytest.param(
        [node(labels={"runtime": "kata"})],
        [gvisor(overhead=KATA_OVERHEAD)],
        pod(),
        [PROBLEM_SELECTOR_MISMATCH, PROBLEM_OVERHEAD_MISMATCH],
        id="mismatch-first-then-overhead",
    ),
    pytest.param(
        [node()],
        [],
        pod(overhead={"cpu": "1"}),
        [PROBLEM_RUNTIMECLASS_DELETED],
        id="class-gone-no-overhead-check",
    ),
    pytest.param(
        [node(labels={"runtime": "gvisor", "extra": "x"})], [gvisor()], pod(), [], id="extra-labels-fit"
    ),
    pytest.param([node()], [], pod(), [PROBLEM_RUNTIMECLASS_DELETED], id="class-deleted"),
    pytest.param([], [gvisor()], pod(), [PROBLEM_NODE_NOT_FOUND], id="node-not-found"),
    pytest.param(
        [], [], pod(), [PROBLEM_RUNTIMECLASS_DELETED, PROBLEM_NODE_NOT_FOUND], id="class-and-node-gone"
    ),
    pytest.param(
        [node(labels={"runtime": "kata"})], [gvisor()], pod(), [PROBLEM_SELECTOR_MISMATCH], id="label-changed"
    ),
    pytest.param([node(labels={})], [gvisor()], pod(), [PROBLEM_SELECTOR_MISMATCH], id="label-removed"),
    pytest.param(
        [node(labels={"runtime": "gvisor", "zone": "b"})],
        [gvisor(match_expressions=(SelectorRequirement("zone", "In", ("a",)),))],
        pod(),
        [PROBLEM_SELECTOR_MISMATCH],
        id="annotation-term-mismatch",
    ),
    pytest.param(
        [node(labels={"runtime": "gvisor", "zone": "a"})],
        [gvisor(match_expressions=(SelectorRequirement("zone", "In", ("a",)),))],
        pod(),
        [],
        id="annotation-term-match",
    ),
    pytest.param(
        [node()],
        [gvisor(selector_error="matchExpressions[0].operator: unknown operator 'Near'")],
        pod(),
        [PROBLEM_SELECTOR_INVALID],
        id="annotation-invalid",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(),
        [PROBLEM_NOEXECUTE_TAINT],
        id="noexecute-untolerated",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOSCHED,))], [gvisor()], pod(), [], id="noschedule-after-binding-is-fine"
    ),
    pytest.param(
        [node(taints=(Taint("sandbox", "PreferNoSchedule"),))], [gvisor()], pod(), [], id="prefernoschedule"
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(TOLERATE_SANDBOX,)),
        [],
        id="noexecute-own-toleration",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor(tolerations=(TOLERATE_SANDBOX,))],
        pod(),
        [PROBLEM_NOEXECUTE_TAINT],
        id="noexecute-class-toleration-does-not-count",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(Toleration("sandbox", "Equal", "false", "NoExecute"),)),
        [PROBLEM_NOEXECUTE_TAINT],
        id="noexecute-other-value",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(Toleration("sandbox", "Exists", "", "NoSchedule"),)),
        [PROBLEM_NOEXECUTE_TAINT],
        id="noexecute-toleration-for-other-effect",
    ),
    # A positive tolerationSeconds is a ScheduledPod toleration like any other (the
    # seconds are not kept): it tolerates until it expires.
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(TOLERATE_SANDBOX,), zero_seconds=(0,)),
        [PROBLEM_NOEXECUTE_TAINT],
        id="noexecute-zero-seconds-evicts-at-once",
    ),
    # The taint manager uses the *first* toleration that matches (GetMatchingTolerations).
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(TOLERATE_ALL, TOLERATE_SANDBOX), zero_seconds=(0,)),
        [PROBLEM_NOEXECUTE_TAINT],
        id="first-match-zero-seconds",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(TOLERATE_SANDBOX, TOLERATE_ALL), zero_seconds=(1,)),
        [],
        id="first-match-forever",
    ),
    pytest.param(
        [node(labels={}, taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(),
        [PROBLEM_SELECTOR_MISMATCH, PROBLEM_NOEXECUTE_TAINT],
        id="selector-and-taint",
    ),
    pytest.param(
        [node(labels={}, taints=(SANDBOX_NOEXEC,))],
        [],
        pod(),
        [PROBLEM_RUNTIMECLASS_DELETED, PROBLEM_NOEXECUTE_TAINT],
        id="class-deleted-and-taint",
    ),
    pytest.param(
        [node(labels={}, taints=(SANDBOX_NOEXEC,))], [], pod(runtime_class=""), [], id="no-class-is-skipped"
    ),
    pytest.param([node(labels={})], [gvisor()], pod(node_name=""), [], id="unscheduled-is-skipped"),
    pytest.param([node(labels={})], [gvisor()], pod(terminal=True), [], id="terminated-is-skipped"),
]


@pytest.mark.parametrize(("nodes", "classes", "the_pod", "labels"), CASES)
def test_problems(
    nodes: list[NodeView], classes: list[RuntimeClassView], the_pod: ScheduledPod, labels: list[str]
) -> None:
    state = cluster(nodes, classes)
    problems = problems_of(the_pod, state)
    assert [p.label for p in problems] == labels
    assert [p.label for p in problems] == [label for label in PROBLEMS if label in labels]  # stable order
    found = audit([the_pod], state)
    assert [m.problem for m in found] == labels[:1]


MESSAGES = [
    pytest.param(
        [node()],
        [],
        pod(),
        'RuntimeClass "gvisor" not found: it was deleted after the pod was scheduled, and a '
        "replacement would fit no node",
        id="class-deleted",
    ),
    pytest.param(
        [],
        [gvisor()],
        pod(node_name="gone-1"),
        'node "gone-1" not found: the pod is bound to a node the cluster no longer has, and the '
        "pod garbage collector deletes such pods",
        id="node-not-found",
    ),
    pytest.param(
        [node(labels={"runtime": "kata"})],
        [gvisor()],
        pod(),
        "node \"n1\" no longer matches RuntimeClass \"gvisor\": label runtime is 'kata', not 'gvisor'",
        id="selector-mismatch",
    ),
    pytest.param(
        [node()],
        [gvisor(selector_error="bad operator")],
        pod(),
        'RuntimeClass "gvisor" has an invalid node selector annotation, so it fits no node: bad operator',
        id="selector-invalid",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC, Taint("maintenance", "NoExecute")))],
        [gvisor(tolerations=(TOLERATE_SANDBOX,))],
        pod(),
        'node "n1" has NoExecute taint(s) the pod does not tolerate, so the taint manager evicts it: '
        "sandbox=true:NoExecute (the RuntimeClass tolerates it, but NoExecute needs the pod's own "
        "toleration); maintenance:NoExecute",
        id="noexecute-with-class-note",
    ),
    pytest.param(
        [node(taints=(SANDBOX_NOEXEC,))],
        [gvisor()],
        pod(tolerations=(TOLERATE_SANDBOX,), zero_seconds=(0,)),
        'node "n1" has NoExecute taint(s) the pod does not tolerate, so the taint manager evicts it: '
        "sandbox=true:NoExecute (tolerated for 0s: tolerationSeconds <= 0)",
        id="noexecute-zero-seconds",
    ),
    pytest.param(
        [node()],
        [gvisor(overhead=KATA_OVERHEAD)],
        pod(),
        'spec.overhead (none) differs from RuntimeClass "gvisor" overhead.podFixed {cpu: 250m, memory: 160Mi}: '
        "the pod's sandbox is counted wrong until the pod is recreated (spec.overhead is immutable)",
        id="overhead-missing",
    ),
    pytest.param(
        [node()],
        [gvisor()],
        pod(overhead={"cpu": "1"}),
        'spec.overhead {cpu: 1} differs from RuntimeClass "gvisor" overhead.podFixed (none): '
        "the pod's sandbox is counted wrong until the pod is recreated (spec.overhead is immutable)",
        id="overhead-without-class-one",
    ),
]


@pytest.mark.parametrize(("nodes", "classes", "the_pod", "message"), MESSAGES)
def test_messages(
    nodes: list[NodeView], classes: list[RuntimeClassView], the_pod: ScheduledPod, message: str
) -> None:
    problems = problems_of(the_pod, cluster(nodes, classes))
    assert problems[0].detail == message


def test_problems_accept_plain_mappings() -> None:
    class Plain:
        def __init__(self) -> None:
            self.nodes = {"n1": node(labels={})}
            self.runtime_classes = {"gvisor": gvisor()}

    assert [p.label for p in problems_of(pod(), Plain())] == [PROBLEM_SELECTOR_MISMATCH]


def test_audit_sorts_and_skips() -> None:
    state = cluster([node("ok"), node("bad", labels={})], [gvisor()])
    pods = [
        pod("z", namespace="b", node_name="bad"),
        pod("y", namespace="a", node_name="bad"),
        pod("x", namespace="a", node_name="ok"),  # fits
        pod("w", namespace="a", node_name="bad", runtime_class=""),  # no class: out of scope
        pod("a", namespace="b", node_name="gone"),
    ]
    assert audit(pods, state) == [
        Misplaced("a", "y", "gvisor", "bad", PROBLEM_SELECTOR_MISMATCH, audit_detail(pods[1], state)),
        Misplaced("b", "a", "gvisor", "gone", PROBLEM_NODE_NOT_FOUND, audit_detail(pods[4], state)),
        Misplaced("b", "z", "gvisor", "bad", PROBLEM_SELECTOR_MISMATCH, audit_detail(pods[0], state)),
    ]
    assert audit([], state) == []


def audit_detail(the_pod: ScheduledPod, state: ClusterState) -> str:
    return problems_of(the_pod, state)[0].detail


# ----- parsing ------------------------------------------------------------------------------

API_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-0",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "42",
        "labels": {"app": "web"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
    },
    "spec": {
        "nodeName": "gvisor-1",
        "runtimeClassName": "gvisor",
        "schedulerName": "default-scheduler",
        "containers": [{"name": "c", "image": "nginx"}],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "sandbox", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
            {"key": "evict-now", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -5},
            {"key": "dedicated", "value": "x", "effect": "NoSchedule"},
        ],
    },
    "status": {"phase": "Running"},
}


def with_changes(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    out = {**base}
    for section, changes in sections.items():
        out[section] = {**base.get(section, {}), **changes}
    return out


def test_scheduled_pod_from_api() -> None:
    parsed = scheduled_pod_from_api(API_POD)
    assert parsed == ScheduledPod(
        namespace="shop",
        pod_name="web-0",
        uid="u-1",
        runtime_class_name="gvisor",
        node_name="gvisor-1",
        tolerations=(
            Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
            Toleration("sandbox", "Exists", "", "NoExecute"),
            Toleration("evict-now", "Exists", "", "NoExecute"),
            Toleration("dedicated", "", "x", "NoSchedule"),
        ),
        zero_seconds=(1, 2),
        resource_version="42",
        terminal=False,
    )
    assert parsed.name == "shop/web-0"
    assert is_audited(parsed)
    assert parsed.overhead is None


@pytest.mark.parametrize(
    ("overhead", "parsed"),
    [
        ({"cpu": "250m", "memory": "160Mi"}, {"cpu": "250m", "memory": "160Mi"}),
        ({"cpu": 1}, {"cpu": "1"}),  # a hand-written cluster file's number is a quantity too
        ({}, None),
    ],
)
def test_scheduled_pod_keeps_its_overhead(overhead: dict[str, Any], parsed: dict[str, str] | None) -> None:
    assert scheduled_pod_from_api(with_changes(API_POD, spec={"overhead": overhead})).overhead == parsed


@pytest.mark.parametrize(
    ("obj", "audited", "terminal"),
    [
        pytest.param(with_changes(API_POD, spec={"nodeName": None}), False, False, id="unbound-null"),
        pytest.param(with_changes(API_POD, spec={"nodeName": ""}), False, False, id="unbound-empty"),
        pytest.param(with_changes(API_POD, spec={"runtimeClassName": ""}), False, False, id="no-class"),
        pytest.param(with_changes(API_POD, status={"phase": "Succeeded"}), False, True, id="succeeded"),
        pytest.param(with_changes(API_POD, status={"phase": "Failed"}), False, True, id="failed"),
        pytest.param(with_changes(API_POD, status={"phase": "Pending"}), True, False, id="pending-bound"),
        pytest.param({**API_POD, "status": None}, True, False, id="no-status"),
        pytest.param({"metadata": {"name": "p", "namespace": "n"}}, False, False, id="no-spec"),
    ],
)
def test_scope(obj: dict[str, Any], audited: bool, terminal: bool) -> None:
    parsed = scheduled_pod_from_api(obj)
    assert is_audited(parsed) is audited
    assert parsed.terminal is terminal


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param([], "Pod: Input should be a valid dictionary", id="not-an-object"),
        pytest.param({"spec": {}}, "Pod.metadata: Field required", id="no-metadata"),
        pytest.param(
            with_changes(API_POD, metadata={"namespace": ""}),
            "Pod has no metadata.name or metadata.namespace",
            id="no-namespace",
        ),
        pytest.param(
            with_changes(API_POD, metadata={"name": None}),
            "Pod.metadata.name: Input should be a valid string",
            id="name-null",
        ),
        pytest.param(
            with_changes(API_POD, spec={"nodeName": 7}),
            "Pod.spec.nodeName: Input should be a valid string",
            id="node-int",
        ),
        pytest.param(
            with_changes(API_POD, spec={"runtimeClassName": ["gvisor"]}),
            "Pod.spec.runtimeClassName: Input should be a valid string",
            id="class-list",
        ),
        pytest.param(
            with_changes(API_POD, spec={"tolerations": {"key": "k"}}),
            "Pod.spec.tolerations: Input should be a valid list",
            id="tolerations-not-a-list",
        ),
        pytest.param(
            with_changes(API_POD, spec={"tolerations": [{"key": "k", "tolerationSeconds": "300"}]}),
            "Pod.spec.tolerations[0].tolerationSeconds: Input should be a valid integer",
            id="seconds-string",
        ),
        pytest.param(
            with_changes(API_POD, status={"phase": 1}),
            "Pod.status.phase: Input should be a valid string",
            id="phase-int",
        ),
        pytest.param(
            with_changes(API_POD, spec={"overhead": {"cpu": "lots"}}),
            "Pod spec.overhead.cpu: 'lots' is not a quantity (e.g. 250m, 0.5, 160Mi, 1Gi)",
            id="overhead-not-a-quantity",
        ),
    ],
)
def test_malformed_pods(obj: Any, message: str) -> None:
    with pytest.raises(ObjectError) as info:
        scheduled_pod_from_api(obj)
    assert str(info.value) == message


def test_toleration_interner_shares_and_is_bounded() -> None:
    intern = TolerationInterner(max_entries=1)
    first = scheduled_pod_from_api(API_POD, intern=intern)
    second = scheduled_pod_from_api(with_changes(API_POD, metadata={"name": "web-1"}), intern=intern)
    assert first.tolerations == second.tolerations
    assert first.tolerations is second.tolerations
    other = with_changes(API_POD, spec={"tolerations": [{"key": "k", "operator": "Exists"}]})
    third, fourth = scheduled_pod_from_api(other, intern=intern), scheduled_pod_from_api(other, intern=intern)
    assert third.tolerations == fourth.tolerations
    assert third.tolerations is not fourth.tolerations  # full: not remembered
    assert len(intern) == 1
    assert intern(()) == ()


# ----- the index: scripted transitions -------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Transition] = []

    def __call__(self, transition: Transition) -> None:
        self.seen.append(transition)

    def take(self) -> list[tuple[str, str, str | None]]:
        out = [(t.kind, t.key, t.after.problem if t.after else None) for t in self.seen]
        self.seen.clear()
        return out


def attached(
    nodes: list[NodeView], classes: list[RuntimeClassView], pods: list[ScheduledPod]
) -> tuple[ClusterState, Store[ScheduledPod], MisplacedIndex, Recorder]:
    state = cluster(nodes, classes)
    store: Store[ScheduledPod] = Store("pods")
    store.replace(pods)
    recorder = Recorder()
    index = MisplacedIndex(state, on_transition=recorder)
    initial = index.attach(store)
    recorder.seen.extend(initial)
    return state, store, index, recorder


def test_transitions_are_reported_once_each() -> None:
    state, store, index, rec = attached([node()], [gvisor()], [pod("a")])
    assert rec.take() == []
    key = "default/a"

    state.nodes.upsert(node(taints=(SANDBOX_NOEXEC,)))
    assert rec.take() == [("misplaced", key, PROBLEM_NOEXECUTE_TAINT)]
    # The same taints again (a heartbeat) and NoSchedule/PreferNoSchedule noise: nothing.
    state.nodes.upsert(NodeView("n1", GVISOR_LABELS, (SANDBOX_NOEXEC,), resource_version="2"))
    state.nodes.upsert(node(taints=(SANDBOX_NOEXEC, SANDBOX_NOSCHED)))
    store.upsert(pod("a"))  # a resync of the same pod
    assert rec.take() == []
    # Another untolerated taint: same problem, new detail; the record follows silently.
    state.nodes.upsert(node(taints=(SANDBOX_NOEXEC, Taint("maint", "NoExecute"))))
    assert rec.take() == []
    misplaced = index.get(key)
    assert misplaced is not None and "maint:NoExecute" in misplaced.detail
    assert index.misplaced() == audit(store.values(), state)

    state.runtime_classes.delete("gvisor")
    assert rec.take() == [("changed", key, PROBLEM_RUNTIMECLASS_DELETED)]
    state.runtime_classes.upsert(gvisor())
    assert rec.take() == [("changed", key, PROBLEM_NOEXECUTE_TAINT)]
    store.upsert(pod("a", tolerations=(TOLERATE_ALL,)))  # its own toleration now
    assert rec.take() == [("resolved", key, None)]
    state.nodes.delete("n1")
    assert rec.take() == [("misplaced", key, PROBLEM_NODE_NOT_FOUND)]
    store.delete(key)
    assert rec.take() == [("gone", key, None)]
    assert index.misplaced() == [] and index.counts() == {} and len(index) == 0


def test_replaced_pod_of_the_same_name_is_a_new_pod() -> None:
    _, store, index, rec = attached([node(labels={})], [gvisor()], [pod("a", uid="1")])
    assert rec.take() == [("misplaced", "default/a", PROBLEM_SELECTOR_MISMATCH)]
    store.upsert(pod("a", uid="2"))
    assert rec.take() == [
        ("gone", "default/a", None),
        ("misplaced", "default/a", PROBLEM_SELECTOR_MISMATCH),
    ]
    store.upsert(pod("a", uid="2", terminal=True))
    assert rec.take() == [("gone", "default/a", None)]
    assert len(index) == 0


def test_only_affected_pods_are_rechecked() -> None:
    pods = [pod("on-1", node_name="n1"), pod("on-2", node_name="n2"), pod("kata", runtime_class="kata")]
    state, _, index, rec = attached(
        [node("n1"), node("n2")], [gvisor(), RuntimeClassView("kata", "kata")], pods
    )
    calls: list[str] = []
    original = index._evaluate

    def spy(key: str, out: list[Transition]) -> None:
        calls.append(key)
        original(key, out)

    index._evaluate = spy  # type: ignore[method-assign]
    state.nodes.upsert(node("n2", labels={}))
    assert calls == ["default/on-2"]
    calls.clear()
    state.runtime_classes.upsert(RuntimeClassView("kata", "kata", node_selector=MappingProxyType({"k": "v"})))
    assert calls == ["default/kata"]
    calls.clear()
    state.nodes.upsert(NodeView("n1", GVISOR_LABELS, resource_version="9"))  # nothing read changed
    state.runtime_classes.upsert(gvisor(handler="other", resource_version="9"))
    assert calls == []
    assert rec.take() == [
        ("misplaced", "default/on-2", PROBLEM_SELECTOR_MISMATCH),
        ("misplaced", "default/kata", PROBLEM_SELECTOR_MISMATCH),
    ]


RUNTIME_TERM = (SelectorRequirement("runtime", "In", ("gvisor",)),)


@pytest.mark.parametrize(
    ("base", "edit", "problem"),
    [
        pytest.param({}, {"selector_error": "bad"}, PROBLEM_SELECTOR_INVALID, id="annotation-turns-invalid"),
        pytest.param(
            {}, {"node_selector": MappingProxyType({"runtime": "kata"})}, PROBLEM_SELECTOR_MISMATCH, id="map"
        ),
        pytest.param(
            {"match_expressions": RUNTIME_TERM},
            {"match_expressions": (SelectorRequirement("zone", "Exists"),)},
            PROBLEM_SELECTOR_MISMATCH,
            id="term",
        ),
        pytest.param(
            {"match_expressions": RUNTIME_TERM},
            {
                "match_expressions": RUNTIME_TERM,
                "match_fields": (SelectorRequirement("metadata.name", "In", ("n9",)),),
            },
            PROBLEM_SELECTOR_MISMATCH,
            id="fields",
        ),
        pytest.param({}, {"overhead": KATA_OVERHEAD}, PROBLEM_OVERHEAD_MISMATCH, id="overhead"),
    ],
)
def test_every_class_edit_the_check_reads_is_heard(
    base: dict[str, Any], edit: dict[str, Any], problem: str
) -> None:
    # Each edit changes one input of the check only (the others stay equal).
    state, store, index, rec = attached([node()], [gvisor(**base)], [pod("a")])
    assert rec.take() == []
    state.runtime_classes.upsert(gvisor(**edit))
    assert rec.take() == [("misplaced", "default/a", problem)]
    assert index.misplaced() == audit(store.values(), state)
    state.runtime_classes.upsert(gvisor(**base))
    assert rec.take() == [("resolved", "default/a", None)]


def test_class_toleration_note_follows_class_edits() -> None:
    # The NoExecute message mentions the class's toleration, so a class edit that only
    # touches tolerations must refresh the record.
    state, store, index, _ = attached([node(taints=(SANDBOX_NOEXEC,))], [gvisor()], [pod("a")])
    state.runtime_classes.upsert(gvisor(tolerations=(TOLERATE_SANDBOX,)))
    assert index.misplaced() == audit(store.values(), state)
    assert "the RuntimeClass tolerates it" in index.misplaced()[0].detail


def test_counts_by_class_and_problem() -> None:
    kata = RuntimeClassView("kata", "kata-qemu", node_selector=MappingProxyType({"runtime": "kata"}))
    pods = [
        pod("g1", node_name="n1"),
        pod("g2", node_name="n1"),
        pod("g3", node_name="gone"),
        pod("k1", runtime_class="kata", node_name="n1"),
        pod("k2", runtime_class="kata", node_name="n2"),
        pod("x1", runtime_class="deleted"),
        pod("plain", runtime_class=""),
    ]
    nodes = [node("n1", labels={"runtime": "kata"}), node("n2", labels={"runtime": "kata"})]
    state, _, index, _ = attached(nodes, [gvisor(), kata], pods)
    assert index.counts() == {
        ("gvisor", PROBLEM_SELECTOR_MISMATCH): 2,
        ("gvisor", PROBLEM_NODE_NOT_FOUND): 1,
        ("deleted", PROBLEM_RUNTIMECLASS_DELETED): 1,
    }
    state.nodes.upsert(node("n2", labels={"runtime": "kata"}, taints=(SANDBOX_NOEXEC,)))
    state.nodes.upsert(node("n1"))
    assert index.counts() == {
        ("gvisor", PROBLEM_NODE_NOT_FOUND): 1,
        ("kata", PROBLEM_SELECTOR_MISMATCH): 1,
        ("kata", PROBLEM_NOEXECUTE_TAINT): 1,
        ("deleted", PROBLEM_RUNTIMECLASS_DELETED): 1,
    }
    assert len(index) == 6  # "plain" names no class


def test_direct_updates_return_transitions() -> None:
    state = cluster([node(labels={})], [gvisor()])
    index = MisplacedIndex(state)
    [t] = index.upsert_pod(pod("a"))
    assert (t.kind, t.before, t.after) == ("misplaced", None, misplaced_of(pod("a"), state))
    assert index.upsert_pod(pod("a")) == []
    assert index.upsert_pod(pod("b", runtime_class="")) == []
    state.nodes.upsert(node())  # not attached: the index hears nothing...
    assert index.misplaced() != audit([pod("a")], state)
    [t] = index.node_changed("n1")  # ...until told
    assert t.kind == "resolved"
    assert index.class_changed("nobody") == [] and index.node_changed("nowhere") == []
    assert index.delete_pod("default/a") == [] and index.delete_pod("default/a") == []
    [t] = index.replace_pods([pod("c", node_name="gone")])
    assert (t.kind, t.key) == ("misplaced", "default/c")
    [t] = index.replace_pods([])
    assert t.kind == "gone"


# ----- the index: agreement with audit() under random changes ------------------------------

NODE_NAMES = ("n0", "n1", "n2", "n3")
CLASS_NAMES = ("c0", "c1", "c2")
TAINTS = (
    Taint("sandbox", "NoExecute", "true"),
    Taint("sandbox", "NoSchedule", "true"),
    Taint("maint", "NoExecute", ""),
    Taint("gpu", "PreferNoSchedule", ""),
)
TOLERATIONS = (
    Toleration("sandbox", "Exists", "", "NoExecute"),
    Toleration("sandbox", "Equal", "true", ""),
    Toleration("maint", "Exists", "", "NoExecute"),
    Toleration("", "Exists", "", ""),
)


def random_node(rng: random.Random, name: str) -> NodeView:
    labels = {}
    if rng.random() < 0.8:
        labels["runtime"] = rng.choice(("gvisor", "kata"))
    if rng.random() < 0.5:
        labels["zone"] = rng.choice(("a", "b"))
    taints = tuple(t for t in TAINTS if rng.random() < 0.25)
    return NodeView(name, MappingProxyType(labels), taints, resource_version=str(rng.randrange(3)))


def random_class(rng: random.Random, name: str) -> RuntimeClassView:
    selector = {"runtime": rng.choice(("gvisor", "kata"))} if rng.random() < 0.7 else {}
    expressions = (SelectorRequirement("zone", "In", ("a",)),) if rng.random() < 0.3 else None
    error = "bad annotation" if rng.random() < 0.1 else None
    tolerations = tuple(t for t in TOLERATIONS if rng.random() < 0.3)
    return RuntimeClassView(
        name,
        rng.choice(("runsc", "kata")),
        node_selector=MappingProxyType(selector),
        tolerations=tolerations,
        match_expressions=expressions,
        selector_error=error,
        resource_version=str(rng.randrange(3)),
        overhead=rng.choice((None, None, {}, KATA_OVERHEAD)),
    )


def random_pod(rng: random.Random) -> ScheduledPod:
    chosen = [t for t in TOLERATIONS if rng.random() < 0.3]
    rng.shuffle(chosen)  # the taint manager's first-match rule makes order matter
    tolerations = tuple(chosen)
    return ScheduledPod(
        namespace=rng.choice(("a", "b")),
        pod_name=f"p{rng.randrange(8)}",
        uid=f"u{rng.randrange(2)}",
        runtime_class_name=rng.choice((*CLASS_NAMES, "", "never")),
        node_name=rng.choice((*NODE_NAMES, "", "never")),
        tolerations=tolerations,
        zero_seconds=tuple(i for i in range(len(tolerations)) if rng.random() < 0.2),
        terminal=rng.random() < 0.1,
        overhead=rng.choice((None, None, {"cpu": "0.25", "memory": "160Mi"}, {"cpu": "1"})),
    )


def mutate(rng: random.Random, state: ClusterState, pods: Store[ScheduledPod]) -> None:
    op = rng.randrange(10)
    if op <= 2:
        pods.upsert(random_pod(rng))
    elif op == 3 and len(pods):
        pods.delete(rng.choice(sorted(pods.keys())))
    elif op == 4:
        name = rng.choice(NODE_NAMES)
        state.nodes.upsert(random_node(rng, name))
    elif op == 5:
        state.nodes.delete(rng.choice(NODE_NAMES))
    elif op == 6:
        state.runtime_classes.upsert(random_class(rng, rng.choice(CLASS_NAMES)))
    elif op == 7:
        state.runtime_classes.delete(rng.choice(CLASS_NAMES))
    elif op == 8:
        # A re-LIST: some objects vanish, some change, some stay as they are.
        kept = [n if rng.random() < 0.5 else random_node(rng, n.name) for n in state.nodes.values()]
        state.nodes.replace([n for n in kept if rng.random() < 0.8])
        classes = [
            c if rng.random() < 0.5 else random_class(rng, c.name) for c in state.runtime_classes.values()
        ]
        state.runtime_classes.replace([c for c in classes if rng.random() < 0.8])
    else:
        pods.replace([p for p in pods.values() if rng.random() < 0.8] + [random_pod(rng)])


@pytest.mark.parametrize("seed", range(40))
def test_index_agrees_with_audit_under_random_changes(seed: int) -> None:
    rng = random.Random(seed)
    state = ClusterState()
    pods: Store[ScheduledPod] = Store("pods")
    for _ in range(rng.randrange(6)):
        pods.upsert(random_pod(rng))
    # What the transitions say each pod is: replayed, it must always equal the truth.
    reported: dict[str, str] = {}

    def hear(t: Transition) -> None:
        assert reported.get(t.key) == (t.before.problem if t.before else None), t
        # A transition is a change of status: never a no-op.
        assert (t.before.problem if t.before else None) != (t.after.problem if t.after else None), t
        if t.after is None:
            reported.pop(t.key, None)
        else:
            reported[t.key] = t.after.problem

    index = MisplacedIndex(state, on_transition=hear)
    for t in index.attach(pods):
        hear(t)
    for step in range(250):
        mutate(rng, state, pods)
        truth = audit(pods.values(), state)
        assert index.misplaced() == truth, f"seed {seed}, step {step}"
        assert index.counts() == Counter((m.runtime_class, m.problem) for m in truth)
        assert reported == {m.key: m.problem for m in truth}
        assert len(index) == sum(1 for p in pods.values() if is_audited(p))


# ----- the cluster file with pods ----------------------------------------------------------

CLUSTER_WITH_PODS = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: gvisor-1, labels: {runtime: gvisor}}
  spec:
    taints: [{key: maintenance, effect: NoExecute}]
- apiVersion: v1
  kind: Node
  metadata: {name: runc-1}
- apiVersion: node.k8s.io/v1
  kind: RuntimeClass
  metadata: {name: gvisor}
  handler: runsc
  scheduling:
    nodeSelector: {runtime: gvisor}
---
apiVersion: v1
kind: PodList
items:
- metadata: {name: web-0, namespace: shop, uid: u0}
  spec:
    nodeName: runc-1
    runtimeClassName: gvisor
- metadata: {name: web-1, namespace: shop, uid: u1}
  spec:
    nodeName: gvisor-1
    runtimeClassName: gvisor
    tolerations: [{key: maintenance, operator: Exists, effect: NoExecute, tolerationSeconds: 3600}]
- metadata: {name: batch, namespace: jobs}
  spec: {nodeName: gvisor-1, runtimeClassName: gvisor}
- metadata: {name: pending, namespace: shop}
  spec: {runtimeClassName: gvisor}
- metadata: {name: plain, namespace: shop}
  spec: {nodeName: runc-1}
---
apiVersion: v1
kind: Pod
metadata: {name: kata-0, namespace: shop}
spec: {nodeName: runc-1, runtimeClassName: kata}
status: {phase: Running}
"""


def test_cluster_file_with_pods(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_WITH_PODS)
    state, pods = load_cluster_file_with_pods(path)
    assert state.synced
    assert sorted(state.nodes) == ["gvisor-1", "runc-1"]
    assert list(state.runtime_classes) == ["gvisor"]
    assert [p.name for p in pods] == [
        "shop/web-0",
        "shop/web-1",
        "jobs/batch",
        "shop/pending",
        "shop/plain",
        "shop/kata-0",
    ]
    assert [(m.key, m.problem) for m in audit(pods, state)] == [
        ("jobs/batch", PROBLEM_NOEXECUTE_TAINT),
        ("shop/kata-0", PROBLEM_RUNTIMECLASS_DELETED),
        ("shop/web-0", PROBLEM_SELECTOR_MISMATCH),
    ]
    # The same file through the plain loader: pods are not its business.
    with pytest.raises(
        ClusterFileError, match=r'kind: Unsupported value: "Pod": .* \(Pods are read by audit alone\)'
    ):
        load_cluster_file(path)


def test_cluster_file_without_pods_loads_alike(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_WITH_PODS.split("---")[0])
    state, pods = load_cluster_file_with_pods(path)
    plain = load_cluster_file(path)
    assert pods == []
    assert dict(state.nodes.items()) == dict(plain.nodes.items())
    assert dict(state.runtime_classes.items()) == dict(plain.runtime_classes.items())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "kind: PodList\nitems:\n- {metadata: {name: p, namespace: n}}\n- {metadata: {name: p, namespace: n}}\n",
            'document 0, item 1: pod/p: metadata.name: Duplicate value: "n/p" (a Pod of this name is at '
            "document 0, item 0)",
            id="duplicate-pod",
        ),
        pytest.param(
            "kind: Pod\nmetadata: {name: p, namespace: n}\nspec: {nodeName: 3}\n",
            "document 0: pod/p: spec.nodeName: Invalid value: 3: must be a string",
            id="malformed-pod",
        ),
        pytest.param(
            "kind: Pod\nmetadata: {name: p}\n",
            "document 0: pod/p: metadata.namespace: Required value",
            id="pod-without-namespace",
        ),
        pytest.param(
            "kind: Service\nmetadata: {name: s}\n",
            'document 0: service/s: kind: Unsupported value: "Service": supported values: "Node", '
            '"RuntimeClass", "Pod"',
            id="other-kind",
        ),
    ],
)
def test_cluster_file_with_bad_pods(text: str, message: str) -> None:
    with pytest.raises(ClusterFileError) as info:
        parse_cluster_with_pods(text)
    assert str(info.value) == message


def test_cluster_file_shares_toleration_tuples() -> None:
    pod_doc = "- metadata: {{name: {name}, namespace: n}}\n  spec: {{tolerations: [{{key: k, operator: Exists}}]}}\n"
    text = "kind: PodList\nitems:\n" + pod_doc.format(name="a") + pod_doc.format(name="b")
    first, second = parse_cluster_with_pods(text).pods
    assert first.tolerations is second.tolerations
