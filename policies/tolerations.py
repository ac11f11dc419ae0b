"""Toleration matching, as Kubernetes defines it.

Mirrors ``Toleration.ToleratesTaint`` in k8s.io/api core/v1 (staging/src/k8s.io/api/
core/v1/toleration.go) including the ``Lt``/``Gt`` comparison operators (alpha in 1.35,
feature gate TaintTolerationComparisonOperators), and the TaintToleration filter's rule
that only ``NoSchedule`` and ``NoExecute`` taints can make a node infeasible
(pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from policies.objects import Taint, Toleration

# Effects the scheduler's filter honours; PreferNoSchedule only affects scoring.
FILTERED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

# Kubernetes checks a Lt/Gt value with content.IsDecimalInteger (k8s.io/apimachinery/
# pkg/api/validate/content/decimal_int.go: canonical form, i.e. "0" or an optional "-"
# then ASCII digits without a leading zero; no "+", no "-0", no "007") and then
# strconv.ParseInt(s, 10, 64) (the value must fit int64). Python's int() is looser
# (whitespace, "_", "+", non-ASCII digits), hence the pattern.
_GO_INT = re.compile(r"0|-?[1-9][0-9]*")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_go_int64(text: str) -> int | None:
    """The int64 Kubernetes reads from a Lt/Gt value (IsDecimalInteger, then
    strconv.ParseInt(text, 10, 64)), or None where either rejects it."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (Toleration.ToleratesTaint)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    op = toleration.operator
    if op in ("", "Equal"):
        return toleration.value == taint.value
    if op == "Exists":
        return True
    if op in ("Lt", "Gt"):
        wanted = parse_go_int64(toleration.value)
        actual = parse_go_int64(taint.value)
        if wanted is None or actual is None:
            return False
        return actual < wanted if op == "Lt" else actual > wanted
    # An operator Kubernetes does not know never tolerates anything.
    return False


def tolerated_by_any(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    return any(tolerates(t, taint) for t in tolerations)
