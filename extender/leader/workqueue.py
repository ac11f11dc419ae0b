"""The leader's queue of keys: client-go's controller shape, in asyncio.

Every leader actor that writes is a controller (``extender.leader.controller``):
listeners of its stores turn every change into a **key** (a node's name, a pod's key, a
Secret) and ``add`` it here; the queue calls the actor's ``reconcile(key, turn)``, which
reads the current state of the key's object and returns what happened (``Result``). The
queue never holds a write or anything computed for one: what to write is decided when
the key's turn comes, from the state of that moment. Shaped after client-go's
``util/workqueue`` and its per-item exponential rate limiter:

- **One reconcile per key at a time.** A key added while queued keeps its place; added
  while being reconciled it is reconciled once more after (a dirty set and a processing
  set, as client-go's queue has them), so two workers never act on one key, whatever
  the concurrency.
- **The queue owns the term** (``run``, the actor's ``lead``): it adds every key the
  actor names (``Reconciler.term_keys``) when the term starts, works until it is cancelled,
  and then forgets every key, delay and backoff: the next term, here or on whichever
  replica leads next, starts from what it observes. ``add`` outside a term does nothing:
  followers queue nothing.
- **Coalescing**: ``add_after(key, delay)`` adds the key once ``delay`` seconds have
  passed; more calls meanwhile change nothing (one pass for a burst of changes).
- **A rate limit on writes** (``TokenBucket``, client-go's QPS/burst), taken by
  ``Turn.write`` only when there is something to send: a reconcile that finds its key in
  sync costs no token. A 429's ``Retry-After`` pauses every write.
- **Backoff per key, remembered.** A ``Failed`` key (409, 429, 5xx, no answer, and also
  403, 422 and other refusals: what is still wrong is come back to once the refusal may
  have ended, never dropped and never hammered) and a reconcile that raises are tried
  again after a capped exponential delay (``retry_delay``). Adding the key meanwhile
  does not cut the delay short, so a stream of events never turns a refusal into a
  retry storm. The reconciler hears of a failure once per streak (``Report.failure``:
  at once when refused, after ``max_attempts`` for the retryable kind).
- **Damping.** A write that would make its object say again what the key's last
  success made it say, within ``retry_max`` of that success (``Write.content`` equal:
  someone undid it, a GitOps tool reverting a caBundle, a controller fighting over a
  label), waits as one more failure of its streak, so a fight slows to one write per
  ``retry_max`` instead of a hot loop. A write of something new goes out at once.

What a write is and what its answer means to the actor stay with the actor: its
``reconcile`` builds a ``Write`` from the state and hands it to ``Turn.write``, which
applies the damping and the rate limit, asks for the write again after a wait (the
world may have moved meanwhile), sends it and sorts the answer into a ``Result``; the
reconcile may read that answer further (an event that exists already is done).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from extender.kube.answer import Sent

__all__ = [
    "Done",
    "Failed",
    "Report",
    "Result",
    "Retry",
    "Sent",
    "TokenBucket",
    "Turn",
    "Unchanged",
    "WorkQueue",
    "Write",
    "WriteOptions",
    "retry_delay",
]

log = logging.getLogger("extender.leader.workqueue")

K = TypeVar("K", bound=Hashable)

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


def retry_delay(attempt: int, *, initial: float, maximum: float, retry_after: float | None = None) -> float:
    """Seconds before attempt ``attempt + 1`` (attempt counts from 1): ``initial``
    doubling up to ``maximum``, and never sooner than the server's ``Retry-After``
    (itself capped at ``maximum``)."""
    delay = min(initial * (2.0 ** max(0, attempt - 1)), maximum)
    if retry_after is not None:
        delay = max(delay, min(retry_after, maximum))
    return delay


@dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """How an actor's queue writes. Each actor's options extend it with their own
    defaults (``LabelOptions(WriteOptions)``), so the queue takes them as they are."""

    # Writes per second, with bursts of up to ``burst``.
    rate: float = 5.0
    burst: int = 5
    # Attempts at a retryable failure (409, 429, 5xx, no answer) before the reconciler
    # hears of it as failed (``retries_exhausted``); it is still retried after that.
    max_attempts: int = 8
    # Backoff between attempts of one key, doubling up to ``retry_max``, which is also
    # how long a success is remembered for damping.
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Keys reconciled at once (node-feature-discovery bounds its node updates to 10):
    # more than one when each waits on the API server's round trip.
    concurrency: int = 1
    # Longest wait on shutdown, while leading, for the keys queued to be done.
    drain_timeout: float = 5.0


# ----- what a reconcile asks for, and what it returns ------------------------------------


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
    (None: the key's backoff), e.g. a write damped because it would undo an undoing."""

    reason: str
    after: float | None = None


