"""Audit: running pods on nodes that no longer fit their RuntimeClass.

The filter judges a pod once, when it is scheduled. Afterwards the cluster moves on: a
RuntimeClass is deleted or its selector edited, a node is relabelled or tainted. The
pod keeps running where it is, and nothing says that it would not be placed there
today. This module finds those pods. It is pure: no I/O, no clock, no module-level
mutable state; the ``audit`` command and ``serve --audit-running-pods`` feed it.

What is audited: pods bound to a node (``spec.nodeName`` set) that name a RuntimeClass
and have not terminated (phase ``Succeeded``/``Failed``: they run nothing, and the pod
garbage collector removes them). Pods without a RuntimeClass are out of scope: this is
a RuntimeClass audit, and their placement never depended on one.

Which problems count, with their stable labels (in the order the filter's default
policy would meet them; a pod with several is reported under the first):

``runtimeclass-deleted``
    The pod's RuntimeClass no longer exists (the ``RuntimeClassExists`` predicate). The
    pod runs on, but a replacement would fit no node.
``node-not-found``
    The pod's node is not in the cluster state. Counted: the pod garbage collector
    deletes pods bound to nodes that no longer exist (``gcOrphaned`` in
    kubernetes/kubernetes pkg/controller/podgc/gc_controller.go), so such a pod is as
    good as gone, and nothing else about its node can be checked.
``selector-invalid``
    The class's node-selector-term annotation is malformed. ``RuntimeClassNodeSelector``
    fails such a class closed on every node, so it is counted, but under its own label:
    the class needs fixing, not the node, and an operator should not hunt for a node
    label that was never the problem.
``selector-mismatch``
    The node no longer satisfies the class's ``scheduling.nodeSelector`` or its
    annotation term (``RuntimeClassNodeSelector.check``, the filter's own predicate).
``noexecute-taint``
    The node has a ``NoExecute`` taint that the pod's *own* tolerations do not
    tolerate, so the taint manager evicts it. The class's tolerations do not count:
    the taint manager reads only the pod spec (the filter's rule, DESIGN §4).

What does not count:

- ``NoSchedule`` taints added after the pod was bound: Kubernetes lets bound pods run
  (the effect only keeps new pods off), so the pod is not misplaced.
- A ``NoExecute`` toleration with a positive ``tolerationSeconds``: it tolerates until
  it expires, after which the taint manager evicts the pod and it leaves the audit by
  itself. The expiry depends on when the taint manager saw the taint, which needs a
  clock this module does not have; and every pod carries such tolerations for the
  ``not-ready``/``unreachable`` taints (DefaultTolerationSeconds admission), so
  counting them would flag every pod of an unhealthy node, which is node health, not
  RuntimeClass fit. ``tolerationSeconds <= 0`` is different: the taint manager evicts
  at once (see ``_untolerated_noexecute``), so it does not tolerate here either.
- The ``RuntimeHandler`` predicate (off by default): it is a policy option, and a
  running pod's sandbox already exists.

``audit`` answers once for a set of pods; ``MisplacedIndex`` keeps the answer exact
under a stream of pod, node and RuntimeClass changes, re-checking only the pods a
change can affect, and reports each pod's transitions into and out of being misplaced.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from extender.cluster.pods import ScheduledPod, TolerationInterner, is_audited, scheduled_pod_from_api
from extender.cluster.state import NODES, RUNTIME_CLASSES, ClusterState, Named, Store
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.predicates import RuntimeClassNodeSelector
from policies.tolerations import tolerates

__all__ = [
    "PROBLEMS",
    "PROBLEM_NODE_NOT_FOUND",
    "PROBLEM_NOEXECUTE_TAINT",
    "PROBLEM_RUNTIMECLASS_DELETED",
    "PROBLEM_SELECTOR_INVALID",
    "PROBLEM_SELECTOR_MISMATCH",
    "ClusterView",
    "Misplaced",
    "MisplacedIndex",
    "Problem",
    "ScheduledPod",
    "TolerationInterner",
    "Transition",
    "audit",
    "is_audited",
    "misplaced_of",
    "problems_of",
    "scheduled_pod_from_api",
]

# The problem labels. Stable: they are metric label values and appear in logs and docs.
PROBLEM_RUNTIMECLASS_DELETED = "runtimeclass-deleted"
PROBLEM_NODE_NOT_FOUND = "node-not-found"
PROBLEM_SELECTOR_INVALID = "selector-invalid"
PROBLEM_SELECTOR_MISMATCH = "selector-mismatch"
PROBLEM_NOEXECUTE_TAINT = "noexecute-taint"
# In the order ``problems_of`` reports them; a misplaced pod is listed under the first.
PROBLEMS = (
    PROBLEM_RUNTIMECLASS_DELETED,
    PROBLEM_NODE_NOT_FOUND,
    PROBLEM_SELECTOR_INVALID,
    PROBLEM_SELECTOR_MISMATCH,
    PROBLEM_NOEXECUTE_TAINT,
)

# ----- the check --------------------------------------------------------------------------


class ClusterView(Protocol):
    """What the check reads of the cluster: ClusterState, or any pair of mappings."""

    @property
    def nodes(self) -> Mapping[str, NodeView]: ...

    @property
    def runtime_classes(self) -> Mapping[str, RuntimeClassView]: ...


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a running pod no longer fits: a stable label and a message with the detail."""

    label: str
    detail: str


