"""What a cluster-state source reports about itself, for /readyz, /healthz and metrics.

A source (the watch reflectors, or the cluster file) keeps one ``SourceStats`` per kind
up to date; readers (HTTP handlers, the metrics collector) only read it. Times are
``time.monotonic()`` seconds.
"""

from __future__ import annotations

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
