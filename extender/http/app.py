"""The HTTP service: aiohttp application factory and handlers.

``POST /filter`` answers kube-scheduler; ``/healthz`` and ``/readyz`` answer the
kubelet; ``GET /metrics`` is Prometheus' (``extender.http.metrics``). ``create_app``
also routes ``POST /explain`` and ``GET /explain/runtimeclasses/{name}``
(``extender.http.explain``) and the two admission webhooks, ``POST
/admission/runtimeclasses`` and ``POST /admission/pods`` (``extender.http.admission``).
Handlers do I/O only: parsing, lookups and the decision itself live in
``extender.protocol``, ``extender.filtering`` and ``policies``.

Bad input never reaches the caller as a stack trace: every error response of every
endpoint is JSON ``{"error": "<short>", "detail": "<one line>"}`` (``error`` a stable
phrase to match on, ``detail`` what exactly was wrong), logged as one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from aiohttp import web
from pydantic import ValidationError

from extender import __version__
from extender.admission import RoutingConfig
from extender.cluster.metrics import SourceStatsProvider
from extender.cluster.objects import ObjectError, describe_validation_error
from extender.cluster.state import ClusterState
from extender.decision_cache import DecisionCache
from extender.filtering import Decision, decide
from extender.http.admission import PATH as ADMISSION_PATH
from extender.http.admission import POD_PATH, admission_handler, pod_admission_handler
from extender.http.admission_metrics import AdmissionMetrics
from extender.http.bodies import (
    ClientDisconnected,
    RequestRefused,
    read_body,
    refuse_declared_oversize,
    require_json,
)
from extender.http.explain import explain_routes
from extender.http.keys import (
    ADMISSION_METRICS,
    AUTOSCALER_CHECK,
    BODY_READ_TIMEOUT,
    CAPTURE,
    DECISIONS,
    HIDDEN_NODES,
    INFORMERS,
    LEADER_GATE,
    MAX_BODY_BYTES,
    MAX_NODES,
    METRICS,
    NODE_LOOKUP,
    PLACEMENT,
    PLUGIN_FINDER,
    POD_ADMISSION_TABLE,
    POLICY,
    ROUTING,
    SOURCES,
    STATE,
    TASKS,
    UNHEALTHY_AFTER,
    WARNINGS,
    WEBHOOK_CERTIFICATES,
)
from extender.http.metrics import CLIENT_CLOSED_REQUEST, Handler, Metrics, is_replay
from extender.http.sampling import HiddenNodeReports
from extender.kube.health import failing_too_long, failure_report, health_report, missing_report
from extender.protocol import ExtenderArgs, pod_instead_of_extender_args
from extender.settings import (
    DEFAULT_BODY_READ_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_NODES_PER_REQUEST,
)
from extender.tasks import BackgroundTasks
from policies.registry import Policy

log = logging.getLogger("extender.http")

# JSON nesting is bounded by pydantic-core's parser, not by a setting: it refuses
# anything nested deeper than this many levels (recursion limit, checked while parsing
# at no extra cost). Real requests nest about 12 levels (managedFields).
JSON_DEPTH_LIMIT = 201


def json_error(
    status: int, error: str, detail: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    """The one error body of every endpoint."""
    return web.json_response({"error": error, "detail": detail}, status=status, headers=headers)


# Short errors for the refusals aiohttp raises itself (routing, client_max_size).
_HTTP_ERRORS = {
    404: "not found",
    405: "method not allowed",
    413: "request body too large",
}


def _http_error_detail(request: web.Request, exc: web.HTTPException) -> str:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return f"{request.method} {request.path}: allowed methods are {allowed}"
    if exc.status == 404:
        return f"no endpoint {request.path}"
    text = exc.text or ""
    return text if text and not text.startswith(f"{exc.status}:") else exc.reason


def _refused(request: web.Request, status: int, error: str, detail: str) -> None:
    log.info(
        "rejected request",
        extra={
            "method": request.method,
            "path": request.path,
            "status": status,
            "error": error,
            "detail": detail,
        },
    )


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RequestRefused as exc:
        _refused(request, exc.status, exc.error, exc.detail)
        return json_error(exc.status, exc.error, exc.detail, headers=exc.headers)
    except ClientDisconnected:
        # The client's doing, not ours: no answer can reach it, and nothing to alert on.
        log.info(
            "client disconnected before sending the whole body",
            extra={"method": request.method, "path": request.path, "contentLength": request.content_length},
        )
        return web.Response(status=CLIENT_CLOSED_REQUEST)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = _HTTP_ERRORS.get(exc.status, exc.reason.lower())
        detail = _http_error_detail(request, exc)
        _refused(request, exc.status, error, detail)
        headers = {h: exc.headers[h] for h in ("Allow", "Connection") if h in exc.headers}
        return json_error(exc.status, error, detail, headers=headers)
    except Exception:
        # A bug of ours, not the caller's: the trace goes to our log only.
        log.exception("internal error", extra={"method": request.method, "path": request.path})
        return json_error(500, "internal error", "the extender failed to answer; its log has the details")


async def filter_handler(request: web.Request) -> web.Response:
    require_json(request)
    body = await read_body(request)
    try:
        args = ExtenderArgs.model_validate_json(body)
    except ValidationError as exc:
        if any("recursion limit exceeded" in e["msg"] for e in exc.errors(include_url=False)):
            return _bad_request(request, f"request: JSON nested deeper than {JSON_DEPTH_LIMIT} levels")
        return _bad_request(
            request, pod_instead_of_extender_args(body) or describe_validation_error(exc, "request")
        )
    app = request.app
    # Cheap: one len() of the list the parser already built.
    count = len(args.NodeNames if args.NodeNames is not None else (args.Nodes and args.Nodes.items) or ())
    if count > (limit := app[MAX_NODES]):
        return _bad_request(request, f"request: {count} nodes, more than max-nodes-per-request ({limit})")
    extra_nodes = None
    try:
        decision = decide(args, app[STATE], app[POLICY], cache=app[DECISIONS])
        lookup = app.get(NODE_LOOKUP)
        if lookup is not None and decision.missing:
            # Names the state has not seen (a node just created, or just deleted): asked
            # of the API server directly, then decided again with what it said. The
            # first decision found them in its own pass over the request, so a call
            # naming only known nodes pays for no separate check.
            extra_nodes, unknown_reason = await lookup.lookup(decision.missing)
            decision = decide(
                args,
                app[STATE],
                app[POLICY],
                cache=app[DECISIONS],
                extra_nodes=extra_nodes,
                unknown_reason=unknown_reason,
            )
    except ObjectError as exc:
        return _bad_request(request, str(exc))
    replayed = is_replay(request)
    app[METRICS].filter.record_decision(decision, replayed=replayed)
    # A replayed call is not kube-scheduler's: its sample says nothing of the sampling now.
    if not replayed and decision.hidden is not None and decision.runtime_class is not None:
        app[HIDDEN_NODES].record(decision.runtime_class.name, decision.hidden)
    result = decision.result
    if result.Error:
        log.warning("filter refused", extra={"pod": decision.pod.key, "error": result.Error})
    elif log.isEnabledFor(logging.DEBUG):
        _log_decision(decision)
    payload = decision.to_json()
    capture = app.get(CAPTURE)
    # A replayed request is not captured again: replaying a capture directory against
    # the server that writes it would otherwise grow it by itself on every run.
    if capture is not None and not result.Error and not replayed:
        capture.submit_decision(body, payload, args, decision, app[STATE], app[POLICY], extra_nodes)
    return web.Response(body=payload, content_type="application/json")


def _log_decision(decision: Decision) -> None:
    """Debug detail of one filter call: a summary line, then one line per rejected node."""
    result = decision.result
    pod = decision.pod.key
    rejected = {**result.FailedNodes, **result.FailedAndUnresolvableNodes}
    log.debug(
        "filter",
        extra={"pod": pod, "runtimeClass": decision.pod.runtime_class_name, "rejected": len(rejected)},
    )
    for node, detail in decision.details.items():
        log.debug(
            "node rejected", extra={"pod": pod, "node": node, "reason": rejected[node], "detail": detail}
        )


def _bad_request(request: web.Request, problem: str) -> web.Response:
    _refused(request, 400, "malformed ExtenderArgs", problem)
    return json_error(400, "malformed ExtenderArgs", problem)


async def healthz(request: web.Request) -> web.Response:
    """Liveness: 503 once a background task has ended, or the cluster state's watch has
    failed to reach the API server for longer than ``unhealthy-after`` (a restart may
    help both). The leader actors' own informers are reported, not judged: a pod
    informer refused by RBAC would restart every replica without fixing anything, and
    the election's wait for it is reported by /readyz and the campaigning gauge."""
    app = request.app
    body: dict[str, object] = {}
    tasks = app.get(TASKS)
    if tasks is not None and tasks.ended:
        body["tasksEnded"] = [{"task": ended.name, "error": ended.error} for ended in tasks.ended]
    sources = app.get(SOURCES)
    window = app.get(UNHEALTHY_AFTER)
    now = time.monotonic()
    if sources and window is not None:
        failing = failing_too_long(sources, window=window, now=now)
        if failing:
            wall_now = time.time()
            body["failing"] = [failure_report(s, now=now, wall_now=wall_now) for s in failing]
    informers = app.get(INFORMERS)
    if informers is not None:
        body["informers"] = [health_report(s, now=now) for s in informers()]
    if "tasksEnded" in body or "failing" in body:
        return web.json_response({"status": "unhealthy", **body}, status=503)
    return web.json_response({"status": "ok", **body})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    unsynced = state.unsynced_kinds()
    # Ready or not, the configuration warnings stay visible to whoever checks readiness,
    # and so do recent filter calls whose fitting nodes the scheduler's sampling hid.
    warnings = [*(request.app.get(WARNINGS) or ()), *request.app[HIDDEN_NODES].messages()]
    autoscalers = request.app.get(AUTOSCALER_CHECK)
    if autoscalers is not None:
        warnings += autoscalers.messages()
    # The version answers "which extender is this?" for whoever probes it (upgrades).
    body: dict[str, object] = {"warnings": warnings, "version": __version__}
    # With --leader-elect: this replica's identity and the holder it last saw. Leading is
    # not a readiness condition: every replica answers /filter.
    leadership = request.app.get(LEADER_GATE)
    if leadership is not None:
        body["leader"] = leadership.details()
    # With self-managed webhook certificates: whether the caBundles trust the served
    # one. A detail here (the scheduler's /filter does not depend on it); /readyz of
    # the admission and probe listeners turns 503 on it (extender.http.admission_listener).
    certificates = request.app.get(WEBHOOK_CERTIFICATES)
    if certificates is not None:
        body["webhookCertificate"] = certificates.details()
    placement = request.app.get(PLACEMENT)
    if placement is not None:
        body["placement"] = placement
    # With pod-admission-table: whether the API server's pod admission finds its table
    # (a detail here too; 503 on the probe and admission listeners' /readyz).
    table = request.app.get(POD_ADMISSION_TABLE)
    if table is not None:
        body["podAdmissionTable"] = table.details()
    # Live mode: whether the API server runs the RuntimeClass admission plugin, as this
    # replica last found out (pod admission leaves to it what it does).
    plugin = request.app.get(PLUGIN_FINDER)
    if plugin is not None:
        body["runtimeClassAdmissionPlugin"] = plugin.details()
    informers = request.app.get(INFORMERS)
    missing = [report for stats in informers() if (report := missing_report(stats))] if informers else []
    if missing:
        body["notServed"] = missing
    if unsynced:
        return web.json_response({"status": "not ready", "unsynced": unsynced, **body}, status=503)
    return web.json_response({"status": "ready", **body})


