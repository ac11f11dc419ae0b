"""Prometheus metrics, served on ``GET /metrics``.

Each application gets its own ``CollectorRegistry`` (never the process-global one), so
tests and tools can build several apps side by side.

Cardinality is bounded by construction: no label ever holds a node name or any other
value a pod can choose. Reasons map onto a fixed label set (``policies.verdict.reason_label``); a
RuntimeClass label is either a class that existed in the cluster when the call was
decided, ``none`` (pod without a class) or ``unknown`` (pod naming a missing class).

Every series a dashboard panel or an alert reads exists from the start, at 0, for every
label value known then (Prometheus' instrumentation guide, "Avoid missing metrics"): the
outcomes here, and through ``RuntimeClassSeries`` the counters labelled by RuntimeClass,
for ``none``, ``unknown`` and each class in the cache (each with every reason, for the
rejected nodes). Those follow the cache: a class's series appear with it, and are
removed once it has been gone for ``RETIRED_CLASS_SECONDS``.

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
from policies.verdict import REASON_LABELS, RUNTIME_REASON_LABELS, reason_label

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
# How long the series of a RuntimeClass that left the cache are still exported: by then
# no filter call can be counted under its name (a call is decided against the cache, and
# a pod naming a deleted class counts as unknown) and any Prometheus that scrapes at
# least every few minutes has read their last values. A class back within that time
# keeps its series as they were; one back later starts them again from 0, which rate()
# and increase() read as a counter reset (what it is).
RETIRED_CLASS_SECONDS = 600.0


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


class RuntimeClassSeries(Collector):
    """The ``/filter`` counters labelled ``runtime_class``, exported with a series for
    every label value known: ``none``, ``unknown`` and each RuntimeClass in the cache (for
    ``nodes_rejected``, each of those with every reason of ``REASON_LABELS``), at 0 until
    counted, so ``rate()``, ``increase()`` and the panels reading them have a series from
    the start, and an alert's ``increase()`` sees the first count as one.

    The series follow the cache, checked on each collection (a scrape): a class's series
    are added when a collection finds it there, and removed at the first collection
    ``retention`` seconds (``RETIRED_CLASS_SECONDS``) after one first found it gone. A
    series counted under a class no collection saw in the cache (a call decided just
    before the class was deleted) is retired the same way. The counters are registered
    with no registry of their own: this collector exports them, so nothing can collect
    them without the check first.
    """

    def __init__(
        self,
        classes: Callable[[], Iterable[str]],
        *,
        retention: float = RETIRED_CLASS_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._classes = classes
        self._retention = retention
        self._clock = clock
        # Each counter with the values of its other label (None: it has none).
        self._families: list[tuple[Counter, tuple[str | None, ...]]] = []
        # (counter, runtime_class, reason) -> its child: the hot path asks for the same
        # few on every call (labels() validates, locks and builds a tuple, about 2 µs).
        self._children: dict[tuple[int, str, str | None], Counter] = {}
        self._initialised: set[str] = set()
        # Values of runtime_class that have series but are no class in the cache, with
        # when a collection first found them gone.
        self._gone: dict[str, float] = {}

    def counter(self, name: str, documentation: str, *, reasons: bool = False) -> Counter:
        """A counter labelled ``runtime_class`` (and ``reason`` with ``reasons``)."""
        labels = ["reason", "runtime_class"] if reasons else ["runtime_class"]
        family = Counter(name, documentation, labels, registry=None)
        self._families.append((family, REASON_LABELS if reasons else (None,)))
        return family

    def child(self, family: Counter, runtime_class: str, reason: str | None = None) -> Counter:
        """The series of ``family`` for ``runtime_class`` (and ``reason``)."""
        key = (id(family), runtime_class, reason)
        child = self._children.get(key)
        if child is None:
            labels = (reason, runtime_class) if reason is not None else (runtime_class,)
            child = self._children[key] = family.labels(*labels)
        return child

    def follow(self) -> None:
        """Add the series of the classes now in the cache; remove those of classes gone
        for ``retention`` seconds."""
        now = self._clock()
        known = {*self._classes(), RUNTIME_CLASS_NONE, RUNTIME_CLASS_UNKNOWN}
        for runtime_class in known - self._initialised:
            for family, reasons in self._families:
                for reason in reasons:
                    self.child(family, runtime_class, reason)
            self._initialised.add(runtime_class)
        for runtime_class in self._gone.keys() & known:
            del self._gone[runtime_class]
        exported = {runtime_class for _, runtime_class, _ in self._children}
        for runtime_class in exported - known:
            since = self._gone.setdefault(runtime_class, now)
            if now - since >= self._retention:
                self._remove(runtime_class)

    def _remove(self, runtime_class: str) -> None:
        families = {id(family): family for family, _ in self._families}
        for key in [key for key in self._children if key[1] == runtime_class]:
            family_id, _, reason = key
            labels = (reason, runtime_class) if reason is not None else (runtime_class,)
            families[family_id].remove(*labels)
            del self._children[key]
        self._initialised.discard(runtime_class)
        self._gone.pop(runtime_class, None)

    def describe(self) -> Iterator[Metric]:
        for family, _ in self._families:
            yield from family.describe()

    def collect(self) -> Iterator[Metric]:
        self.follow()
        for family, _ in self._families:
            yield from family.collect()


class FilterMetrics:
    """Request-path metrics of ``POST /filter``. ``classes``: the names of the
    RuntimeClasses in the cache, which the counters labelled by class follow."""

    def __init__(
        self,
        registry: CollectorRegistry,
        classes: Callable[[], Iterable[str]] = tuple,
        *,
        retention: float = RETIRED_CLASS_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
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
        # By RuntimeClass: a series for none, unknown and every class in the cache, from
        # the start (RuntimeClassSeries).
        self.classes = RuntimeClassSeries(classes, retention=retention, clock=clock)
        self.nodes_rejected = self.classes.counter(
            METRIC_PREFIX + "nodes_rejected",
            "Nodes the extender rejected, by reason (a fixed set) and by the pod's RuntimeClass "
            "(none: no class; unknown: the pod names a class that does not exist).",
            reasons=True,
        )
        self.by_runtime_class = self.classes.counter(
            METRIC_PREFIX + "filter_requests_by_runtimeclass",
            "POST /filter requests answered with a decision, by the pod's RuntimeClass (none: no "
            "class; unknown: the pod names a class that does not exist).",
        )
        self.runtime_rejections = self.classes.counter(
            METRIC_PREFIX + "runtime_rejections",
            "Filter answers that left the pod no node, at least one of them rejected because it "
            "cannot run the pod's RuntimeClass (selector mismatch, missing or invalid class, "
            "unsupported handler), by RuntimeClass.",
        )
        self.fitting_nodes_not_offered = self.classes.counter(
            METRIC_PREFIX + "filter_fitting_nodes_not_offered",
            "Filter calls where no offered node fit the pod's RuntimeClass while the cache held "
            "fitting nodes kube-scheduler did not offer (its node sampling hid them: set "
            "percentageOfNodesToScore: 100 on the profile), by RuntimeClass.",
        )
        registry.register(self.classes)
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
        self.classes.child(self.by_runtime_class, runtime_class).inc()
        if decision.hidden is not None:
            self.classes.child(self.fitting_nodes_not_offered, runtime_class).inc()

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
            self.classes.child(self.nodes_rejected, runtime_class, label).inc(count)
        if _passing_count(decision) == 0 and not RUNTIME_REASON_LABELS.isdisjoint(labels):
            self.classes.child(self.runtime_rejections, runtime_class).inc()
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
        self.filter = FilterMetrics(self.registry, state.runtime_classes.keys)
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
