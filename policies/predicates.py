"""The built-in predicates. Each is a small frozen object; ``check`` is pure.

Order matters only for which reason a node gets when several predicates fail: the
filter reports the first failure in policy order (like kube-scheduler, which stops at
the first failing filter plugin), while explain reports all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from policies.node_affinity import term_mismatches
from policies.node_selector import selector_mismatches
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.tolerations import FILTERED_EFFECTS, tolerated_by_any
from policies.verdict import (
    FITS,
    REASON_RUNTIMECLASS_MISMATCH,
    REASON_UNTOLERATED_TAINT,
    Verdict,
    reason_runtimeclass_not_found,
    reason_runtimeclass_selector_invalid,
)


class OptionsError(ValueError):
    """A predicate was configured with options it does not understand."""


def reject_options(name: str, options: Mapping[str, Any]) -> None:
    if options:
        raise OptionsError(f"predicate {name} takes no options, got: {', '.join(sorted(options))}")


@dataclass(frozen=True)
class RuntimeClassExists:
    """A pod naming a RuntimeClass that does not exist fits nowhere (KEP-585)."""

    name: str = "RuntimeClassExists"
    # Reads the pod only through these fields (policies/verdict.py, POD_INPUTS_ATTR).
    pod_inputs: ClassVar[frozenset[str]] = frozenset({"runtime_class_name"})

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        if pod.wants_runtime_class and runtime_class is None:
            return Verdict(
                False,
                reason_runtimeclass_not_found(pod.runtime_class_name or ""),
                unresolvable=True,
                detail=f"no RuntimeClass named {pod.runtime_class_name!r} in the cluster",
            )
        return FITS


@dataclass(frozen=True)
class RuntimeClassNodeSelector:
    """The node carries every label of the class's ``scheduling.nodeSelector`` and, when
    the class has the node-selector-term annotation, satisfies that term too."""

    name: str = "RuntimeClassNodeSelector"
    pod_inputs: ClassVar[frozenset[str]] = frozenset({"runtime_class_name"})

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        if runtime_class is None:
            return FITS
        if runtime_class.selector_error is not None:
            # Fail closed: a class whose rules we cannot read must not land anywhere.
            return Verdict(
                False,
                reason_runtimeclass_selector_invalid(runtime_class.name),
                unresolvable=True,
                detail=runtime_class.selector_error,
            )
        problems = selector_mismatches(runtime_class.node_selector, node.labels)
        if runtime_class.match_expressions is not None:
            # The annotation's NodeSelectorTerm (policies/node_affinity.py), ANDed with the map
            # as RequiredNodeAffinity.Match ANDs a pod's nodeSelector with its required node
            # affinity (component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go).
            problems += term_mismatches(
                runtime_class.match_expressions, runtime_class.match_fields, node.labels, node.name
            )
        if problems:
            return Verdict(False, REASON_RUNTIMECLASS_MISMATCH, unresolvable=True, detail="; ".join(problems))
        return FITS


@dataclass(frozen=True)
class TaintToleration:
    """Every NoSchedule/NoExecute taint on the node is tolerated.

    NoSchedule taints may be tolerated by the pod or by its RuntimeClass's
    ``scheduling.tolerations``. NoExecute taints must be tolerated by the pod itself:
    the kubelet and the taint manager evict on NoExecute reading only the pod spec, so
    a class toleration alone would place a pod that is evicted right away.
    """

    name: str = "TaintToleration"
    pod_inputs: ClassVar[frozenset[str]] = frozenset({"runtime_class_name", "tolerations"})

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        class_tolerations = runtime_class.tolerations if runtime_class is not None else ()
        untolerated: list[str] = []
        for taint in node.taints:
            if taint.effect not in FILTERED_EFFECTS:
                continue
            if tolerated_by_any(taint, pod.tolerations):
                continue
            if taint.effect == "NoSchedule" and tolerated_by_any(taint, class_tolerations):
                continue
            note = f"untolerated taint {taint}"
            if taint.effect == "NoExecute" and tolerated_by_any(taint, class_tolerations):
                note += " (the RuntimeClass tolerates it, but NoExecute needs the pod's own toleration)"
            untolerated.append(note)
        if untolerated:
            return Verdict(False, REASON_UNTOLERATED_TAINT, unresolvable=True, detail="; ".join(untolerated))
        return FITS


def runtime_class_exists(options: Mapping[str, Any]) -> RuntimeClassExists:
    reject_options("RuntimeClassExists", options)
    return RuntimeClassExists()


def runtime_class_node_selector(options: Mapping[str, Any]) -> RuntimeClassNodeSelector:
    reject_options("RuntimeClassNodeSelector", options)
    return RuntimeClassNodeSelector()


def taint_toleration(options: Mapping[str, Any]) -> TaintToleration:
    reject_options("TaintToleration", options)
    return TaintToleration()
