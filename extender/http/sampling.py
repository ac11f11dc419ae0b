"""Filter calls where kube-scheduler's node sampling hid the nodes that fit, per class.

``extender.filtering`` marks such a call (``Decision.hidden``): no offered node passed,
every one failed for a RuntimeClass reason, and the cache knows fitting nodes that were
not offered. The pod is then reported unschedulable with a reason that is wrong for the
cluster. The fix is the scheduler's, not ours (``percentageOfNodesToScore: 100`` on the
profile that uses the extender), so this module makes the condition hard to miss
without flooding anything:

- a warning log line per class at most every ``warn_every`` seconds (a pending pod is
  retried on every cluster event: per call would be a flood), counting the calls since;
- the latest report per class for ``show_for`` seconds after its last call, read by
  ``/readyz`` (its ``warnings``) and by explain for a pod of that class.

The counter ``runtimeclass_extender_filter_fitting_nodes_not_offered_total`` is kept
with the other filter metrics (``extender.http.metrics``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from extender.filtering import HiddenNodes

log = logging.getLogger("extender.http")

WARN_EVERY: Final = 300.0
SHOW_FOR: Final = 900.0

FIX = "set percentageOfNodesToScore: 100 on the kube-scheduler profile that uses the extender"


def hidden_message(runtime_class: str, hidden: HiddenNodes) -> str:
    """One line for logs, /readyz and explain: what happened, and the fix."""
    return (
        f'RuntimeClass "{runtime_class}": kube-scheduler offered {hidden.offered} of {hidden.cluster} nodes '
        f"and none fit, while {hidden.fitting} fitting node(s) were not offered (its node sampling hid "
        f"them); {FIX}"
    )


@dataclass
class _ClassReport:
    latest: HiddenNodes
    seen_at: float
    warned_at: float | None = None
    # Calls since the last warning (the warning line says how many it stands for).
    unwarned: int = 0


class HiddenNodeReports:
    """The latest hidden-nodes report per RuntimeClass, and the rate-limited warning."""

    def __init__(
        self,
        *,
        warn_every: float = WARN_EVERY,
        show_for: float = SHOW_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._warn_every = warn_every
        self._show_for = show_for
        self._clock = clock
        self._reports: dict[str, _ClassReport] = {}

    def record(self, runtime_class: str, hidden: HiddenNodes) -> None:
        now = self._clock()
        report = self._reports.get(runtime_class)
        if report is None:
            report = self._reports[runtime_class] = _ClassReport(hidden, now)
        report.latest, report.seen_at = hidden, now
        report.unwarned += 1
        if report.warned_at is None or now - report.warned_at >= self._warn_every:
            log.warning(
                hidden_message(runtime_class, hidden),
                extra={
                    "runtimeClass": runtime_class,
                    "offered": hidden.offered,
                    "nodes": hidden.cluster,
                    "fittingNotOffered": hidden.fitting,
                    "calls": report.unwarned,
                },
            )
            report.warned_at, report.unwarned = now, 0

    def message_for(self, runtime_class: str | None) -> str | None:
        """The current report for one class, if it had one within ``show_for``."""
        report = self._reports.get(runtime_class) if runtime_class else None
        if report is None or self._clock() - report.seen_at > self._show_for:
            return None
        return hidden_message(runtime_class or "", report.latest)

    def messages(self) -> list[str]:
        """Every current report, by class name."""
        found = (self.message_for(name) for name in sorted(self._reports))
        return [message for message in found if message is not None]
