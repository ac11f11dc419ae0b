"""Counters of the pending-pod requeuer (``serve --requeue-pending-pods``)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from extender import METRIC_PREFIX
from extender.leader.results import FAILURES

# Why a nudge was not sent (--requeue-pending-pods); a fixed set.
REQUEUE_SKIP_REASONS = (
    "already_nudged",  # the pod was already nudged for this RuntimeClass revision
    "not_pending",  # bound or deleted before its turn (it left the unscheduled-pod informer)
    "deleted",  # the PATCH found no pod (404)
    "recreated",  # a new pod of the same name (another uid) took its place
    "superseded",  # a newer change of its RuntimeClass queued a newer nudge first
)


class RequeueMetrics:
    """Counters of the pending-pod requeuer (extender.requeue.requeuer), on the app's registry."""

    def __init__(
        self, registry: CollectorRegistry, *, pending: Callable[[], int], queued: Callable[[], int]
    ) -> None:
        self.sent = Counter(
            METRIC_PREFIX + "requeue_nudges_sent",
            "Pending pods patched (annotation requeued-at) after a change of their RuntimeClass.",
            registry=registry,
        )
        self.skipped = Counter(
            METRIC_PREFIX + "requeue_nudges_skipped",
            "Nudges not sent, by reason: already_nudged, not_pending (bound or deleted first), "
            "deleted (404), recreated (another uid), superseded (a newer change came first).",
            ["reason"],
            registry=registry,
        )
        self.failed = Counter(
            METRIC_PREFIX + "requeue_nudges_failed",
            "Nudges given up, by reason: forbidden (403: RBAC), rejected (another 4xx), "
            "retries_exhausted (conflicts, 429, 5xx or connection errors every time).",
            ["reason"],
            registry=registry,
        )
        self.retries = Counter(
            METRIC_PREFIX + "requeue_patch_retries",
            "PATCH attempts that will be retried (409, 429, 5xx, connection errors, timeouts).",
            registry=registry,
        )
        pending_gauge = Gauge(
            METRIC_PREFIX + "requeue_pending_pods",
            "Unscheduled pods the requeuer watches: they name a RuntimeClass and one of the "
            "configured scheduler names.",
            registry=registry,
        )
        pending_gauge.set_function(lambda: float(pending()))
        queued_gauge = Gauge(
            METRIC_PREFIX + "requeue_queued_nudges",
            "Nudges waiting for their turn under the rate limit, for a retry, or for a refusal to end.",
            registry=registry,
        )
        queued_gauge.set_function(lambda: float(queued()))
        for reason in REQUEUE_SKIP_REASONS:
            self.skipped.labels(reason)
        for reason in FAILURES:
            self.failed.labels(reason)
