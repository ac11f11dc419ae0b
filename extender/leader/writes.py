"""The leader's writes to the API server: one queue, one write per key at a time.

Every leader actor writes the same way, so the mechanics live here once, shaped after
client-go's workqueue (``util/workqueue``: a dirty set, a processing set, and a
per-item exponential rate limiter):

- **One write per key** (a pod's uid, a node's name), waiting *or* in flight. A newer
  write replaces an older one still waiting, which keeps its place in line (the older
  one is settled as ``superseded``); one put while its key is in flight waits until
  that write has ended, then takes its turn. So two workers never send for one key at
  once, whatever the concurrency.
- **A rate limit**: ``TokenBucket``, client-go's QPS/burst limiter, and a bound on
  the writes in flight at once.
- **Backoff per key, remembered.** A write that fails is tried again after a capped
  exponential delay (``retry_delay``): on 409, 429, 5xx, connection errors and
  timeouts (``write_outcome``), and also when it was refused (403, 422, another 4xx):
  the writers are level-triggered, so what is still wrong is come back to once the
  refusal may have ended (RBAC granted, an admission policy relaxed), never dropped
  and never hammered. A newer write for a key that is waiting out its delay replaces
  the waiting one but does not cut the delay short; so a stream of events about one
  object never turns a refusal into a retry storm. The handler hears of a failure
  once per streak (``settle(..., "failed")``: at once when refused, after
  ``max_attempts`` for the retryable kind), then only ``retrying``.
- **Damping.** A write that would make its object say again what the key's last
  success made it say, within ``retry_max`` of that success (``WriteHandler.content``
  is equal: someone undid it, a GitOps tool reverting a caBundle, another controller
  fighting over a label), counts as one more failure of its streak, so a fight slows
  to one write per ``retry_max`` instead of a hot loop. A write of something new (a
  caBundle that drops the CA the last one added, a label a second class edit moves
  back) is nobody undoing anything and goes out at once.
- A 429's ``Retry-After`` pauses every write of the queue, not just the one that got
  it (the API server asks the client to slow down).
- **Hand-back at the end of a term**: the workers run only while this replica leads
  (``run`` is the actor's ``lead``, or part of it); a write cut short when the term
  ends goes back to the front of the line. A level-triggered actor then ``clear``s
  the queue: its next term (here or on whichever replica leads next) recomputes what
  is owed from what it observes.

What a write *is* stays with its actor (``WriteHandler``): whether it is still due
(checked before the wait for a token and again after it, since that wait may be
long, and again before every retry), how it is sent, and what each ending means to
it (counters, log lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
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
    """A rate limit of ``rate`` per second with bursts of up to ``burst``, as client-go's
    rest clients apply QPS/Burst (flowcontrol.NewTokenBucketRateLimiter over
    golang.org/x/time/rate): each caller *reserves* the next token and waits until its
    time, so callers waiting together are spaced at the rate rather than all woken at
    once to race for one token (a herd that would also batch their work into one turn
    of the event loop).

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
        """Reserve a token: 0.0 when one is there, else the seconds until the reserved one
        is (the caller then waits that long, and has it)."""
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0.0 else -self._tokens / self.rate


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
    # Attempts at a retryable failure (409, 429, 5xx, no answer) before the handler
    # hears of it as failed (``retries_exhausted``); it is still retried after that.
    max_attempts: int = 8
    # Backoff between attempts of one key, doubling up to ``retry_max``, which is also
    # how long a success is remembered for damping.
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Writes in flight at once (node-feature-discovery bounds its node updates to 10):
    # more than one when each waits on the API server's round trip.
    concurrency: int = 1


