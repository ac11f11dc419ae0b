"""What a cluster-state source reports about itself, for /readyz, /healthz and metrics.

A source (the watch reflectors, or the cluster file) keeps one ``SourceStats`` per kind
up to date; readers (HTTP handlers, the metrics collector) only read it. Times are
``time.monotonic()`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class SourceStats:
    kind: str
    synced: bool = False
    # Completed LISTs, including the first one.
    lists: int = 0
    # LISTs forced by 410 Gone (or an ERROR event saying so).
    relists: int = 0
    # Times the watch was (re)started after a failure or a server-side timeout.
    reconnects: int = 0
    # Watch events applied (ADDED/MODIFIED/DELETED; bookmarks excluded).
    events: int = 0
    # Last successful contact with the API server (a LIST page, an event, a bookmark).
    last_contact: float | None = None
    # Last applied event or LIST.
    last_event: float | None = None
    # Start of the current run of failures; None while the source is healthy.
    failing_since: float | None = None
    last_error: str = ""
    # The API server does not serve the resource (its LIST answered 404: a
    # CustomResourceDefinition not installed), and what installs it. Not awaited: the
    # work that does not need it goes on.
    missing: bool = False
    missing_hint: str = ""


def failing_too_long(sources: Iterable[SourceStats], *, window: float, now: float) -> list[SourceStats]:
    """Sources that have failed to reach the API server for longer than ``window`` seconds.

    ``now`` is ``time.monotonic()``. Liveness (/healthz) turns 503 on these, so a process
    stuck behind a broken connection or credentials gets restarted by the kubelet.
    """
    return [s for s in sources if s.failing_since is not None and now - s.failing_since > window]


def failure_report(stats: SourceStats, *, now: float, wall_now: float) -> dict[str, object]:
    """A JSON-able description of one failing source: kind, since when, last error."""
    assert stats.failing_since is not None
    seconds = now - stats.failing_since
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall_now - seconds))
    return {"kind": stats.kind, "since": since, "seconds": round(seconds, 1), "error": stats.last_error}


def waiting_report(stats: SourceStats) -> str | None:
    """None once the source's first LIST is in, or when the API server does not serve
    it (nothing to wait for: ``missing_report`` says so); else what is awaited, with the
    last error if there is one (a 403 here is the usual reason nothing gets going)."""
    if stats.synced or stats.missing:
        return None
    if stats.last_error:
        return f"{stats.kind}: not listed yet: {stats.last_error}"
    return f"{stats.kind}: not listed yet"


def missing_report(stats: SourceStats) -> str | None:
    """What to tell the operator of a source the API server does not serve (None: it
    is served)."""
    if not stats.missing:
        return None
    hint = f": {stats.missing_hint}" if stats.missing_hint else ""
    return f"{stats.kind}: the API server does not serve this resource{hint}"


def health_report(stats: SourceStats, *, now: float) -> dict[str, object]:
    """One source's health for the /healthz body: listed, failing for how long, why."""
    report: dict[str, object] = {"kind": stats.kind, "listed": stats.synced}
    if stats.failing_since is not None:
        report["failingSeconds"] = round(now - stats.failing_since, 1)
        report["error"] = stats.last_error
    return report
