"""Prometheus metrics, served on ``GET /metrics``.

Each application gets its own ``CollectorRegistry`` (never the process-global one), so
tests and tools can build several apps side by side.

Cardinality is bounded by construction: no label ever holds a node name or any other
value a pod can choose. Reasons map onto a fixed label set (``reason_label``); a
RuntimeClass label is either a class that existed in the cluster when the call was
decided, ``none`` (pod without a class) or ``unknown`` (pod naming a missing class).

Two kinds of metric live here:

- counters and a histogram updated on the request path by ``FilterMetrics`` (one
  middleware around ``/filter``; cheap: a few dict operations per call plus one pass
  over the rejected nodes' reasons);
- gauges computed at scrape time by ``ClusterCollector`` from the ``ClusterState``
  and the sources' ``SourceStats`` (KEP-585's "future monitoring": how many
  RuntimeClasses, how many nodes support each, how many classes each node supports).
  The per-class node counts cost one selector check per (node, class) pair, so they
  are cached until the state's generation counters move.
"""

from __future__ import annotations

import re
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from extender.cluster.health import SourceStats
from extender.cluster.state import KINDS, ClusterState
from extender.filtering import ERROR_NOT_SYNCED, Decision
from policies.objects import PodView
from policies.predicates import RuntimeClassNodeSelector
from policies.verdict import REASON_NODE_UNKNOWN, REASON_RUNTIMECLASS_MISMATCH, REASON_UNTOLERATED_TAINT

PREFIX = "runtimeclass_extender_"

# No *_created series: in the classic text format each would be one more series per
# counter and histogram, and nobody reads process start times off them. (A process-wide
# switch of prometheus_client; this process exports only these metrics.)
disable_created_metrics()  # type: ignore[no-untyped-call]

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
OUTCOME_BY_STATUS = {
    400: "bad_request",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}
OUTCOME_OTHER = "other"
OUTCOMES = (OUTCOME_OK, OUTCOME_NOT_SYNCED, OUTCOME_ERROR, *OUTCOME_BY_STATUS.values(), OUTCOME_OTHER)

# Reason label values: a fixed set, whatever class or handler names a reason embeds.
REASON_RUNTIMECLASS_MISMATCH_LABEL = "runtimeclass_mismatch"
REASON_LABELS = (
    REASON_RUNTIMECLASS_MISMATCH_LABEL,
    "runtimeclass_not_found",
    "runtimeclass_invalid",
    "handler_unsupported",
    "untolerated_taint",
    "unknown_node",
    "other",
)
_EXACT_REASONS = {
    REASON_RUNTIMECLASS_MISMATCH: REASON_RUNTIMECLASS_MISMATCH_LABEL,
    REASON_UNTOLERATED_TAINT: "untolerated_taint",
    REASON_NODE_UNKNOWN: "unknown_node",
}
# Shapes of the reasons that embed a name (policies/verdict.py).
_PATTERN_REASONS = (
    (re.compile(r'RuntimeClass ".*" not found'), "runtimeclass_not_found"),
    (re.compile(r'RuntimeClass ".*" has an invalid node selector annotation'), "runtimeclass_invalid"),
    (
        re.compile(r"node\(s\) don't support runtime handler \".*\"( with the required features)?"),
        "handler_unsupported",
    ),
)
# Reasons meaning "this node cannot run the pod's runtime" (KEP-585: scheduling
# failures caused by unsupported runtimes), as opposed to taints or cache misses.
RUNTIME_REASON_LABELS = frozenset(
    {
        REASON_RUNTIMECLASS_MISMATCH_LABEL,
        "runtimeclass_not_found",
        "runtimeclass_invalid",
        "handler_unsupported",
    }
)

RUNTIME_CLASS_NONE = "none"
RUNTIME_CLASS_UNKNOWN = "unknown"

# Buckets of the "RuntimeClasses supported per node" histogram.
NODE_RUNTIMECLASS_BUCKETS = (0, 1, 2, 3, 4, 5, 8, 10, 20)