def create_app(
    *,
    state: ClusterState,
    policy: Policy,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_nodes_per_request: int = DEFAULT_MAX_NODES_PER_REQUEST,
    body_read_timeout: float = DEFAULT_BODY_READ_TIMEOUT,
    source_stats: SourceStatsProvider | None = None,
    decisions: DecisionCache | None = None,
    warnings: Sequence[str] = (),
    routing: RoutingConfig | None = None,
) -> web.Application:
    # Per app, not the global registry: tests build many apps in one process.
    metrics = Metrics(state, policy, source_stats)
    app = web.Application(
        client_max_size=max_body_bytes,
        middlewares=[metrics.middleware, errors_as_json, refuse_declared_oversize],
    )
    app[METRICS] = metrics
    app[TASKS] = BackgroundTasks()
    app[MAX_BODY_BYTES] = max_body_bytes
    app[WARNINGS] = tuple(warnings)
    app[MAX_NODES] = max_nodes_per_request
    app[BODY_READ_TIMEOUT] = body_read_timeout
    app[STATE] = state
    app[POLICY] = policy
    app[DECISIONS] = decisions if decisions is not None else DecisionCache(state)
    app[HIDDEN_NODES] = HiddenNodeReports()
    app.router.add_post("/filter", filter_handler)
    app.router.add_get("/healthz", healthz, allow_head=True)
    app.router.add_get("/readyz", readyz, allow_head=True)
    app.router.add_get("/metrics", metrics.handler)
    app.router.add_routes(explain_routes())
    app[ADMISSION_METRICS] = AdmissionMetrics(metrics.registry)
    app.router.add_post(ADMISSION_PATH, admission_handler)
    app[ROUTING] = routing if routing is not None else RoutingConfig()
    app.router.add_post(POD_PATH, pod_admission_handler)
    return app