@dataclass(frozen=True)
class Failed:
    """The write failed (``sent``: 409, 429, 5xx, no answer) or was refused (403, 422,
    another 4xx), or the reconcile raised (``write`` None, status 0): tried again with
    the key's backoff."""

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
    failure, ``failure`` once per streak (``forbidden``, ``rejected``,
    ``retries_exhausted``: the first report of a refusal, the ``max_attempts``-th of a
    retryable failure), else ""; and ``retry_in``, the seconds until the key is
    reconciled again (a Failed or a Retry), else None."""

    result: Result
    failure: str = ""
    retry_in: float | None = None


class Reconciler(Protocol[K]):
    def term_keys(self) -> Iterable[K]:
        """Every key there is work for at the start of a term (level-triggered: what
        the actor's stores show)."""
        ...

    async def reconcile(self, key: K, turn: Turn) -> Result:
        """Bring the key's object to what the current state asks for; say what happened."""
        ...

    def report(self, key: K, report: Report) -> None:
        """Count and log a reconcile's end."""
        ...


# ----- the queue -----------------------------------------------------------------------


@dataclass
class _Streak:
    """A key's attempts in a row that have not succeeded yet (or that continue a
    success undone within ``retry_max``)."""

    attempts: int = 0
    # The reconciler was told of this streak's failure (once per streak).
    reported: bool = False
    # What the write being attempted makes its object say (``Write.content``).
    content: Hashable = None


@dataclass(frozen=True)
class _Success:
    done_at: float
    attempts: int
    content: Hashable


class Turn:
    """A key's turn with the queue: what a reconcile writes through."""

    def __init__(self, queue: WorkQueue[K], key: K) -> None:
        self._queue: WorkQueue[Hashable] = queue  # type: ignore[assignment]
        self._key: Hashable = key

    def failed(self, sent: Sent) -> Failed:
        """What a reconcile returns when what it must read first fails (a GET answered
        500, no answer): an attempt of the key's streak, as a failed write is, so that
        its backoff doubles and a failure that lasts is reported."""
        self._queue.streak(self._key).attempts += 1
        return Failed(None, sent)

    async def write(self, plan: Callable[[], Write | Unchanged]) -> Result:
        """Make the write ``plan`` asks for now, subject to damping and the rate limit,
        and say how it ended. ``plan`` reads the current state; it is asked again after
        a wait for the rate limit, and after a refusal (the object may have changed
        meanwhile, which is no failure)."""
        queue, key = self._queue, self._key
        wanted = plan()
        if isinstance(wanted, Unchanged):
            return wanted
        delay = queue.damping(key, wanted.content)
        if delay > 0:
            return Retry("damped", after=delay)
        if await queue.wait_for_token():
            wanted = plan()  # the wait may have been long
            if isinstance(wanted, Unchanged):
                return wanted
        streak = queue.streak(key)
        streak.attempts += 1
        streak.content = wanted.content
        sent = await wanted.send()
        if 200 <= sent.status < 300:
            return Done(wanted, sent)
        if sent.status == 404:
            return Unchanged("deleted", sent)
        failed = Failed(wanted, sent)
        if failed.refused:
            # Refused because the object changed meanwhile (a uid guard answering 422
            # rather than 409 counts here too): nothing is wrong.
            again = plan()
            if isinstance(again, Unchanged):
                return Unchanged(again.reason, sent)
        return failed


class WorkQueue(Generic[K]):
    """Keys waiting for their turn; ``run`` reconciles them while this replica leads."""

    def __init__(
        self,
        options: WriteOptions,
        *,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,
        name: str = "",
    ) -> None:
        self.options = options
        self.name = name
        # The rate limit's clock and sleep (tests substitute both).
        self._clock = clock
        self._sleep = sleep
        self._bucket = TokenBucket(options.rate, options.burst, now=clock())
        self._not_before = 0.0  # clock time before which nothing goes out (429)
        self._running = False
        # In line; waiting out a delay (a backoff, a coalescing); being reconciled; and
        # added while being reconciled (each key in the first three at most once).
        self._waiting: OrderedDict[K, None] = OrderedDict()
        self._delayed: dict[K, asyncio.TimerHandle] = {}
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        # Per key: the attempts not yet successful; and the last successes, oldest
        # first, forgotten once older than retry_max (damping).
        self._streaks: dict[K, _Streak] = {}
        self._recent: OrderedDict[K, _Success] = OrderedDict()
        self._ready = asyncio.Event()

    # ----- what the actor and its listeners call --------------------------------------

    @property
    def running(self) -> bool:
        """A term is running: keys added now are reconciled."""
        return self._running

    def __len__(self) -> int:
        """Keys waiting for their turn, out a delay, or again after the reconcile under way."""
        return len(self._waiting) + len(self._delayed) + len(self._dirty)

    @property
    def in_flight(self) -> int:
        return len(self._processing)

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._delayed or self._processing)

    def has(self, key: K) -> bool:
        return key in self._waiting or key in self._delayed or key in self._processing

    def add(self, key: K) -> None:
        """Reconcile ``key`` (nothing outside a term). One waiting keeps its place; one
        waiting out a delay keeps its delay; one being reconciled is again after."""
        if not self._running:
            return
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._waiting and key not in self._delayed:
            self._waiting[key] = None
            self._ready.set()

    def add_after(self, key: K, delay: float) -> None:
        """Reconcile ``key`` once ``delay`` seconds have passed: more calls meanwhile, or
        a key already queued, change nothing (the coalescing of a burst of changes)."""
        if not self._running or key in self._waiting or key in self._delayed:
            return
        self._delay(key, delay)

    # ----- the term -------------------------------------------------------------------

    async def run(self, reconciler: Reconciler[K]) -> None:
        """One term: every key of ``reconciler`` is added, then reconciled as added,
        until cancelled; then everything queued is forgotten."""
        self._running = True
        try:
            for key in reconciler.term_keys():
                self.add(key)
            if self.options.concurrency <= 1:
                await self._work(reconciler)
                return
            async with asyncio.TaskGroup() as group:
                for _ in range(self.options.concurrency):
                    group.create_task(self._work(reconciler))
        finally:
            self._running = False
            self.clear()

    def clear(self) -> None:
        """Forget every key queued, every delay and backoff (the next term recomputes
        what is owed from what is)."""
        for handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        self._waiting.clear()
        self._dirty.clear()
        self._streaks.clear()
        self._recent.clear()
        self._not_before = 0.0

    async def _work(self, reconciler: Reconciler[K]) -> None:
        while True:
            await self._ready.wait()
            if not self._waiting:
                self._ready.clear()
                continue
            key, _ = self._waiting.popitem(last=False)
            self._processing.add(key)
            try:
                result = await self._reconcile(reconciler, key)
            finally:
                self._processing.discard(key)
            self._ended(reconciler, key, result)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)  # its turn again, behind whatever delay the end set
            # A reconcile that found nothing to write awaited nothing: yield, so that a
            # run of them (a flood of node events) never holds the loop.
            await asyncio.sleep(0)

    async def _reconcile(self, reconciler: Reconciler[K], key: K) -> Result:
        try:
            return await reconciler.reconcile(key, Turn(self, key))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug, or a failure the actor did not foresee: logged with its trace,
            # and tried again with the key's backoff like any failure (never dropped).
            log.exception("reconcile failed", extra={"queue": self.name, "key": str(key)})
            streak = self.streak(key)
            streak.attempts += 1
            return Failed(None, Sent(0, f"{type(exc).__name__}: {exc}"))

    def _ended(self, reconciler: Reconciler[K], key: K, result: Result) -> None:
        if isinstance(result, Done):
            if result.write is not None:
                self._succeeded(key)
            else:
                self._forget(key)
            reconciler.report(key, Report(result))
        elif isinstance(result, Unchanged):
            self._forget(key)  # nothing is wrong any more
            reconciler.report(key, Report(result))
        elif isinstance(result, Retry):
            streak = self.streak(key)
            delay = result.after
            if delay is None:
                delay = retry_delay(
                    max(1, streak.attempts),
                    initial=self.options.retry_initial,
                    maximum=self.options.retry_max,
                )
            self._delay(key, delay)
            reconciler.report(key, Report(result, retry_in=delay))
        else:
            reconciler.report(key, self._failed(key, result))

    def _failed(self, key: K, result: Failed) -> Report:
        options, sent = self.options, result.sent
        streak = self.streak(key)
        delay = retry_delay(
            max(1, streak.attempts),
            initial=options.retry_initial,
            maximum=options.retry_max,
            retry_after=sent.retry_after,
        )
        if sent.status == 429 and sent.retry_after is not None:
            # The API server asks every client to slow down, not just this request.
            self._not_before = max(self._not_before, self._clock() + min(sent.retry_after, options.retry_max))
        failure = ""
        if not streak.reported and (result.refused or streak.attempts >= options.max_attempts):
            streak.reported = True
            failure = (
                "forbidden" if sent.status == 403 else "rejected" if result.refused else "retries_exhausted"
            )
        self._delay(key, delay)
        return Report(result, failure=failure, retry_in=delay)

    # ----- what a turn uses -----------------------------------------------------------

    def streak(self, key: K) -> _Streak:
        return self._streaks.setdefault(key, _Streak())

    async def wait_for_token(self) -> bool:
        """Until a write may go out; True if it had to wait (the world may have moved)."""
        waited = False
        while (now := self._clock()) < self._not_before:
            await self._sleep(self._not_before - now)
            waited = True
        delay = self._bucket.take(now)
        if delay > 0:
            await self._sleep(delay)  # the token reserved is this write's when it wakes
            waited = True
        return waited

    def damping(self, key: K, content: Hashable) -> float:
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

    # ----- bookkeeping ----------------------------------------------------------------

    def _succeeded(self, key: K) -> None:
        """Remember the success for damping; forget successes older than ``retry_max``."""
        streak = self._streaks.pop(key, None) or _Streak(attempts=1)
        now = self._clock()
        self._recent[key] = _Success(now, streak.attempts, streak.content)
        self._recent.move_to_end(key)
        while self._recent:
            oldest, success = next(iter(self._recent.items()))
            if now - success.done_at < self.options.retry_max:
                break
            del self._recent[oldest]

    def _forget(self, key: K) -> None:
        self._streaks.pop(key, None)
        self._recent.pop(key, None)

    def _delay(self, key: K, delay: float) -> None:
        loop = asyncio.get_running_loop()
        previous = self._delayed.pop(key, None)
        if previous is not None:
            previous.cancel()
        self._waiting.pop(key, None)

        def due_again() -> None:
            self._delayed.pop(key, None)
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._waiting:
                self._waiting[key] = None
                self._ready.set()

        self._delayed[key] = loop.call_later(delay, due_again)
