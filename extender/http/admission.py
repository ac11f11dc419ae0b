"""The admission webhooks' HTTP edge: ``POST /admission/runtimeclasses`` (validating,
RuntimeClasses) and ``POST /admission/pods`` (mutating, pods).

The decisions are ``extender.admission.review`` and ``extender.admission.review_pod``
(pure, from the cluster state only: no API call on the request path, so a webhook never
slows the API server by more than one in-memory check). Here: the HTTP edge, the
metrics and the log lines. A body that is not an AdmissionReview gets 400 with the
reason, in the same error shape as every endpoint. Both paths are served on the main
listener and on the ``--admission-port`` one (``extender.http.admission_listener``).
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from extender import METRIC_PREFIX
from extender.admission import (
    OPERATIONS,
    PATCHED_FIELDS,
    POD_RESULTS,
    RESULTS,
    ReviewError,
    review,
    review_pod,
)
from extender.http.bodies import RequestRefused, read_body, require_json
from extender.http.keys import ADMISSION_METRICS, ROUTING, STATE

log = logging.getLogger("extender.admission")

PATH = "/admission/runtimeclasses"
POD_PATH = "/admission/pods"
# Every path the admission listener serves, for its log line and the deploy tests.
PATHS = (PATH, POD_PATH)
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


async def admission_handler(request: web.Request) -> web.Response:
    require_json(request)
    metrics = request.app[ADMISSION_METRICS]
    start = time.perf_counter()
    body = await read_body(request)
    try:
        outcome = review(body, request.app[STATE])
    except ReviewError as exc:
        metrics.malformed.inc()
        raise RequestRefused(400, "malformed AdmissionReview", str(exc)) from None
    metrics.reviews.labels(outcome.operation, outcome.result).inc()
    metrics.duration.observe(time.perf_counter() - start)
    if outcome.result in ("denied", "warned"):
        log.info(
            "admission review",
            extra={
                "operation": outcome.operation,
                "runtimeClass": outcome.name,
                "result": outcome.result,
                "denial": outcome.message,
                "warnings": list(outcome.warnings),
            },
        )
    return web.Response(body=outcome.response, content_type="application/json")


async def pod_admission_handler(request: web.Request) -> web.Response:
    require_json(request)
    metrics = request.app[ADMISSION_METRICS]
    start = time.perf_counter()
    body = await read_body(request)
    try:
        outcome = review_pod(body, request.app[STATE], request.app[ROUTING])
    except ReviewError as exc:
        metrics.pod_malformed.inc()
        raise RequestRefused(400, "malformed AdmissionReview", str(exc)) from None
    metrics.pod_reviews.labels(outcome.result).inc()
    for field in outcome.patched:
        metrics.pod_patches.labels(field).inc()
    metrics.pod_duration.observe(time.perf_counter() - start)
    if outcome.result == "denied" or outcome.warnings:
        log.info(
            "pod admission review",
            extra={
                "pod": outcome.pod,
                "runtimeClass": outcome.runtime_class,
                "result": outcome.result,
                "denial": outcome.message,
                "warnings": list(outcome.warnings),
            },
        )
    elif outcome.patched:
        log.debug(
            "pod admission review",
            extra={
                "pod": outcome.pod,
                "runtimeClass": outcome.runtime_class,
                "result": outcome.result,
                "patched": list(outcome.patched),
            },
        )
    return web.Response(body=outcome.response, content_type="application/json")
