"""Pure scheduling predicates for RuntimeClass-aware filtering. No I/O lives here."""

from policies.objects import NodeView, PodView, RuntimeClassView, RuntimeHandler, Taint, Toleration
from policies.registry import Policy, PolicyError, build_policy
from policies.verdict import FITS, Predicate, Verdict

__all__ = [
    "FITS",
    "NodeView",
    "PodView",
    "Policy",
    "PolicyError",
    "Predicate",
    "RuntimeClassView",
    "RuntimeHandler",
    "Taint",
    "Toleration",
    "Verdict",
    "build_policy",
]
