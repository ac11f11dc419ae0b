"""The admission webhooks' HTTP edge: ``POST /admission/runtimeclasses`` (validating,
RuntimeClasses) and ``POST /admission/pods`` (mutating, pods).

The decisions are ``extender.admission.review`` and ``extender.admission.review_pod``
(pure, from the cluster state only: no API call on the request path, so a webhook never
slows the API server by more than one in-memory check). Here: the HTTP edge, the
metrics (``extender.http.admission_metrics``) and the log lines. A body that is not an AdmissionReview gets 400 with the
reason, in the same error shape as every endpoint. Both paths are served on the main
listener and on the ``--admission-port`` one (``extender.http.admission_listener``).
"""

from __future__ import annotations

import logging
import time

from aiohttp import web

from extender.admission import ReviewError, review, review_pod
from extender.http.bodies import RequestRefused, read_body, require_json
from extender.http.keys import ADMISSION_METRICS, ROUTING, STATE

log = logging.getLogger("extender.admission")

PATH = "/admission/runtimeclasses"
POD_PATH = "/admission/pods"
# Every path the admission listener serves, for its log line and the deploy tests.
PATHS = (PATH, POD_PATH)


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
