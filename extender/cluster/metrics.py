"""Gauges computed at scrape time from the cluster state and the watch sources' health.

KEP-585's "future monitoring": how many RuntimeClasses, how many nodes each selects
and each fits (``extender.cluster.class_nodes``, the same counts as the ``classes``
table), how many classes each node supports, and whether the watch is healthy. The
per-class node counts cost a policy evaluation per (node, class) pair, so they are
cached until the state's generation counters move. Nothing here touches the request
path.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from extender import METRIC_PREFIX
from extender.cluster.class_nodes import ClassNodeCounts, node_selection
from extender.cluster.state import KINDS, ClusterState
from extender.kube.health import SourceStats
from policies.registry import Policy

SourceStatsProvider = Callable[[], Iterable[SourceStats]]

# Buckets of the "RuntimeClasses supported per node" histogram.
NODE_RUNTIMECLASS_BUCKETS = (0, 1, 2, 3, 4, 5, 8, 10, 20)


@dataclass
class _Support:
    """Scrape-time results derived from the state, valid for one pair of generations."""

    key: tuple[int, int, int, int]
    per_class: dict[str, ClassNodeCounts]
    # classes_per_node histogram: cumulative bucket counts and the sum.
    buckets: list[tuple[str, float]]
    total: float


class ClusterCollector(Collector):
    """Gauges read from the cluster state and the sources' health at scrape time."""

    def __init__(
        self, state: ClusterState, policy: Policy, sources: SourceStatsProvider | None = None
    ) -> None:
        self._state = state
        self._policy = policy
        self._sources = sources
        self._support: _Support | None = None

    def _compute_support(self) -> _Support:
        nodes = self._state.nodes
        classes = self._state.runtime_classes
        # len() too: a replace() of an equal-sized set still bumps generation, but a
        # future store that forgets to bump on some path is caught by the size.
        key = (nodes.generation, classes.generation, len(nodes), len(classes))
        if self._support is not None and self._support.key == key:
            return self._support
        per_class, classes_per_node = node_selection(classes.values(), nodes.values(), self._policy)
        per_node_counts: Tally[int] = Tally(classes_per_node)
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
            METRIC_PREFIX + "runtimeclasses",
            "RuntimeClasses the cluster defines.",
            value=len(state.runtime_classes),
        )
        yield GaugeMetricFamily(
            METRIC_PREFIX + "nodes", "Nodes in the extender's cache.", value=len(state.nodes)
        )
        support = self._compute_support()
        selected = GaugeMetricFamily(
            METRIC_PREFIX + "runtimeclass_nodes_selected",
            "Nodes that satisfy each RuntimeClass's node selector (scheduling.nodeSelector and the "
            "node-selector-term annotation), taints aside: the SELECTED column of the classes command.",
            labels=["runtime_class"],
        )
        fitting = GaugeMetricFamily(
            METRIC_PREFIX + "runtimeclass_nodes_fitting",
            "Nodes that pass the whole policy for a pod naming each RuntimeClass with no tolerations of "
            "its own (selector, taints, handler): the FITTING column of the classes command.",
            labels=["runtime_class"],
        )
        for name, counts in sorted(support.per_class.items()):
            selected.add_metric([name], counts.selected)
            fitting.add_metric([name], counts.fitting)
        yield selected
        yield fitting
        yield HistogramMetricFamily(
            METRIC_PREFIX + "node_runtimeclasses",
            "How many RuntimeClasses each node supports (satisfies the node selector of).",
            buckets=support.buckets,
            sum_value=support.total,
        )
        yield from self._collect_sources()

    def _collect_sources(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        synced = GaugeMetricFamily(
            METRIC_PREFIX + "watch_synced",
            "1 once the kind's first LIST has been loaded, else 0.",
            labels=["kind"],
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
            family = CounterMetricFamily(METRIC_PREFIX + "watch_" + field, doc, labels=["kind"])
            for stat in stats:
                family.add_metric([stat.kind], float(getattr(stat, field)))
            yield family
        now = time.monotonic()
        age = GaugeMetricFamily(
            METRIC_PREFIX + "watch_last_event_age_seconds",
            "Seconds since the last applied watch event or LIST (absent before the first).",
            labels=["kind"],
        )
        contact = GaugeMetricFamily(
            METRIC_PREFIX + "watch_last_contact_age_seconds",
            "Seconds since the last successful contact with the API server (absent before the first).",
            labels=["kind"],
        )
        failing = GaugeMetricFamily(
            METRIC_PREFIX + "watch_failing_seconds",
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
