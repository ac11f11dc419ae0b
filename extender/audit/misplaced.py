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
    the taint manager reads only the pod spec (the filter's rule too: docs/concepts.md,
    "Whose tolerations count"; kubernetes/kubernetes
    pkg/controller/tainteviction/taint_eviction.go reads ``pod.Spec.Tolerations``).
``overhead-mismatch``
    The pod's ``spec.overhead`` differs from its class's ``overhead.podFixed`` (by
    value, as the RuntimeClass admission plugin compares them: ``Semantic.DeepEqual``,
    none equal to empty). The pod was created before its class, before the pod webhook
    was installed, or with the plugin off: the scheduler, ResourceQuota and the
    kubelet's pod cgroup count its sandbox wrong. ``spec.overhead`` is immutable, so
    only recreating the pod fixes it. Last: the pod fits its node, it is misaccounted.

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

``audit`` answers once for a set of pods; ``extender.audit.index.MisplacedIndex`` keeps
the answer exact under a stream of pod, node and RuntimeClass changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from extender.cluster.pod_views import ScheduledPod, is_audited
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.predicates import RuntimeClassNodeSelector
from policies.quantity import QuantityError, resource_lists_equal
from policies.tolerations import tolerates

__all__ = [
    "PROBLEMS",
    "PROBLEM_NODE_NOT_FOUND",
    "PROBLEM_NOEXECUTE_TAINT",
    "PROBLEM_OVERHEAD_MISMATCH",
    "PROBLEM_RUNTIMECLASS_DELETED",
    "PROBLEM_SELECTOR_INVALID",
    "PROBLEM_SELECTOR_MISMATCH",
    "ClusterView",
    "Misplaced",
    "Problem",
    "audit",
    "by_namespace_and_name",
    "misplaced_of",
    "problems_of",
]

# The problem labels. Stable: they are metric label values and appear in logs and docs.
PROBLEM_RUNTIMECLASS_DELETED = "runtimeclass-deleted"
PROBLEM_NODE_NOT_FOUND = "node-not-found"
PROBLEM_SELECTOR_INVALID = "selector-invalid"
PROBLEM_SELECTOR_MISMATCH = "selector-mismatch"
PROBLEM_NOEXECUTE_TAINT = "noexecute-taint"
PROBLEM_OVERHEAD_MISMATCH = "overhead-mismatch"
# In the order ``problems_of`` reports them; a misplaced pod is listed under the first.
PROBLEMS = (
    PROBLEM_RUNTIMECLASS_DELETED,
    PROBLEM_NODE_NOT_FOUND,
    PROBLEM_SELECTOR_INVALID,
    PROBLEM_SELECTOR_MISMATCH,
    PROBLEM_NOEXECUTE_TAINT,
    PROBLEM_OVERHEAD_MISMATCH,
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
        problems.extend(_overhead_problem(pod, runtime_class))
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
    problems.extend(_overhead_problem(pod, runtime_class))
    return problems


def _overhead_problem(pod: ScheduledPod, runtime_class: RuntimeClassView | None) -> list[Problem]:
    """``overhead-mismatch`` when the pod's overhead is not its class's (by value)."""
    if runtime_class is None:
        return []
    try:
        if resource_lists_equal(runtime_class.overhead, pod.overhead):
            return []
    except QuantityError:
        # Both sides were checked when parsed; kept total rather than raise mid-audit.
        pass
    return [
        Problem(
            PROBLEM_OVERHEAD_MISMATCH,
            f"spec.overhead {_resources(pod.overhead)} differs from RuntimeClass "
            f'"{runtime_class.name}" overhead.podFixed {_resources(runtime_class.overhead)}: the pod\'s '
            "sandbox is counted wrong until the pod is recreated (spec.overhead is immutable)",
        )
    ]


def _resources(resources: Mapping[str, str] | None) -> str:
    if not resources:
        return "{}" if resources is not None else "(none)"
    return "{" + ", ".join(f"{name}: {value}" for name, value in sorted(resources.items())) + "}"


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


def by_namespace_and_name(item: Misplaced) -> tuple[str, str]:
    return item.namespace, item.pod


def audit(pods: Iterable[ScheduledPod], state: ClusterView) -> list[Misplaced]:
    """The misplaced pods among ``pods``, by namespace and name."""
    found = [m for pod in pods if (m := misplaced_of(pod, state)) is not None]
    found.sort(key=by_namespace_and_name)
    return found