@dataclass(frozen=True, slots=True)
class Misplaced:
    """A running pod that no longer fits its node, under its first problem."""

    namespace: str
    pod: str
    runtime_class: str
    node: str
    problem: str
    detail: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"


# The filter's own predicate; frozen and stateless, so one instance serves every call.
_SELECTOR = RuntimeClassNodeSelector()


def _untolerated_noexecute(
    pod: ScheduledPod, node: NodeView, runtime_class: RuntimeClassView | None
) -> list[str]:
    """The node's NoExecute taints that get the pod evicted at once, each with a note.

    Mirrors the taint manager (kubernetes/kubernetes pkg/controller/tainteviction/
    taint_eviction.go, ``processPodOnNode``): for each NoExecute taint it takes the
    *first* of the pod's tolerations that tolerates it (``GetMatchingTolerations`` in
    pkg/apis/core/v1/helper/helpers.go); no match means eviction now, and so does a
    match whose tolerationSeconds is <= 0 (``getMinTolerationTime`` returns 0 for it).
    A positive tolerationSeconds delays eviction until it expires: tolerated here.
    """
    notes: list[str] = []
    for taint in node.taints:
        if taint.effect != "NoExecute":
            continue
        first = next((i for i, t in enumerate(pod.tolerations) if tolerates(t, taint)), None)
        if first is None:
            note = str(taint)
            if runtime_class is not None and any(tolerates(t, taint) for t in runtime_class.tolerations):
                note += " (the RuntimeClass tolerates it, but NoExecute needs the pod's own toleration)"
            notes.append(note)
        elif first in pod.zero_seconds:
            notes.append(f"{taint} (tolerated for 0s: tolerationSeconds <= 0)")
    return notes


def problems_of(pod: ScheduledPod, state: ClusterView) -> list[Problem]:
    """Every reason the pod no longer fits its node, in ``PROBLEMS`` order.

    Empty when it fits, and for pods the audit does not judge (``is_audited``).
    """
    if not is_audited(pod):
        return []
    class_name = pod.runtime_class_name
    runtime_class = state.runtime_classes.get(class_name)
    node = state.nodes.get(pod.node_name)
    problems: list[Problem] = []
    if runtime_class is None:
        # The RuntimeClassExists predicate, minus the node it does not need.
        problems.append(
            Problem(
                PROBLEM_RUNTIMECLASS_DELETED,
                f'RuntimeClass "{class_name}" not found: it was deleted after the pod was '
                "scheduled, and a replacement would fit no node",
            )
        )
    if node is None:
        problems.append(
            Problem(
                PROBLEM_NODE_NOT_FOUND,
                f'node "{pod.node_name}" not found: the pod is bound to a node the cluster no '
                "longer has, and the pod garbage collector deletes such pods",
            )
        )
        return problems
    if runtime_class is not None:
        view = PodView(
            name=pod.pod_name,
            namespace=pod.namespace,
            uid=pod.uid,
            runtime_class_name=class_name,
            tolerations=pod.tolerations,
        )
        verdict = _SELECTOR.check(view, runtime_class, node)
        if not verdict.fits and runtime_class.selector_error is not None:
            problems.append(
                Problem(
                    PROBLEM_SELECTOR_INVALID,
                    f'RuntimeClass "{class_name}" has an invalid node selector annotation, so it '
                    f"fits no node: {verdict.detail}",
                )
            )
        elif not verdict.fits:
            problems.append(
                Problem(
                    PROBLEM_SELECTOR_MISMATCH,
                    f'node "{node.name}" no longer matches RuntimeClass "{class_name}": {verdict.detail}',
                )
            )
    untolerated = _untolerated_noexecute(pod, node, runtime_class)
    if untolerated:
        problems.append(
            Problem(
                PROBLEM_NOEXECUTE_TAINT,
                f'node "{node.name}" has NoExecute taint(s) the pod does not tolerate, so the '
                f"taint manager evicts it: {'; '.join(untolerated)}",
            )
        )
    return problems