def reason_label(reason: str) -> str:
    """The bounded label value for a reason string a predicate produced."""
    exact = _EXACT_REASONS.get(reason)
    if exact is not None:
        return exact
    for pattern, label in _PATTERN_REASONS:
        if pattern.fullmatch(reason):
            return label
    return "other"


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


SourceStatsProvider = Callable[[], Iterable[SourceStats]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FilterMetrics:
    """Request-path metrics of ``POST /filter``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            PREFIX + "filter_duration_seconds",
            "Time to answer POST /filter, from the handler's start to the response being ready.",
            buckets=FILTER_DURATION_BUCKETS,
            registry=registry,
        )
        self.requests = Counter(
            PREFIX + "filter_requests",
            "POST /filter requests by outcome: ok, not_synced (answered with Error), error, "
            "bad_request, method_not_allowed, too_large, unsupported_media_type, other.",
            ["outcome"],
            registry=registry,
        )
        self.nodes_rejected = Counter(
            PREFIX + "nodes_rejected",
            "Nodes the extender rejected, by reason (a fixed set) and by the pod's RuntimeClass "
            "(none: no class; unknown: the pod names a class that does not exist).",
            ["reason", "runtime_class"],
            registry=registry,
        )
        self.runtime_rejections = Counter(
            PREFIX + "runtime_rejections",
            "Filter answers that left the pod no node, at least one of them rejected because it "
            "cannot run the pod's RuntimeClass (selector mismatch, missing or invalid class, "
            "unsupported handler), by RuntimeClass.",
            ["runtime_class"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.requests.labels(outcome)

    def observe(self, seconds: float, status: int) -> None:
        """One finished request; answers other than 200 are counted here by status."""
        self.duration.observe(seconds)
        if status == 200:
            return  # counted by record_decision, which knows whether it carried an Error
        if status >= 500:
            self.requests.labels(OUTCOME_ERROR).inc()
        else:
            self.requests.labels(OUTCOME_BY_STATUS.get(status, OUTCOME_OTHER)).inc()

    def record_decision(self, decision: Decision) -> None:
        """The answer the filter handler is about to send (status 200)."""
        self.requests.labels(self._outcome_of(decision)).inc()

    def _outcome_of(self, decision: Decision) -> str:
        result = decision.result
        if result.Error:
            return OUTCOME_NOT_SYNCED if result.Error == ERROR_NOT_SYNCED else OUTCOME_ERROR
        if decision.reason_counts is not None:
            rejected = Tally(decision.reason_counts)
        else:
            rejected = Tally(result.FailedNodes.values())
            rejected.update(result.FailedAndUnresolvableNodes.values())
        if not rejected:
            return OUTCOME_OK
        runtime_class = runtime_class_label(decision)
        labels: Tally[str] = Tally()
        for reason, count in rejected.items():
            labels[reason_label(reason)] += count
        for label, count in labels.items():
            self.nodes_rejected.labels(label, runtime_class).inc(count)
        if _passing_count(decision) == 0 and not RUNTIME_REASON_LABELS.isdisjoint(labels):
            self.runtime_rejections.labels(runtime_class).inc()
        return OUTCOME_OK


@dataclass
class _Support:
    """Scrape-time results derived from the state, valid for one pair of generations."""

    key: tuple[int, int, int, int]
    nodes_per_class: dict[str, int]
    # classes_per_node histogram: cumulative bucket counts and the sum.
    buckets: list[tuple[str, float]]
    total: float


_NO_POD = PodView()


class ClusterCollector(Collector):
    """Gauges read from the cluster state and the sources' health at scrape time."""

    def __init__(self, state: ClusterState, sources: SourceStatsProvider | None = None) -> None:
        self._state = state
        self._sources = sources
        self._selector = RuntimeClassNodeSelector()
        self._support: _Support | None = None

    def _compute_support(self) -> _Support:
        nodes = self._state.nodes
        classes = self._state.runtime_classes
        # len() too: a replace() of an equal-sized set still bumps generation, but a
        # future store that forgets to bump on some path is caught by the size.
        key = (nodes.generation, classes.generation, len(nodes), len(classes))
        if self._support is not None and self._support.key == key:
            return self._support
        check = self._selector.check
        class_list = list(classes.values())
        per_class = dict.fromkeys((rc.name for rc in class_list), 0)
        per_node_counts: Tally[int] = Tally()
        for node in nodes.values():
            supported = 0
            for rc in class_list:
                if check(_NO_POD, rc, node).fits:
                    per_class[rc.name] += 1
                    supported += 1
            per_node_counts[supported] += 1
        buckets: list[tuple[str, float]] = []
        for bound in NODE_RUNTIMECLASS_BUCKETS:
            buckets.append(
                (str(float(bound)), float(sum(n for k, n in per_node_counts.items() if k <= bound)))
            )
        buckets.append(("+Inf", float(len(nodes))))
        total = float(sum(k * n for k, n in per_node_counts.items()))
        self._support = _Support(key, per_class, buckets, total)
        return self._support

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        state = self._state
        yield GaugeMetricFamily(
            PREFIX + "runtimeclasses", "RuntimeClasses the cluster defines.", value=len(state.runtime_classes)
        )
        yield GaugeMetricFamily(PREFIX + "nodes", "Nodes in the extender's cache.", value=len(state.nodes))
        support = self._compute_support()
        per_class = GaugeMetricFamily(
            PREFIX + "runtimeclass_nodes",
            "Nodes that currently satisfy each RuntimeClass's node selector (scheduling.nodeSelector "
            "and the node-selector-term annotation).",
            labels=["runtime_class"],
        )
        for name, count in sorted(support.nodes_per_class.items()):
            per_class.add_metric([name], count)
        yield per_class
        yield HistogramMetricFamily(
            PREFIX + "node_runtimeclasses",
            "How many RuntimeClasses each node supports (satisfies the node selector of).",
            buckets=support.buckets,
            sum_value=support.total,
        )
        yield from self._collect_sources()

    def _collect_sources(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        synced = GaugeMetricFamily(
            PREFIX + "watch_synced", "1 once the kind's first LIST has been loaded, else 0.", labels=["kind"]
        )
        for kind in KINDS:
            synced.add_metric([kind], 1.0 if self._state.store(kind).synced else 0.0)
        yield synced
        stats = list(self._sources()) if self._sources is not None else []
        if not stats:
            return
        counters = {
            "lists": "Completed LISTs, including the first one.",
            "relists": "LISTs forced by 410 Gone (the watch fell too far behind).",
            "reconnects": "Times the watch was restarted after a failure or a server-side timeout.",
            "events": "Watch events applied (bookmarks excluded).",
        }
        for field, doc in counters.items():
            family = CounterMetricFamily(PREFIX + "watch_" + field, doc, labels=["kind"])
            for stat in stats:
                family.add_metric([stat.kind], float(getattr(stat, field)))
            yield family
        now = time.monotonic()
        age = GaugeMetricFamily(
            PREFIX + "watch_last_event_age_seconds",
            "Seconds since the last applied watch event or LIST (absent before the first).",
            labels=["kind"],
        )
        contact = GaugeMetricFamily(
            PREFIX + "watch_last_contact_age_seconds",
            "Seconds since the last successful contact with the API server (absent before the first).",
            labels=["kind"],
        )
        failing = GaugeMetricFamily(
            PREFIX + "watch_failing_seconds",
            "Seconds the kind's source has been failing without a success; 0 while healthy.",
            labels=["kind"],
        )
        for stat in stats:
            if stat.last_event is not None:
                age.add_metric([stat.kind], max(0.0, now - stat.last_event))
            if stat.last_contact is not None:
                contact.add_metric([stat.kind], max(0.0, now - stat.last_contact))
            failing.add_metric([stat.kind], 0.0 if stat.failing_since is None else now - stat.failing_since)
        yield age
        yield contact
        yield failing


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
        "runtimeclass_extender_captures",
        "Filter calls offered to the capture writer (--capture-dir), by what became of them.",
        "result",
        {"written": "written", "dropped": "dropped", "too_large": "too_large", "failed": "failed"},
    ),
    StatsCounter(
        "runtimeclass_extender_capture_files_removed",
        "Capture files removed to stay within capture-max-files and capture-max-bytes.",
        None,
        {"": "removed"},
    ),
)

