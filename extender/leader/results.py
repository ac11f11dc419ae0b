"""What a leader actor's reconcile returns, and what the queue tells it back.

A reconcile (``extender.leader.workqueue``) reads the state of its key's object at its
turn and ends in one ``Result``: ``Done`` (written, or found so), ``Unchanged``
(nothing to write), ``Retry`` (not now, and no failure) or ``Failed`` (the write, or a
read it needed, failed or was refused). A write it wants made is a ``Write``; the API
server's answer to one is a ``Sent``. The queue sorts the result, counts it and tells
the actor in a ``Report``. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from extender.kube.answer import Sent

__all__ = ["FAILURES", "Done", "Failed", "Report", "Result", "Retry", "Sent", "Unchanged", "Write"]

# Every ``Report.failure`` there is: the reasons an actor's write-error counter is
# labelled with, each pre-created at 0.
FAILURES = ("forbidden", "rejected", "retries_exhausted")


@dataclass(frozen=True)
class Write:
    """One write a reconcile wants made: ``send`` makes it; ``content`` is what it makes
    its object say (two writes of a key with equal content, the second soon after the
    first succeeded, mean the first was undone: damping); ``detail`` is whatever the
    actor wants back in its report (the patch, a sentence for the log)."""

    content: Hashable
    send: Callable[[], Awaitable[Sent]]
    detail: object = None


@dataclass(frozen=True)
class Done:
    """The key's object says what it should: ``write`` went out (``sent`` its 2xx), or,
    with neither, it was found so (an event written before)."""

    write: Write | None = None
    sent: Sent | None = None
    note: str = ""


@dataclass(frozen=True)
class Unchanged:
    """Nothing to write: in sync, gone (``sent`` is the 404 when the write found it
    so), or no longer due. ``reason`` names which, for the actor's counters."""

    reason: str
    sent: Sent | None = None


@dataclass(frozen=True)
class Retry:
    """Not now, and not a failure: the key is reconciled again after ``after`` seconds
    (None: the key's backoff), e.g. a write damped because it would undo an undoing.
    ``early``: an ``add`` of the key before then reconciles it at once (a wait for the
    object to change, not a backoff: a startup taint kept while a node may still get
    its labels)."""

    reason: str
    after: float | None = None
    early: bool = False


@dataclass(frozen=True)
class Failed:
    """The write failed (``sent``: 409, 429, 5xx, no answer) or was refused (403, 422,
    another 4xx), a read the reconcile needed failed (``write`` None, the read's
    answer), or the reconcile raised (``write`` None, status 0)."""

    write: Write | None
    sent: Sent

    @property
    def refused(self) -> bool:
        """Refused by the API server (403, 422, ...), not a failure that retrying cures."""
        status = self.sent.status
        return 400 <= status < 500 and status not in (404, 409, 429)


Result = Done | Unchanged | Retry | Failed


@dataclass(frozen=True)
class Report:
    """A reconcile's end, as the queue tells the reconciler: its ``result``; for a
    failure, ``failure`` the first time it is worth saying, else "": ``forbidden`` or
    ``rejected`` when a refusal starts (once for the actor, however many keys it
    refuses), ``retries_exhausted`` at the ``max_attempts``-th retryable failure of a
    key in a row; and ``retry_in``, the seconds until the key is reconciled again (a
    Failed or a Retry; None for a key held while a refusal lasts)."""

    result: Result
    failure: str = ""
    retry_in: float | None = None
