"""The leader's writes to the API server: one queue, one pending write per key.

Every leader actor writes the same way, so the mechanics live here once:

- **One pending write per key** (a pod's uid, a node's name): a newer write replaces
  an older one still waiting, which keeps its place in line; the older one is settled
  as ``superseded``.
- **A rate limit**: ``TokenBucket``, client-go's QPS/burst limiter, and a bound on
  the writes in flight at once.
- **Retries** with capped exponential backoff (``retry_delay``) on 409, 429, 5xx,
  connection errors and timeouts (``write_outcome``); a 429's ``Retry-After`` pauses
  every write of the queue, not just the one that got it (the API server asks the
  client to slow down).
- **Hand-back at the end of a term**: the worker runs only while this replica leads
  (``run`` is the actor's ``lead``, or part of it); a write cut short when the term
  ends goes back to the front of the line for the next term, or for whichever replica
  leads next if the queue is rebuilt from what it observes.

What a write *is* stays with its actor (``WriteHandler``): whether it is still due
(checked before the wait for a token and again after it, since that wait may be
long), how it is sent, and what each ending means to it (counters, log lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, Protocol, TypeVar

from extender.kube.answer import Sent

__all__ = [
    "Outcome",
    "Sent",
    "TokenBucket",
    "WriteHandler",
    "WriteOptions",
    "WriteQueue",
    "retry_delay",
    "write_outcome",
]

log = logging.getLogger("extender.leader.writes")

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    """A rate limit of ``rate`` per second with bursts of up to ``burst`` (client-go's
    flowcontrol.NewTokenBucketRateLimiter, which rest clients use for QPS/Burst).

    ``now`` is any monotonic clock in seconds, passed in by the caller.
    """

    def __init__(self, rate: float, burst: int, *, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = now

    def take(self, now: float) -> float:
        """Take a token and return 0.0, or return the seconds until one is available."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


class Outcome(Enum):
    """What one write's answer means."""

    DONE = "done"  # 2xx: the object was written
    GONE = "gone"  # 404: the object was deleted meanwhile
    RETRY = "retry"  # 409, 429, 5xx: try again after a backoff
    FAIL = "fail"  # any other answer: retrying cannot help (400, 401, 403, 422, ...)


def write_outcome(status: int) -> Outcome:
    """Sort an API answer to a write; 0 (no answer: a connection error or timeout) is
    ``RETRY`` too.

    409 Conflict is retried: either someone else's write raced ours, or a precondition
    (a uid guard, a resourceVersion) failed because the object changed, which the
    handler's ``due`` notices on the retry.
    """
    if 200 <= status < 300:
        return Outcome.DONE
    if status == 404:
        return Outcome.GONE
    if status == 0 or status in (409, 429) or status >= 500:
        return Outcome.RETRY
    return Outcome.FAIL


def retry_delay(attempt: int, *, initial: float, maximum: float, retry_after: float | None = None) -> float:
    """Seconds before attempt ``attempt + 1`` (attempt counts from 1): ``initial``
    doubling up to ``maximum``, and never sooner than the server's ``Retry-After``
    (itself capped at ``maximum``)."""
    delay = min(initial * (2.0 ** max(0, attempt - 1)), maximum)
    if retry_after is not None:
        delay = max(delay, min(retry_after, maximum))
    return delay


@dataclass(frozen=True)
class WriteOptions:
    # Writes per second, with bursts of up to ``burst``.
    rate: float
    burst: int
    # Attempts per write before it counts as failed; backoff between them.
    max_attempts: int = 8
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Writes in flight at once (node-feature-discovery bounds its node updates to 10):
    # more than one when each waits on the API server's round trip.
    concurrency: int = 1


