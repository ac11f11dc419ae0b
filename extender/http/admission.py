"""``POST /admission/runtimeclasses``: the validating admission webhook for RuntimeClasses.

The decision is ``extender.admission.review`` (pure, from the cluster state only: no
API call on the request path, so the webhook never slows the API server by more than
one in-memory check). Here: the HTTP edge and the metrics. A body that is not an
AdmissionReview gets 400 with the reason, in the same error shape as every endpoint.
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from extender.admission import OPERATIONS, RESULTS, ReviewError, review
from extender.cluster.metrics import PREFIX
from extender.http.bodies import RequestRefused, read_body, require_json
from extender.http.keys import ADMISSION_METRICS, STATE

log = logging.getLogger("extender.admission")

PATH = "/admission/runtimeclasses"


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reviews = Counter(
            PREFIX + "admission_reviews",
            "RuntimeClass admission reviews by operation and result: allowed, denied (a bad "
            "node-selector-term annotation), warned (allowed with warnings), skipped (not checked: "
            "another kind or operation, or the cache not synced).",
            ["operation", "result"],
            registry=registry,
        )
        self.duration = Histogram(
            PREFIX + "admission_review_duration_seconds",
            "Time to answer one admission review.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=registry,
        )
        self.malformed = Counter(
            PREFIX + "admission_reviews_malformed",
            "Admission requests refused with 400: the body was not an AdmissionReview.",
            registry=registry,
        )
        for operation in OPERATIONS:
            for result in RESULTS:
                self.reviews.labels(operation, result)


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
                "result": outcome.result,
                "denial": outcome.message,
                "warnings": list(outcome.warnings),
            },
        )
    return web.Response(body=outcome.response, content_type="application/json")