NODE_LOOKUP_COUNTERS = (
    StatsCounter(
        "runtimeclass_extender_node_lookups",
        "Direct GETs of node names the watch had not delivered yet, by result.",
        "result",
        {"found": "found", "not_found": "not_found", "failed": "failed"},
    ),
    StatsCounter(
        "runtimeclass_extender_node_lookup_cache_hits",
        "Node-name lookups answered from the lookup's short-lived cache.",
        None,
        {"": "cache_hits"},
    ),
)


class Metrics:
    """The metrics of one application: a registry, the filter metrics, the collector."""

    def __init__(self, state: ClusterState, sources: SourceStatsProvider | None = None) -> None:
        self.registry = CollectorRegistry()
        self.filter = FilterMetrics(self.registry)
        self.cluster = ClusterCollector(state, sources)
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
        start = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.filter.observe(time.perf_counter() - start, exc.status)
            raise
        except Exception:
            self.filter.observe(time.perf_counter() - start, 500)
            raise
        self.filter.observe(time.perf_counter() - start, response.status)
        return response

    async def handler(self, request: web.Request) -> web.Response:
        # The format the scraper asks for (Accept): classic text, or OpenMetrics.
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(self.registry), headers={"Content-Type": content_type})


# Why a nudge was not sent (--requeue-pending-pods); a fixed set.
REQUEUE_SKIP_REASONS = (
    "already_nudged",  # the pod was already nudged for this RuntimeClass revision
    "not_pending",  # bound or deleted before its turn (it left the unscheduled-pod informer)
    "deleted",  # the PATCH found no pod (404)
    "recreated",  # a new pod of the same name (another uid) took its place
    "superseded",  # a newer change of its RuntimeClass queued a newer nudge first
)
# Why a nudge failed: the API server refused it for good, or it kept failing.
REQUEUE_FAIL_REASONS = ("forbidden", "rejected", "retries_exhausted")


