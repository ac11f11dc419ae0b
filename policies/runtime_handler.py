"""The runtime-handler check: KEP-585's alternative "Native RuntimeClass Reporting".

Since Kubernetes 1.30 the kubelet lists the CRI runtime handlers it can use in
``node.status.runtimeHandlers`` (``NodeRuntimeHandler{name, features}`` in
staging/src/k8s.io/api/core/v1/types.go; filled in while the RecursiveReadOnlyMounts
feature gate is on: alpha in 1.30, on by default since 1.31, and the API server drops
the field otherwise, pkg/registry/core/node/strategy.go). This predicate checks that
the node reports the RuntimeClass's ``handler``, and optionally that the handler
reports the features the operator requires
(``NodeRuntimeHandlerFeatures{recursiveReadOnlyMounts, userNamespaces}``).

The entry named "" is the node's default handler ("Empty for the default runtime
handler", types.go). containerd reports the default runtime twice, once under its own
name and once as "" (internal/cri/server/service.go, introspectRuntimeHandler), and a
RuntimeClass's ``handler`` is a required DNS label (pkg/apis/node/validation), so it is
never "": the "" entry never stands in for a class's handler; only an exact name does.

A node without the field (an older kubelet, or the gate off) is judged by the
``nodesWithoutReport`` option. ``runtimeHandlers`` is ``omitempty`` in the API, so an
empty list and an absent one are the same thing on the wire and both count as "no
report". Pods without a RuntimeClass and pods whose class does not exist pass here:
``RuntimeClassExists`` answers the latter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from policies.objects import NodeView, PodView, RuntimeClassView
from policies.predicates import OptionsError
from policies.verdict import (
    FITS,
    Verdict,
    reason_runtime_handler_features_unsupported,
    reason_runtime_handler_unsupported,
)

NAME = "RuntimeHandler"
# The fields of core/v1 NodeRuntimeHandlerFeatures (as of Kubernetes 1.33).
KNOWN_FEATURES = ("recursiveReadOnlyMounts", "userNamespaces")
NODES_WITHOUT_REPORT = ("pass", "fail")
OPTIONS = ("nodesWithoutReport", "requiredFeatures")


@dataclass(frozen=True)
class RuntimeHandler:
    """The node reports the RuntimeClass's handler (with the required features)."""

    # True: a node that reports no handlers at all fails (nodesWithoutReport: fail).
    fail_without_report: bool = False
    required_features: tuple[str, ...] = ()
    name: str = NAME
    # Reads the pod only through its RuntimeClass (policies/verdict.py, POD_INPUTS_ATTR).
    pod_inputs: ClassVar[frozenset[str]] = frozenset({"runtime_class_name"})

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        if runtime_class is None:
            return FITS
        handler = runtime_class.handler
        if not node.runtime_handlers:
            if not self.fail_without_report:
                return FITS
            return Verdict(
                False,
                reason_runtime_handler_unsupported(handler),
                unresolvable=True,
                detail="node reports no status.runtimeHandlers (nodesWithoutReport: fail)",
            )
        for reported in node.runtime_handlers:
            if reported.name != handler:
                continue
            missing = [f for f in self.required_features if f not in reported.features]
            if not missing:
                return FITS
            return Verdict(
                False,
                reason_runtime_handler_features_unsupported(handler),
                unresolvable=True,
                detail=f"runtime handler {handler!r} lacks required feature(s) {', '.join(missing)}",
            )
        names = ", ".join(repr(h.name) for h in node.runtime_handlers)
        return Verdict(
            False,
            reason_runtime_handler_unsupported(handler),
            unresolvable=True,
            detail=f"runtime handler {handler!r} not in the node's runtimeHandlers ({names})",
        )


def runtime_handler(options: Mapping[str, Any]) -> RuntimeHandler:
    """Factory for the policy file. Raises OptionsError for options it does not understand."""
    unknown = sorted(str(k) for k in options if k not in OPTIONS)
    if unknown:
        raise OptionsError(
            f"predicate {NAME}: unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}"
        )
    without_report = options.get("nodesWithoutReport", "pass")
    if without_report not in NODES_WITHOUT_REPORT:
        raise OptionsError(
            f"predicate {NAME}: nodesWithoutReport must be pass or fail, got {without_report!r}"
        )
    features = options.get("requiredFeatures") or []
    if not isinstance(features, Sequence) or isinstance(features, str | bytes):
        raise OptionsError(f"predicate {NAME}: requiredFeatures must be a list of feature names")
    bad = [f for f in features if f not in KNOWN_FEATURES]
    if bad:
        raise OptionsError(
            f"predicate {NAME}: unknown feature(s) in requiredFeatures: {', '.join(map(repr, bad))}; "
            f"known: {', '.join(KNOWN_FEATURES)}"
        )
    return RuntimeHandler(
        fail_without_report=without_report == "fail",
        required_features=tuple(dict.fromkeys(features)),
    )
