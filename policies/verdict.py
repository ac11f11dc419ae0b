"""What a predicate answers for one node, and the reason strings the extender emits.

kube-scheduler counts identical reason strings across nodes ("5 node(s) didn't match
RuntimeClass"), so a reason must never vary per node: everything node-specific goes
into ``detail``, which the explain output and debug logs show.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Protocol

from policies.objects import NodeView, PodView, RuntimeClassView

# The reason strings. Stable: operators grep FailedScheduling events for them.
REASON_RUNTIMECLASS_MISMATCH = "node(s) didn't match RuntimeClass"
# Same wording as the in-tree TaintToleration filter (pkg/scheduler/framework/plugins/
# tainttoleration), so kube-scheduler folds our count into its own.
REASON_UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
REASON_NODE_UNKNOWN = "node(s) unknown to the RuntimeClass extender"


def reason_runtimeclass_not_found(name: str) -> str:
    return f'RuntimeClass "{name}" not found'


def reason_runtime_handler_unsupported(handler: str) -> str:
    return f'node(s) don\'t support runtime handler "{handler}"'


def reason_runtime_handler_features_unsupported(handler: str) -> str:
    return f'node(s) don\'t support runtime handler "{handler}" with the required features'


def reason_runtimeclass_selector_invalid(name: str) -> str:
    return f'RuntimeClass "{name}" has an invalid node selector annotation'


# Bounded names for the reasons (metric labels, the sampling check): a fixed set,
# whatever class or handler names a reason embeds.
REASON_LABELS = (
    "runtimeclass_mismatch",
    "runtimeclass_not_found",
    "runtimeclass_invalid",
    "handler_unsupported",
    "untolerated_taint",
    "unknown_node",
    "other",
)
_EXACT_REASONS = {
    REASON_RUNTIMECLASS_MISMATCH: "runtimeclass_mismatch",
    REASON_UNTOLERATED_TAINT: "untolerated_taint",
    REASON_NODE_UNKNOWN: "unknown_node",
}
# Shapes of the reasons above that embed a name.
_PATTERN_REASONS = (
    (re.compile(r'RuntimeClass ".*" not found'), "runtimeclass_not_found"),
    (re.compile(r'RuntimeClass ".*" has an invalid node selector annotation'), "runtimeclass_invalid"),
    (
        re.compile(r"node\(s\) don't support runtime handler \".*\"( with the required features)?"),
        "handler_unsupported",
    ),
)
# Reasons meaning "this node cannot run the pod's runtime" (KEP-585: scheduling
# failures caused by unsupported runtimes), as opposed to taints or cache misses.
RUNTIME_REASON_LABELS = frozenset(
    {"runtimeclass_mismatch", "runtimeclass_not_found", "runtimeclass_invalid", "handler_unsupported"}
)


def reason_label(reason: str) -> str:
    """The bounded label for a reason string a predicate produced."""
    exact = _EXACT_REASONS.get(reason)
    if exact is not None:
        return exact
    for pattern, label in _PATTERN_REASONS:
        if pattern.fullmatch(reason):
            return label
    return "other"


class Verdict(NamedTuple):
    fits: bool
    reason: str = ""
    # True when preemption cannot help (labels, taints, a missing class): the node
    # goes to FailedAndUnresolvableNodes instead of FailedNodes.
    unresolvable: bool = False
    detail: str = ""


FITS = Verdict(True)


# Optional attribute of a predicate: ``pod_inputs: frozenset[str]``, the PodView fields
# its verdict depends on (it always depends on the RuntimeClass and the node). The
# filter reuses verdicts across pods that agree on ``runtime_class_name`` and
# ``tolerations`` only when every predicate of the policy declares a subset of those
# (extender/decision_cache.py); a predicate without it is evaluated per pod and node.
POD_INPUTS_ATTR = "pod_inputs"


class Predicate(Protocol):
    """A pure check of one node for one pod. No I/O, no mutable state."""

    @property
    def name(self) -> str: ...

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict: ...