class RequeueMetrics:
    """Counters of the pending-pod requeuer (extender.requeue), on the app's registry."""

    def __init__(
        self, registry: CollectorRegistry, *, pending: Callable[[], int], queued: Callable[[], int]
    ) -> None:
        self.sent = Counter(
            PREFIX + "requeue_nudges_sent",
            "Pending pods patched (annotation requeued-at) after a change of their RuntimeClass.",
            registry=registry,
        )
        self.skipped = Counter(
            PREFIX + "requeue_nudges_skipped",
            "Nudges not sent, by reason: already_nudged, not_pending (bound or deleted first), "
            "deleted (404), recreated (another uid), superseded (a newer change came first).",
            ["reason"],
            registry=registry,
        )
        self.failed = Counter(
            PREFIX + "requeue_nudges_failed",
            "Nudges given up, by reason: forbidden (403: RBAC), rejected (another 4xx), "
            "retries_exhausted (conflicts, 429, 5xx or connection errors every time).",
            ["reason"],
            registry=registry,
        )
        self.retries = Counter(
            PREFIX + "requeue_patch_retries",
            "PATCH attempts that will be retried (409, 429, 5xx, connection errors, timeouts).",
            registry=registry,
        )
        pending_gauge = Gauge(
            PREFIX + "requeue_pending_pods",
            "Unscheduled pods the requeuer watches: they name a RuntimeClass and one of the "
            "configured scheduler names.",
            registry=registry,
        )
        pending_gauge.set_function(lambda: float(pending()))
        queued_gauge = Gauge(
            PREFIX + "requeue_queued_nudges",
            "Nudges waiting for their turn under the rate limit or for a retry.",
            registry=registry,
        )
        queued_gauge.set_function(lambda: float(queued()))
        for reason in REQUEUE_SKIP_REASONS:
            self.skipped.labels(reason)
        for reason in REQUEUE_FAIL_REASONS:
            self.failed.labels(reason)
