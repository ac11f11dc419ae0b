"""A leader actor that writes: a queue of keys, a pass, and ``reconcile(key)``.

The one recipe for an actor that changes the cluster (``extender.leader.actor`` says
where the shape is defined and names the one actor outside it). A ``Controller``:

- names the stores it reads (``reads``): a term starts once all of them are listed,
  never on a cold cache (node-feature-discovery stripped the labels of whole clusters
  by acting on a half-listed one);
- turns every change its stores' listeners hear into the key of the object it
  concerns, ``self.queue.add(key)``, or, for a change that concerns many objects, asks
  for a pass, ``self.queue.resync(after=...)`` (coalesced); whether it leads or not:
  the queue drops what is asked outside a term, so a follower queues nothing;
- says what a pass does (``resync``: compare what is with what should be and add the
  key of each object out of line; every term starts with one), how one key is brought
  to what the state asks for (``reconcile``, which reads the state now and returns a
  ``Result``), and what each end means to it (``report``: counters, log lines;
  ``WriteLog`` says the failures the same way in every actor).

The base does the rest: ``lead`` waits for the stores, calls ``starting``, runs the
queue for the term and calls ``stopped`` when it ends; ``drain`` gives what is waiting
a bounded time on shutdown. The writes of every actor over one API client share its
``WriteLimiter`` (``limiter``; each actor keeps its own rate). The smallest
controller, with the test API server's nodes, is in docs/development.md ("The
smallest actor").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from extender.kube.store import Store
from extender.leader.actor import LeaderActor, wait_while
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.results import Failed, Report, Result
from extender.leader.workqueue import WorkQueue, WriteOptions
from extender.leader.writes import Turn

__all__ = ["Controller", "WriteLog"]

K = TypeVar("K", bound=Hashable)


class Controller(LeaderActor, Generic[K]):
    """Base of every writing actor; see the module doc."""

    def __init__(
        self,
        options: WriteOptions,
        *,
        clock: Any = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        limiter: WriteLimiter | None = None,
    ) -> None:
        self.options = options
        self.queue: WorkQueue[K] = WorkQueue(options, clock=clock, sleep=sleep, limiter=limiter, name=self.name)

    @property
    def reads(self) -> Sequence[Store[Any]]:
        """The stores a term needs listed before it starts (its informers' by default)."""
        return tuple(informer.store for informer in self.informers)

    def waiting(self) -> list[str]:
        informers = super().waiting()
        own = {id(informer.store) for informer in self.informers}
        stores = [
            f"{store.kind}: not listed yet"
            for store in self.reads
            if id(store) not in own and not store.synced
        ]
        return [*stores, *informers]

    @property
    def busy(self) -> bool:
        """Keys waiting or being reconciled, or a pass owed (the queue's ``busy``)."""
        return self.queue.busy

    async def lead(self) -> None:
        for store in self.reads:
            await store.wait_synced()
        self.starting()
        try:
            await self.queue.run(self)
        finally:
            self.stopped()

    async def drain(self) -> None:
        await wait_while(lambda: self.queue.busy, self.options.drain_timeout)

    def starting(self) -> None:
        """Called as a term starts, its stores listed (a log line, say)."""
        return None

    def stopped(self) -> None:
        """Called as a term ends, its queue cleared (forget what the term kept)."""
        return None

    # ----- what each controller says ----------------------------------------------------

    async def resync(self) -> None:
        """A pass: add the key of every object out of line (each term starts with one)."""
        return None

    async def reconcile(self, key: K, turn: Turn) -> Result:
        raise NotImplementedError

    def report(self, key: K, report: Report) -> None:
        return None


@dataclass(frozen=True)
class WriteLog:
    """How every writer logs a failing write: a WARNING when it is worth saying (once
    per streak of a key's retryable failures; once for a refusal, whatever the number
    of keys it refuses), naming the key, the status and the API server's message, with
    a hint for what fixes a refusal (403: RBAC; 422: admission); the retries at
    ``retry_level``, and the refusal's probes at DEBUG (the warning said it).

    ``failing`` is the warning's message ("cannot label node"); ``exhausted``, if
    given, replaces it for a retryable failure that has lasted ``max_attempts``.
    """

    logger: logging.Logger
    subject: str
    failing: str
    retrying: str
    hints: Mapping[int, str] = field(default_factory=dict)
    exhausted: str = ""
    suffix: str = ""
    retry_level: int = logging.DEBUG
    # A retry worth more than ``retry_level`` for some statuses (a 409: a race lost).
    retry_levels: Mapping[int, int] = field(default_factory=dict)

    def __call__(self, key: object, report: Report, **extra: Any) -> None:
        result = report.result
        if not isinstance(result, Failed):
            return
        fields = {self.subject: str(key), "status": result.sent.status, "error": result.sent.message, **extra}
        if report.failure:
            if report.failure == "retries_exhausted" and self.exhausted:
                message = self.exhausted
            else:
                message = self.failing + self.hints.get(result.sent.status, "")
            self.logger.warning(message + self.suffix, extra={**fields, "reason": report.failure})
        if report.retry_in is not None:
            level = logging.DEBUG if result.refused else self.retry_levels.get(result.sent.status, self.retry_level)
            self.logger.log(level, self.retrying, extra={**fields, "retryIn": round(report.retry_in, 3)})