def misplaced_of(pod: ScheduledPod, state: ClusterView) -> Misplaced | None:
    """The pod as misplaced under its first problem, or None when it fits."""
    problems = problems_of(pod, state)
    if not problems:
        return None
    first = problems[0]
    return Misplaced(
        namespace=pod.namespace,
        pod=pod.pod_name,
        runtime_class=pod.runtime_class_name,
        node=pod.node_name,
        problem=first.label,
        detail=first.detail,
    )


def _sort_key(item: Misplaced) -> tuple[str, str]:
    return item.namespace, item.pod


def audit(pods: Iterable[ScheduledPod], state: ClusterView) -> list[Misplaced]:
    """The misplaced pods among ``pods``, by namespace and name."""
    found = [m for pod in pods if (m := misplaced_of(pod, state)) is not None]
    found.sort(key=_sort_key)
    return found


# ----- the incremental index --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """A pod's change of status: ``before``/``after`` are None where it fits (or is gone).

    ``kind``: ``misplaced`` (it became misplaced; log it), ``changed`` (another problem
    label), ``resolved`` (it fits again), ``gone`` (it left the audit while misplaced:
    deleted, replaced by a new pod of the same name, or terminated).
    """

    key: str
    before: Misplaced | None
    after: Misplaced | None
    gone: bool = False

    @property
    def kind(self) -> str:
        if self.before is None:
            return "misplaced"
        if self.after is not None:
            return "changed"
        return "gone" if self.gone else "resolved"


def _node_inputs(node: NodeView) -> tuple[object, ...]:
    # All of a node that problems_of reads (its name is its identity).
    return node.labels, node.taints


def _class_inputs(runtime_class: RuntimeClassView) -> tuple[object, ...]:
    # All of a class that problems_of reads: the selector parts, and the tolerations
    # for the NoExecute note.
    return (
        runtime_class.node_selector,
        runtime_class.match_expressions,
        runtime_class.match_fields,
        runtime_class.selector_error,
        runtime_class.tolerations,
    )


class MisplacedIndex:
    """The misplaced pods among the running ones, kept exact as the cluster changes.

    Holds the audited pods (``is_audited``) by key, node and class, and the current
    Misplaced record of each misplaced one. A pod change re-checks that pod; a node or
    class change re-checks only the pods on that node or of that class. The update
    methods return the transitions they caused (a detail-only change of a misplaced
    pod's message updates its record without one). Hooked onto stores
    (``attach``/``on_event``), the transitions go to ``on_transition`` instead.

    Before the stores are synced, pods may be seen before their nodes: a caller that
    logs transitions should hold them until everything is synced, then log
    ``misplaced()`` once.
    """

    def __init__(
        self, state: ClusterState, *, on_transition: Callable[[Transition], None] | None = None
    ) -> None:
        self.state = state
        self.on_transition = on_transition
        self._pods: dict[str, ScheduledPod] = {}
        self._by_node: defaultdict[str, set[str]] = defaultdict(set)
        self._by_class: defaultdict[str, set[str]] = defaultdict(set)
        self._misplaced: dict[str, Misplaced] = {}
        self._counts: Counter[tuple[str, str]] = Counter()

    # ----- reading

    def __len__(self) -> int:
        """The number of audited pods held."""
        return len(self._pods)

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def get(self, key: str) -> Misplaced | None:
        return self._misplaced.get(key)

    def misplaced(self) -> list[Misplaced]:
        """The misplaced pods, by namespace and name (what ``audit`` would answer)."""
        return sorted(self._misplaced.values(), key=_sort_key)

    def counts(self) -> dict[tuple[str, str], int]:
        """Misplaced pods by (runtime_class, problem); pairs with none are absent, so a
        gauge series whose pair is missing should read 0 (or be removed)."""
        return dict(self._counts)

    # ----- updates, each returning the transitions it caused

    def upsert_pod(self, pod: ScheduledPod) -> list[Transition]:
        out: list[Transition] = []
        key = pod.name
        old = self._pods.get(key)
        if old is not None and (old.uid != pod.uid or not is_audited(pod)):
            # Another pod under the same name (a StatefulSet replica) starts afresh, and
            # a pod that terminated leaves the audit.
            self._drop(key, out)
            old = None
        if not is_audited(pod):
            return out
        if old is not None:
            self._unindex(key, old)
        self._pods[key] = pod
        self._by_node[pod.node_name].add(key)
        self._by_class[pod.runtime_class_name].add(key)
        self._evaluate(key, out)
        return out

    def delete_pod(self, key: str) -> list[Transition]:
        out: list[Transition] = []
        self._drop(key, out)
        return out

    def replace_pods(self, pods: Iterable[ScheduledPod]) -> list[Transition]:
        """Swap in a complete set of pods (a LIST)."""
        out: list[Transition] = []
        new = {pod.name: pod for pod in pods}
        for key in [k for k in self._pods if k not in new]:
            self._drop(key, out)
        for pod in new.values():
            out.extend(self.upsert_pod(pod))
        return out

    def node_changed(self, name: str) -> list[Transition]:
        """Re-check the pods bound to node ``name`` (added, changed or deleted)."""
        return self._reevaluate(self._by_node.get(name, ()))

    def class_changed(self, name: str) -> list[Transition]:
        """Re-check the pods of RuntimeClass ``name`` (added, changed or deleted)."""
        return self._reevaluate(self._by_class.get(name, ()))

    # ----- store hooks

    def on_event(self, kind: str, old: Named | None, new: Named | None) -> None:
        """A store listener (``Store.add_listener``) for nodes, RuntimeClasses and pods."""
        if kind == NODES:
            if (
                isinstance(old, NodeView)
                and isinstance(new, NodeView)
                and _node_inputs(old) == _node_inputs(new)
            ):
                return  # a heartbeat, an annotation: nothing the check reads
            current = new if new is not None else old
            transitions = self.node_changed(current.name) if current is not None else []
        elif kind == RUNTIME_CLASSES:
            if (
                isinstance(old, RuntimeClassView)
                and isinstance(new, RuntimeClassView)
                and _class_inputs(old) == _class_inputs(new)
            ):
                return
            current = new if new is not None else old
            transitions = self.class_changed(current.name) if current is not None else []
        elif isinstance(new, ScheduledPod):
            transitions = self.upsert_pod(new)
        elif isinstance(old, ScheduledPod):
            transitions = self.delete_pod(old.name)
        else:
            return
        if self.on_transition is not None:
            for transition in transitions:
                self.on_transition(transition)

    def attach(self, pods: Store[ScheduledPod] | None = None) -> list[Transition]:
        """Listen to the state's node and class stores and to ``pods``; take in the pods
        already there and return the transitions that caused (no callback for those)."""
        self.state.nodes.add_listener(self.on_event)
        self.state.runtime_classes.add_listener(self.on_event)
        if pods is None:
            return []
        pods.add_listener(self.on_event)
        return self.replace_pods(pods.values())

    # ----- internals

    def _unindex(self, key: str, pod: ScheduledPod) -> None:
        for index, name in ((self._by_node, pod.node_name), (self._by_class, pod.runtime_class_name)):
            keys = index.get(name)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[name]

    def _drop(self, key: str, out: list[Transition]) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        self._unindex(key, pod)
        before = self._misplaced.pop(key, None)
        if before is not None:
            self._count(before, -1)
            out.append(Transition(key, before, None, gone=True))

    def _reevaluate(self, keys: Iterable[str]) -> list[Transition]:
        out: list[Transition] = []
        for key in sorted(keys):
            self._evaluate(key, out)
        return out

    def _count(self, item: Misplaced, delta: int) -> None:
        pair = (item.runtime_class, item.problem)
        self._counts[pair] += delta
        if self._counts[pair] <= 0:
            del self._counts[pair]

    def _evaluate(self, key: str, out: list[Transition]) -> None:
        after = misplaced_of(self._pods[key], self.state)
        before = self._misplaced.get(key)
        if after == before:
            return
        if before is not None:
            self._count(before, -1)
        if after is None:
            del self._misplaced[key]
        else:
            self._misplaced[key] = after
            self._count(after, +1)
        if before is None or after is None or before.problem != after.problem:
            out.append(Transition(key, before, after))