class WriteHandler(Protocol[T_contra]):
    """What a write means to the actor that queued it."""

    def key(self, item: T_contra) -> str:
        """One pending write per key."""
        ...

    def due(self, item: T_contra) -> str | None:
        """None if the write is still to be made, else why not (it is settled so)."""
        ...

    async def send(self, item: T_contra) -> Sent:
        """Make the write; connection errors and timeouts are ``Sent(0, message)``."""
        ...

    def settle(self, item: T_contra, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        """The write has ended: ``sent``, ``deleted``, ``superseded``, a ``due`` reason,
        or ``failed`` with ``reason`` (``forbidden``, ``rejected``, ``retries_exhausted``)."""
        ...

    def retrying(self, item: T_contra, sent: Sent, delay: float) -> None:
        """The write will be retried in ``delay`` seconds."""
        ...


@dataclass
class _Entry(Generic[T]):
    item: T
    attempts: int = 0


class WriteQueue(Generic[T]):
    """Writes waiting for their turn; ``run`` sends them while this replica leads."""

    def __init__(
        self,
        handler: WriteHandler[T],
        options: WriteOptions,
        *,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._handler = handler
        self.options = options
        # The rate limit's clock and sleep (tests substitute both).
        self._clock = clock
        self._sleep = sleep
        self._bucket = TokenBucket(options.rate, options.burst, now=clock())
        self._not_before = 0.0  # clock time before which nothing goes out (429)
        self._waiting: OrderedDict[str, _Entry[T]] = OrderedDict()
        self._ready = asyncio.Event()
        self._retries: set[asyncio.TimerHandle] = set()
        self.in_flight = 0

    def __len__(self) -> int:
        """Writes waiting for their turn or for a retry."""
        return len(self._waiting) + len(self._retries)

    @property
    def busy(self) -> bool:
        return len(self) > 0 or self.in_flight > 0

    def get(self, key: str) -> T | None:
        entry = self._waiting.get(key)
        return None if entry is None else entry.item

    def put(self, item: T) -> None:
        """Queue ``item``; one already waiting under its key is superseded."""
        key = self._handler.key(item)
        older = self._waiting.get(key)
        if older is not None:
            self._handler.settle(older.item, "superseded")
        self._waiting[key] = _Entry(item)  # an older entry keeps its place in line
        self._ready.set()

    def discard(self, key: str) -> T | None:
        """Take the write waiting under ``key`` out of the queue, unsettled."""
        entry = self._waiting.pop(key, None)
        return None if entry is None else entry.item

    def close(self) -> None:
        """Forget the scheduled retries (their writes are dropped unsettled)."""
        for handle in self._retries:
            handle.cancel()
        self._retries.clear()

    async def run(self) -> None:
        """Send writes until cancelled; a write cut short goes back to the front."""
        if self.options.concurrency <= 1:
            await self._work()
            return
        async with asyncio.TaskGroup() as group:
            for _ in range(self.options.concurrency):
                group.create_task(self._work())

    async def _work(self) -> None:
        while True:
            await self._ready.wait()
            if not self._waiting:
                self._ready.clear()
                continue
            _, entry = self._waiting.popitem(last=False)
            self.in_flight += 1
            try:
                await self._attempt(entry)
            except asyncio.CancelledError:
                self._put_back(entry)
                raise
            except Exception:
                log.exception("write failed", extra={"key": self._handler.key(entry.item)})
                self._handler.settle(entry.item, "failed", reason="rejected")
            finally:
                self.in_flight -= 1

    def _put_back(self, entry: _Entry[T]) -> None:
        key = self._handler.key(entry.item)
        if key in self._waiting:
            self._handler.settle(entry.item, "superseded")
            return
        self._waiting[key] = entry
        self._waiting.move_to_end(key, last=False)
        self._ready.set()

    async def _wait_for_turn(self) -> None:
        while True:
            now = self._clock()
            if now < self._not_before:
                await self._sleep(self._not_before - now)
                continue
            delay = self._bucket.take(now)
            if delay <= 0:
                return
            await self._sleep(delay)

    async def _attempt(self, entry: _Entry[T]) -> None:
        handler, item = self._handler, entry.item
        skip = handler.due(item)
        if skip is None:
            await self._wait_for_turn()
            skip = handler.due(item)  # the wait may have been long
        if skip is not None:
            handler.settle(item, skip)
            return
        entry.attempts += 1
        sent = await handler.send(item)
        outcome = write_outcome(sent.status)
        if outcome is Outcome.DONE:
            handler.settle(item, "sent", sent=sent)
        elif outcome is Outcome.GONE:
            handler.settle(item, "deleted", sent=sent)
        elif outcome is Outcome.FAIL and (skip := handler.due(item)) is not None:
            # Refused because the object changed meanwhile (a uid guard answering 422
            # rather than 409 counts here too): nothing is wrong.
            handler.settle(item, skip, sent=sent)
        elif outcome is Outcome.FAIL:
            reason = "forbidden" if sent.status == 403 else "rejected"
            handler.settle(item, "failed", reason=reason, sent=sent)
        elif entry.attempts >= self.options.max_attempts:
            handler.settle(item, "failed", reason="retries_exhausted", sent=sent)
        else:
            options = self.options
            delay = retry_delay(
                entry.attempts,
                initial=options.retry_initial,
                maximum=options.retry_max,
                retry_after=sent.retry_after,
            )
            if sent.status == 429 and sent.retry_after is not None:
                # The API server asks every client to slow down, not just this request.
                self._not_before = max(
                    self._not_before, self._clock() + min(sent.retry_after, options.retry_max)
                )
            handler.retrying(item, sent, delay)
            self._retry_later(entry, delay)

    def _retry_later(self, entry: _Entry[T], delay: float) -> None:
        loop = asyncio.get_running_loop()

        def requeue() -> None:
            self._retries.discard(handle)
            key = self._handler.key(entry.item)
            if key in self._waiting:
                self._handler.settle(entry.item, "superseded")  # a newer write is waiting
                return
            self._waiting[key] = entry
            self._ready.set()

        handle = loop.call_later(delay, requeue)
        self._retries.add(handle)
