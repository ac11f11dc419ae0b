"""Admission webhooks: the pure decisions behind the extender's two webhooks.

- ``runtimeclasses``: the validating webhook for RuntimeClasses
  (``POST /admission/runtimeclasses``): deny a node-selector-term annotation the filter
  cannot read, warn about a class no node can run.
- ``pod_review``: the mutating webhook for pods (``POST /admission/pods``): the in-tree
  RuntimeClass plugin's Pod Overhead, and routing to the RuntimeClass scheduler.
- ``reviews``: what both share, the AdmissionReview wire format and message limits.

Each review answers from the request body and the watch-fed ``ClusterState`` alone; the
HTTP side (handlers, metrics, logs) is in ``extender.http.admission``.

The names below are the package's interface (``from extender.admission import review``
keeps working from when this was one module).
"""

from extender.admission.pod_review import (
    PATCHED_FIELDS,
    POD_RESULTS,
    WEBHOOK_LABEL,
    PodResult,
    PodReviewOutcome,
    RoutingConfig,
    review_pod,
)
from extender.admission.reviews import (
    API_VERSION,
    KIND,
    MAX_MESSAGE_CHARS,
    MAX_WARNING_CHARS,
    OPERATIONS,
    Operation,
    ReviewError,
)
from extender.admission.runtimeclasses import (
    MAX_WARNINGS,
    RESULTS,
    Result,
    ReviewOutcome,
    class_warnings,
    review,
)

__all__ = [
    "API_VERSION",
    "KIND",
    "MAX_MESSAGE_CHARS",
    "MAX_WARNINGS",
    "MAX_WARNING_CHARS",
    "OPERATIONS",
    "PATCHED_FIELDS",
    "POD_RESULTS",
    "RESULTS",
    "WEBHOOK_LABEL",
    "Operation",
    "PodResult",
    "PodReviewOutcome",
    "Result",
    "ReviewError",
    "ReviewOutcome",
    "RoutingConfig",
    "class_warnings",
    "review",
    "review_pod",
]
