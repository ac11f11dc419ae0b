"""The audit's gauges (``serve --audit-running-pods``), computed at scrape time.

``runtimeclass_extender_misplaced_pods{runtime_class, problem}`` is read from the
``MisplacedIndex`` counts when Prometheus scrapes, so it is never out of step with the
index and costs nothing between scrapes.

Which series exist: for every RuntimeClass the cluster defines, one per problem label,
at 0 when no pod has that problem. Prometheus' guidance for labels with a known set of
values is to export them at 0 rather than leave them missing ("Avoid missing metrics",
prometheus.io/docs/practices/instrumentation), so ``sum``, ``rate`` and ``> 0`` alerts
work and a resolved problem reads 0 rather than vanishing. A class that no longer
exists still has series while pods of it run (problem ``runtimeclass-deleted``); once
the last is gone its series are removed, which Prometheus records as stale, and the
label set stays bounded by the classes that exist or still have pods. Before the pods,
Nodes and RuntimeClasses have all been listed the counts would be partial, so the
gauges have no samples until then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from extender import METRIC_PREFIX
from extender.audit.misplaced import PROBLEMS

MISPLACED_PODS = METRIC_PREFIX + "misplaced_pods"
AUDITED_PODS = METRIC_PREFIX + "audited_pods"


class AuditCollector(Collector):
    """Exports the index's counts; every input is a callable read at scrape time."""

    def __init__(
        self,
        *,
        counts: Callable[[], dict[tuple[str, str], int]],
        audited: Callable[[], int],
        runtime_classes: Callable[[], Iterable[str]],
        ready: Callable[[], bool],
    ) -> None:
        self._counts = counts
        self._audited = audited
        self._runtime_classes = runtime_classes
        self._ready = ready

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Registration reads describe(), not collect(): the index may not be synced yet.
        yield from self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        misplaced, audited = self._families()
        if self._ready():
            counts = self._counts()
            classes = set(self._runtime_classes()) | {runtime_class for runtime_class, _ in counts}
            for runtime_class in sorted(classes):
                for problem in PROBLEMS:
                    misplaced.add_metric([runtime_class, problem], counts.get((runtime_class, problem), 0))
            audited.add_metric([], self._audited())
        yield misplaced
        yield audited

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        misplaced = GaugeMetricFamily(
            MISPLACED_PODS,
            "Running pods on nodes that no longer fit their RuntimeClass, by class and problem: "
            + ", ".join(PROBLEMS)
            + ".",
            labels=["runtime_class", "problem"],
        )
        audited = GaugeMetricFamily(
            AUDITED_PODS,
            "Running pods with a RuntimeClass that the audit checks (bound, not terminated).",
        )
        return misplaced, audited
