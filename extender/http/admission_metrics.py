"""The admission webhooks' metrics: the RuntimeClass review and the pod review, each
counted by what it answered and timed (extender.http.admission serves both)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from extender import METRIC_PREFIX
from extender.admission import OPERATIONS, PATCHED_FIELDS, POD_RESULTS, RESULTS

_DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reviews = Counter(
            METRIC_PREFIX + "admission_reviews",
            "RuntimeClass admission reviews by operation and result: allowed, denied (a bad "
            "node-selector-term annotation), warned (allowed with warnings), skipped (not checked: "
            "another kind or operation, or the cache not synced).",
            ["operation", "result"],
            registry=registry,
        )
        self.duration = Histogram(
            METRIC_PREFIX + "admission_review_duration_seconds",
            "Time to answer one admission review.",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.malformed = Counter(
            METRIC_PREFIX + "admission_reviews_malformed",
            "Admission requests refused with 400: the body was not an AdmissionReview.",
            registry=registry,
        )
        self.pod_reviews = Counter(
            METRIC_PREFIX + "pod_admission_reviews",
            "Pod admission reviews by result: patched (overhead and/or schedulerName set), unchanged "
            "(allowed as sent, with or without warnings), denied (overhead disagrees with the RuntimeClass).",
            ["result"],
            registry=registry,
        )
        self.pod_patches = Counter(
            METRIC_PREFIX + "pod_admission_patches",
            "Fields the pod webhook set, by field: overhead (from the RuntimeClass's overhead.podFixed), "
            "schedulerName (routed with --route-pods-to-scheduler).",
            ["field"],
            registry=registry,
        )
        self.pod_duration = Histogram(
            METRIC_PREFIX + "pod_admission_review_duration_seconds",
            "Time to answer one pod admission review.",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.pod_malformed = Counter(
            METRIC_PREFIX + "pod_admission_reviews_malformed",
            "Pod admission requests refused with 400: the body was not an AdmissionReview of a pod.",
            registry=registry,
        )
        for operation in OPERATIONS:
            for result in RESULTS:
                self.reviews.labels(operation, result)
        for pod_result in POD_RESULTS:
            self.pod_reviews.labels(pod_result)
        for field in PATCHED_FIELDS:
            self.pod_patches.labels(field)