class WriteHandler(Protocol[T_contra]):
    """What a write means to the actor that queued it."""

    def key(self, item: T_contra) -> str:
        """One write per key, waiting or in flight."""
        ...

    def due(self, item: T_contra) -> str | None:
        """None if the write is still to be made, else why not (it is settled so)."""
        ...

    def content(self, item: T_contra) -> Hashable:
        """What the write would make its object say, as things are now (asked only while
        ``due``): two writes of one key with equal content, the second soon after the
        first succeeded, mean the first was undone (damping)."""
        ...

    async def send(self, item: T_contra) -> Sent:
        """Make the write; connection errors and timeouts are ``Sent(0, message)``."""
        ...

    def settle(self, item: T_contra, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        """The write has ended: ``sent``, ``deleted``, ``superseded``, a ``due`` reason;
        or it is ``failed`` with ``reason`` (``forbidden``, ``rejected``,
        ``retries_exhausted``), said once per streak of failures: it is retried still,
        while ``due``, and ends later as any other write."""
        ...

    def retrying(self, item: T_contra, sent: Sent, delay: float) -> None:
        """The write will be tried again in ``delay`` seconds."""
        ...


@dataclass
class _Entry(Generic[T]):
    item: T


@dataclass
class _Streak:
    """A key's attempts in a row that have not succeeded yet (or that continue a
    success undone within ``retry_max``)."""

    attempts: int = 0
    # The handler was told of this streak's failure (once per streak).
    reported: bool = False
    # What the write being attempted makes its object say (``WriteHandler.content``).
    content: Hashable = None


@dataclass(frozen=True)
class _Success:
    done_at: float
    attempts: int
    content: Hashable


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
        # Ready to go, in line; waiting out a key's backoff; being sent; and put while
        # their key was being sent (each key in at most one of the four).
        self._waiting: OrderedDict[str, _Entry[T]] = OrderedDict()
        self._delayed: dict[str, tuple[_Entry[T], asyncio.TimerHandle]] = {}
        self._sending: set[str] = set()
        self._dirty: dict[str, _Entry[T]] = {}
        # Per key: the attempts of a write not yet done; and the last successes, oldest
        # first, with the attempts they took (damping), forgotten once older than
        # retry_max, so both maps stay as small as the work at hand.
        self._streaks: dict[str, _Streak] = {}
        self._recent: OrderedDict[str, _Success] = OrderedDict()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        """Writes waiting for their turn or for a retry."""
        return len(self._waiting) + len(self._delayed) + len(self._dirty)

    @property
    def in_flight(self) -> int:
        return len(self._sending)

    @property
    def busy(self) -> bool:
        return len(self) > 0 or bool(self._sending)

    def has(self, key: str) -> bool:
        """A write is queued under ``key``, or in flight."""
        return key in self._waiting or key in self._delayed or key in self._dirty or key in self._sending

    def get(self, key: str) -> T | None:
        """The write queued under ``key`` (waiting, delayed or next after the one in flight)."""
        entry = self._waiting.get(key) or self._dirty.get(key)
        if entry is None and key in self._delayed:
            entry = self._delayed[key][0]
        return None if entry is None else entry.item

    def put(self, item: T) -> None:
        """Queue ``item``; one already queued under its key is superseded."""
        key = self._handler.key(item)
        if key in self._sending:
            self._replace(self._dirty, key, item)
            return
        if key in self._delayed:
            entry, _ = self._delayed[key]
            self._handler.settle(entry.item, "superseded")
            entry.item = item  # the delay stands: a newer write does not cut it short
            return
        if key in self._waiting:
            self._replace(self._waiting, key, item)  # keeps its place in line
            return
        self._waiting[key] = _Entry(item)
        self._ready.set()

    def _replace(self, line: dict[str, _Entry[T]], key: str, item: T) -> None:
        older = line.get(key)
        if older is not None:
            self._handler.settle(older.item, "superseded")
            older.item = item
        else:
            line[key] = _Entry(item)

    def clear(self) -> None:
        """Drop every write queued (unsettled; not those in flight): a level-triggered
        actor's term is over, and the next one recomputes what is owed from what is."""
        self.close()
        self._waiting.clear()
        self._dirty.clear()
        self._streaks = {key: streak for key, streak in self._streaks.items() if key in self._sending}

    def close(self) -> None:
        """Forget the writes waiting out a delay (dropped unsettled)."""
        for key, (_, handle) in self._delayed.items():
            handle.cancel()
            self._streaks.pop(key, None)
        self._delayed.clear()

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
            key, entry = self._waiting.popitem(last=False)
            self._sending.add(key)
            try:
                await self._attempt(key, entry)
            except asyncio.CancelledError:
                self._sending.discard(key)
                self._put_back(key, entry)
                raise
            except Exception:
                log.exception("write failed", extra={"key": key})
                self._handler.settle(entry.item, "failed", reason="rejected")
            self._sending.discard(key)
            newer = self._dirty.pop(key, None)
            if newer is not None:
                self.put(newer.item)  # its turn, behind the backoff the write left

    def _put_back(self, key: str, entry: _Entry[T]) -> None:
        newer = self._dirty.pop(key, None)
        if newer is not None:
            self._handler.settle(entry.item, "superseded")
            entry = newer
        self._waiting[key] = entry
        self._waiting.move_to_end(key, last=False)
        self._ready.set()

    async def _wait_for_turn(self) -> bool:
        """Until this write's turn; True if it had to wait (the world may have moved)."""
        waited = False
        while (now := self._clock()) < self._not_before:
            await self._sleep(self._not_before - now)
            waited = True
        delay = self._bucket.take(now)
        if delay > 0:
            await self._sleep(delay)  # the token reserved is this write's when it wakes
            waited = True
        return waited

    async def _attempt(self, key: str, entry: _Entry[T]) -> None:
        handler, item = self._handler, entry.item
        skip = handler.due(item)
        if skip is None:
            delay = self._damping(key, handler.content(item))
            if delay > 0:
                self._delay(key, entry, delay)
                return
            if await self._wait_for_turn():
                skip = handler.due(item)  # the wait may have been long
        if skip is not None:
            self._forget(key)  # nothing is wrong any more
            handler.settle(item, skip)
            return
        streak = self._streaks.setdefault(key, _Streak())
        streak.attempts += 1
        streak.content = handler.content(item)
        sent = await handler.send(item)
        outcome = write_outcome(sent.status)
        if outcome is Outcome.DONE:
            self._succeeded(key, streak)
            handler.settle(item, "sent", sent=sent)
        elif outcome is Outcome.GONE:
            self._forget(key)
            handler.settle(item, "deleted", sent=sent)
        elif outcome is Outcome.FAIL and (skip := handler.due(item)) is not None:
            # Refused because the object changed meanwhile (a uid guard answering 422
            # rather than 409 counts here too): nothing is wrong.
            self._forget(key)
            handler.settle(item, skip, sent=sent)
        else:
            self._failed(key, entry, streak, sent, outcome)

    def _failed(self, key: str, entry: _Entry[T], streak: _Streak, sent: Sent, outcome: Outcome) -> None:
        options = self.options
        delay = retry_delay(
            streak.attempts,
            initial=options.retry_initial,
            maximum=options.retry_max,
            retry_after=sent.retry_after,
        )
        if sent.status == 429 and sent.retry_after is not None:
            # The API server asks every client to slow down, not just this request.
            self._not_before = max(self._not_before, self._clock() + min(sent.retry_after, options.retry_max))
        if not streak.reported and (outcome is Outcome.FAIL or streak.attempts >= options.max_attempts):
            streak.reported = True
            reason = (
                "retries_exhausted"
                if outcome is Outcome.RETRY
                else "forbidden"
                if sent.status == 403
                else "rejected"
            )
            self._handler.settle(entry.item, "failed", reason=reason, sent=sent)
        self._handler.retrying(entry.item, sent, delay)
        self._delay(key, entry, delay)

    def _succeeded(self, key: str, streak: _Streak) -> None:
        """Remember the success for damping; forget successes older than ``retry_max``."""
        del self._streaks[key]
        now = self._clock()
        self._recent[key] = _Success(now, streak.attempts, streak.content)
        self._recent.move_to_end(key)
        while self._recent:
            oldest, success = next(iter(self._recent.items()))
            if now - success.done_at < self.options.retry_max:
                break
            del self._recent[oldest]

    def _forget(self, key: str) -> None:
        self._streaks.pop(key, None)
        self._recent.pop(key, None)

    def _damping(self, key: str, content: Hashable) -> float:
        """The delay before a write that says again what the key's last success said,
        so soon that it is being undone: its streak goes on from that success's
        attempts. 0 for a key at rest or a write of something new."""
        recent = self._recent.pop(key, None)
        if recent is None or recent.content != content:
            return 0.0
        if self._clock() - recent.done_at >= self.options.retry_max:
            return 0.0
        self._streaks[key] = _Streak(attempts=recent.attempts)
        options = self.options
        return retry_delay(recent.attempts, initial=options.retry_initial, maximum=options.retry_max)

    def _delay(self, key: str, entry: _Entry[T], delay: float) -> None:
        loop = asyncio.get_running_loop()

        def due_again() -> None:
            del self._delayed[key]
            if key in self._sending:
                self._replace(self._dirty, key, entry.item)
                return
            self._waiting[key] = entry
            self._ready.set()

        self._delayed[key] = (entry, loop.call_later(delay, due_again))
