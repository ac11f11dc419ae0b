"""Prometheus metrics, served on ``GET /metrics``.

Each application gets its own ``CollectorRegistry`` (never the process-global one), so
tests and tools can build several apps side by side.

Cardinality is bounded by construction: no label ever holds a node name or any other
value a pod can choose. Reasons map onto a fixed label set (``policies.verdict.reason_label``); a
RuntimeClass label is either a class that existed in the cluster when the call was
decided, ``none`` (pod without a class) or ``unknown`` (pod naming a missing class).

Here: the request-path metrics of ``/filter`` (``FilterMetrics``, one middleware around
the handler; a few dict operations per call plus one pass over the rejected nodes'
reasons), counters read from other components' stats records (``StatsCollector``), and
the exposition. The scrape-time cluster gauges are ``extender.cluster.metrics``; the
requeuer's counters are ``extender.requeue.metrics``.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from extender import METRIC_PREFIX
from extender.capture.format import REPLAY_HEADER
from extender.cluster.metrics import ClusterCollector, SourceStatsProvider
from extender.cluster.state import ClusterState
from extender.filtering import ERROR_NOT_SYNCED, Decision
from policies.registry import Policy
from policies.verdict import RUNTIME_REASON_LABELS, reason_label

# 100 µs (an in-process decision for a small cluster) to 10 s (past kube-scheduler's
# default 5 s httpTimeout: anything there is an outage, not latency).
FILTER_DURATION_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

# Outcomes of a /filter request. Pre-declared so every series exists (at 0) from start.
OUTCOME_OK = "ok"
OUTCOME_NOT_SYNCED = "not_synced"
OUTCOME_ERROR = "error"  # an answer with any other Error, or a 5xx
OUTCOME_CLIENT_DISCONNECTED = "client_disconnected"
# nginx's "client closed request": the status a request whose client hung up mid-body
# ends with (no answer reaches the client; the middleware and the logs see it).
CLIENT_CLOSED_REQUEST = 499
OUTCOME_BY_STATUS = {
    400: "bad_request",
    405: "method_not_allowed",
    408: "timeout",
    413: "too_large",
    415: "unsupported_media_type",
    # The client hung up mid-body (extender.http.bodies): its doing, not a server error.
    CLIENT_CLOSED_REQUEST: OUTCOME_CLIENT_DISCONNECTED,
}
OUTCOME_OTHER = "other"
OUTCOMES = (OUTCOME_OK, OUTCOME_NOT_SYNCED, OUTCOME_ERROR, *OUTCOME_BY_STATUS.values(), OUTCOME_OTHER)

RUNTIME_CLASS_NONE = "none"
RUNTIME_CLASS_UNKNOWN = "unknown"


def runtime_class_label(decision: Decision) -> str:
    """The class the decision used; never a name only the pod vouches for."""
    if decision.runtime_class is not None:
        return decision.runtime_class.name
    return RUNTIME_CLASS_UNKNOWN if decision.pod.wants_runtime_class else RUNTIME_CLASS_NONE


def _passing_count(decision: Decision) -> int:
    result = decision.result
    if result.NodeNames is not None:
        return len(result.NodeNames)
    if result.Nodes is not None:
        return len(result.Nodes.get("items") or ())
    return 0


def _answer_outcome(decision: Decision) -> str:
    """ok, or what its Error means."""
    error = decision.result.Error
    if not error:
        return OUTCOME_OK
    return OUTCOME_NOT_SYNCED if error == ERROR_NOT_SYNCED else OUTCOME_ERROR


def is_replay(request: web.Request) -> bool:
    """Sent by ``replay --url`` (extender.tools.replay marks every request it sends)."""
    return REPLAY_HEADER in request.headers


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FilterMetrics:
    """Request-path metrics of ``POST /filter``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            METRIC_PREFIX + "filter_duration_seconds",
            "Time to answer POST /filter, from the handler's start to the response being ready.",
            buckets=FILTER_DURATION_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            METRIC_PREFIX + "filter_requests",
            "POST /filter requests by outcome: ok, not_synced (answered with Error), error (a server "
            "fault), bad_request, method_not_allowed, timeout, too_large, unsupported_media_type, "
            "client_disconnected (the client hung up mid-body), other.",
            ["outcome"],
            registry=registry,
        )
        self.nodes_rejected = Counter(
            METRIC_PREFIX + "nodes_rejected",
            "Nodes the extender rejected, by reason (a fixed set) and by the pod's RuntimeClass "
            "(none: no class; unknown: the pod names a class that does not exist).",
            ["reason", "runtime_class"],
            registry=registry,
        )
        self.by_runtime_class = Counter(
            METRIC_PREFIX + "filter_requests_by_runtimeclass",
            "POST /filter requests answered with a decision, by the pod's RuntimeClass (none: no "
            "class; unknown: the pod names a class that does not exist).",
            ["runtime_class"],
            registry=registry,
        )
        self.runtime_rejections = Counter(
            METRIC_PREFIX + "runtime_rejections",
            "Filter answers that left the pod no node, at least one of them rejected because it "
            "cannot run the pod's RuntimeClass (selector mismatch, missing or invalid class, "
            "unsupported handler), by RuntimeClass.",
            ["runtime_class"],
            registry=registry,
        )
        self.fitting_nodes_not_offered = Counter(
            METRIC_PREFIX + "filter_fitting_nodes_not_offered",
            "Filter calls where no offered node fit the pod's RuntimeClass while the cache held "
            "fitting nodes kube-scheduler did not offer (its node sampling hid them: set "
            "percentageOfNodesToScore: 100 on the profile), by RuntimeClass.",
            ["runtime_class"],
            registry=registry,
        )
        # `replay --url` sends captured requests again, marked with REPLAY_HEADER: they are
        # counted here and in no other filter metric, so a replay run does not show up as
        # kube-scheduler's traffic (rates, rejections, latency) on the dashboards.
        self.replayed = Counter(
            METRIC_PREFIX + "replayed_filter_requests",
            "POST /filter requests sent by replay --url (header " + REPLAY_HEADER + "), by outcome "
            "(as filter_requests); they count in no other filter metric.",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.requests.labels(outcome)
            self.replayed.labels(outcome)
        # labels() validates, locks and builds a tuple on every call (about 2 µs); the
        # filter path asks for the same few series on every call, so they are kept. As
        # bounded as the series themselves (a label never holds a value a pod chooses).
        self._children: dict[tuple[int, str], Counter] = {}

    def _child(self, family: Counter, value: str) -> Counter:
        key = (id(family), value)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(value)
        return child

    def observe(self, seconds: float, status: int, *, replayed: bool = False) -> None:
        """One finished request; answers other than 200 are counted here by status."""
        if not replayed:
            self.duration.observe(seconds)
        if status == 200:
            return  # counted by record_decision, which knows whether it carried an Error
        counter = self.replayed if replayed else self.requests
        if status >= 500:
            counter.labels(OUTCOME_ERROR).inc()
        else:
            counter.labels(OUTCOME_BY_STATUS.get(status, OUTCOME_OTHER)).inc()

    def record_decision(self, decision: Decision, *, replayed: bool = False) -> None:
        """The answer the filter handler is about to send (status 200)."""
        if replayed:
            self.replayed.labels(_answer_outcome(decision)).inc()
            return
        runtime_class = runtime_class_label(decision)
        self._child(self.requests, self._outcome_of(decision, runtime_class)).inc()
        self._child(self.by_runtime_class, runtime_class).inc()
        if decision.hidden is not None:
            self.fitting_nodes_not_offered.labels(runtime_class).inc()

    def _outcome_of(self, decision: Decision, runtime_class: str) -> str:
        result = decision.result
        if result.Error:
            return _answer_outcome(decision)
        rejected: Mapping[str, int]
        if decision.reason_counts is not None:
            rejected = decision.reason_counts
        else:
            tally = Tally(result.FailedNodes.values())
            tally.update(result.FailedAndUnresolvableNodes.values())
            rejected = tally
        if not rejected:
            return OUTCOME_OK
        labels: Tally[str] = Tally()
        for reason, count in rejected.items():
            labels[reason_label(reason)] += count
        for label, count in labels.items():
            self.nodes_rejected.labels(label, runtime_class).inc(count)
        if _passing_count(decision) == 0 and not RUNTIME_REASON_LABELS.isdisjoint(labels):
            self.runtime_rejections.labels(runtime_class).inc()
        return OUTCOME_OK


@dataclass(frozen=True)
class StatsCounter:
    """One counter family read from a plain stats record: name (without ``_total``),
    help, an optional label, and which record attribute feeds each label value."""

    name: str
    documentation: str
    label: str | None
    attributes: dict[str, str]


class StatsCollector(Collector):
    """Counters read at scrape time from a stats record another module keeps (the
    capture writer's, the node lookup's): those modules only add to plain ints."""

    def __init__(self, stats: object, families: Iterable[StatsCounter]) -> None:
        self._stats = stats
        self._families = tuple(families)

    def collect(self) -> Iterator[CounterMetricFamily]:
        for spec in self._families:
            labels = [spec.label] if spec.label else []
            family = CounterMetricFamily(spec.name, spec.documentation, labels=labels)
            for value, attribute in spec.attributes.items():
                family.add_metric([value] if spec.label else [], getattr(self._stats, attribute))
            yield family


CAPTURE_COUNTERS = (
    StatsCounter(
        METRIC_PREFIX + "captures",
        "Filter calls offered to the capture writer (--capture-dir), by what became of them.",
        "result",
        {"written": "written", "dropped": "dropped", "too_large": "too_large", "failed": "failed"},
    ),
    StatsCounter(
        METRIC_PREFIX + "capture_files_removed",
        "Capture files removed to stay within capture-max-files and capture-max-bytes.",
        None,
        {"": "removed"},
    ),
)

NODE_LOOKUP_COUNTERS = (
    StatsCounter(
        METRIC_PREFIX + "node_lookups",
        "Direct GETs of node names the watch had not delivered yet, by result.",
        "result",
        {"found": "found", "not_found": "not_found", "failed": "failed"},
    ),
    StatsCounter(
        METRIC_PREFIX + "node_lookup_cache_hits",
        "Node-name lookups answered from the lookup's short-lived cache.",
        None,
        {"": "cache_hits"},
    ),
)


class Metrics:
    """The metrics of one application: a registry, the filter metrics, the collector."""

    def __init__(
        self, state: ClusterState, policy: Policy, sources: SourceStatsProvider | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        self.filter = FilterMetrics(self.registry)
        self.cluster = ClusterCollector(state, policy, sources)
        self.registry.register(self.cluster)

    def add_stats(self, stats: object, families: Iterable[StatsCounter]) -> None:
        """Export a component's stats record (see StatsCollector)."""
        self.registry.register(StatsCollector(stats, families))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Times ``/filter`` and counts its outcome; other paths pass straight through.

        Sits outside the error middleware so it sees the final status of every answer.
        """
        if request.path != "/filter":
            return await handler(request)
        replayed = is_replay(request)
        start = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.filter.observe(time.perf_counter() - start, exc.status, replayed=replayed)
            raise
        except Exception:
            self.filter.observe(time.perf_counter() - start, 500, replayed=replayed)
            raise
        self.filter.observe(time.perf_counter() - start, response.status, replayed=replayed)
        return response

    async def handler(self, request: web.Request) -> web.Response:
        # The format the scraper asks for (Accept): classic text, or OpenMetrics.
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(
            body=encoder(_WithoutCreated(self.registry)), headers={"Content-Type": content_type}
        )


class _WithoutCreated:
    """The registry as exposed: without ``*_created`` samples. In the classic text format
    each would be one more series per counter and histogram, and nobody reads process
    start times off them. (prometheus_client can only drop them process-wide.)"""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            samples = [s for s in metric.samples if not s.name.endswith("_created")]
            if len(samples) != len(metric.samples):
                metric.samples = samples
            yield metric
