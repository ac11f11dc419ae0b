"""The leader's queue of keys: client-go's workqueue and its rate limiters, in asyncio.

Every leader actor that writes is a controller (``extender.leader.controller``): its
listeners ``add`` a **key** per change (a node's name, a pod's key, the Secret); the
queue calls ``reconcile(key, turn)``, which reads the key's object as it is at its
turn and returns a ``Result`` (``extender.leader.results``). Nothing computed for a
write waits in the queue. What it does:

- **One reconcile per key at a time**: a key added while waiting keeps its place (or,
  ``first``, jumps the line), added while being reconciled it is reconciled once more
  after (client-go's dirty and processing sets), whatever the ``concurrency``.
- **The pass is first-class** (``resync``): the actor's ``resync()`` adds the keys of
  the objects out of line. A term starts with one; a change that concerns many objects
  asks for one (``resync(after=window)``: the earliest asked for wins). It runs on a
  task of its own, one at a time, never in line behind the writes.
- **It counts, classifies and backs off** (``extender.leader.backoff``): every
  ``Failed`` end and every reconcile that raises (a ``CancelledError`` too, unless the
  task itself is being cancelled) is one attempt of the key, whichever path it took; a
  429 pauses the API client's writes (``extender.leader.limits``); a refusal (403, 422)
  is the actor's condition, said once, one key probing, unless other keys' writes are
  accepted meanwhile: then it is that key's alone (``extender.leader.refusal``).
- **``report`` is contained** as ``reconcile`` is: logged with its trace if it raises.
- **It owns the term** (``run``, the actor's ``lead``): a pass when it starts, and
  every key, delay, backoff and refusal forgotten when it ends. ``add`` outside a term
  does nothing: followers queue nothing.
- **``busy`` is "waiting or being reconciled"** (or a pass owed): a key in backoff or
  held by a refusal owes nothing a drain could deliver.

``add`` of a key waiting out an early ``Retry`` cuts that delay short (client-go's
``Add`` on ``AddAfter``); of a key in **backoff** it does not, unlike client-go (where
an event during ``AddRateLimited``'s delay reconciles the key at once): the reconcile
is level-triggered, so the event brings nothing its retry will not read, and a stream
of events would turn a failing write into a retry per event.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from extender.leader.backoff import KeyBackoff
from extender.leader.limits import Sleep, WriteLimiter
from extender.leader.refusal import Refusal
from extender.leader.results import Done, Failed, Report, Result, Retry, Sent, Unchanged
from extender.leader.writes import Damping, Turn

__all__ = ["Reconciler", "WorkQueue", "WriteOptions"]

log = logging.getLogger("extender.leader.workqueue")
K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


@dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """How an actor's queue writes. Each actor's options extend it with their own
    defaults (``LabelOptions(WriteOptions)``), so the queue takes them as they are."""

    # The actor's writes per second, with bursts of up to ``burst`` (its own pace under
    # the API client's 429 pause, extender.leader.limits).
    rate: float = 5.0
    burst: int = 5
    # Retryable failures of a key in a row (409, 429, 5xx, no answer) before the actor
    # hears of it (``retries_exhausted``); it is still retried after that.
    max_attempts: int = 8
    # Backoff between attempts of one key, doubling up to ``retry_max``, which is also
    # how long a success is remembered for damping.
    retry_initial: float = 0.5
    retry_max: float = 30.0
    # Longest wait of the probe while the actor's writes are refused (a sixteenth of
    # how long the refusal has lasted, from retry_initial: extender.leader.refusal).
    refusal_max: float = 1000.0
    # Keys reconciled at once (node-feature-discovery bounds its node updates to 10):
    # more than one when each waits on the API server's round trip.
    concurrency: int = 1
    # Longest wait on shutdown, while leading, for the keys queued to be done.
    drain_timeout: float = 5.0


class Reconciler(Protocol[K_contra]):
    async def resync(self) -> None:
        """A pass: add the key of every object out of line (level-triggered: from what
        the actor's stores show)."""
        ...

    async def reconcile(self, key: K_contra, turn: Turn) -> Result:
        """Bring the key's object to what the current state asks for; say what happened."""
        ...

    def report(self, key: K_contra, report: Report) -> None:
        """Count and log a reconcile's end."""
        ...


def _cancelled() -> bool:
    """The running task is being cancelled (not a CancelledError some code raised)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class WorkQueue(Generic[K]):
    """Keys waiting for their turn; ``run`` reconciles them while this replica leads."""

    def __init__(
        self,
        options: WriteOptions,
        *,
        clock: Callable[[], float],
        sleep: Sleep = asyncio.sleep,
        limiter: WriteLimiter | None = None,
        name: str = "",
    ) -> None:
        self.options = options
        self.name = name
        self._clock = clock
        # The API client's limiter (shared by the actors writing over it), this actor's pace.
        self.limiter = limiter or WriteLimiter(clock=clock, sleep=sleep)
        self._pace = self.limiter.pace(options.rate, options.burst)
        self._damping = Damping(initial=options.retry_initial, maximum=options.retry_max, clock=clock)
        self._refusal: Refusal[K] = Refusal(
            initial=options.retry_initial, maximum=options.refusal_max, clock=clock
        )
        self._running = False
        # In line; waiting out a delay (True: a backoff, which ``add`` does not cut
        # short); being reconciled.
        self._waiting: OrderedDict[K, None] = OrderedDict()
        self._delayed: dict[K, tuple[asyncio.TimerHandle, bool]] = {}
        self._processing: set[K] = set()
        # Added while being reconciled (True: wanted first, see ``add``).
        self._dirty: dict[K, bool] = {}
        self._backoff: KeyBackoff[K] = KeyBackoff(initial=options.retry_initial, maximum=options.retry_max)
        self._ready = asyncio.Event()
        # The pass: its timer and when it is due (loop time), whether the one pending
        # is owed (a drain waits for it), and the one due now or running.
        self._pass_timer: asyncio.TimerHandle | None = None
        self._pass_due = 0.0
        self._pass_owed = False
        self._pass_now = asyncio.Event()
        self._passing = False
        self._pass_failures = 0

    # ----- what the actor and its listeners call --------------------------------------

    @property
    def running(self) -> bool:
        """A term is running: keys added now are reconciled."""
        return self._running

    def __len__(self) -> int:
        """Keys waiting, out a delay, held by a refusal, or again after their reconcile."""
        return len(self._waiting) + len(self._delayed) + len(self._dirty) + len(self._refusal.held)

    @property
    def in_flight(self) -> int:
        return len(self._processing)

    @property
    def busy(self) -> bool:
        """Keys waiting or being reconciled, or a pass owed (not a backoff, not held)."""
        owed = self._pass_owed and self._pass_timer is not None
        return bool(self._waiting or self._processing or self._passing or self._pass_now.is_set() or owed)

    @property
    def refused(self) -> bool:
        """The actor's writes are refused (one key probes, the others are held)."""
        return self._refusal.active

    def has(self, key: K) -> bool:
        return (
            key in self._waiting or key in self._delayed or key in self._processing or key in self._refusal.held
        )

    def add(self, key: K, *, first: bool = False) -> None:
        """Reconcile ``key`` (nothing outside a term). One waiting keeps its place (or,
        ``first``, goes to the head of the line: a write that must not wait behind a
        long pass), one in backoff or held keeps waiting (module doc), one being
        reconciled is again after; one waiting out an early ``Retry`` is wanted now."""
        if not self._running or key in self._refusal.held:
            return
        if key in self._waiting:
            if first:
                self._waiting.move_to_end(key, last=False)
            return
        delayed = self._delayed.get(key)
        if delayed is not None:
            handle, backoff = delayed
            if backoff:
                return
            handle.cancel()
            del self._delayed[key]
        self._enqueue(key, first=first)

    def resync(self, after: float = 0.0, *, owed: bool = True) -> None:
        """Have the actor's pass run within ``after`` seconds (the earliest asked for
        wins). ``owed``: a change waits for it, so a drain does too; a timed pass (a
        periodic check) is not owed anything."""
        if not self._running:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, after)
        if self._pass_timer is not None:
            if self._pass_due <= due:
                self._pass_owed = self._pass_owed or owed
                return
            self._pass_timer.cancel()
            owed = owed or self._pass_owed
        self._pass_due, self._pass_owed = due, owed
        self._pass_timer = loop.call_at(due, self._pass_is_due)

    # ----- the term -------------------------------------------------------------------

    async def run(self, reconciler: Reconciler[K]) -> None:
        """One term: a pass, then every key reconciled as added, until cancelled; then
        everything queued is forgotten."""
        self._running = True
        try:
            self.resync()
            async with asyncio.TaskGroup() as group:
                group.create_task(self._passes(reconciler))
                for _ in range(max(1, self.options.concurrency)):
                    group.create_task(self._work(reconciler))
        finally:
            self._running = False
            self.clear()

    def clear(self) -> None:
        """Forget every key queued, every delay, backoff and refusal (the next term
        recomputes what is owed from what is)."""
        for handle, _ in self._delayed.values():
            handle.cancel()
        if self._pass_timer is not None:
            self._pass_timer.cancel()
        self._pass_timer, self._pass_owed, self._pass_failures = None, False, 0
        self._pass_now.clear()
        self._delayed.clear()
        self._waiting.clear()
        self._dirty.clear()
        self._backoff.clear()
        self._damping.clear()
        self._refusal.clear()

    def _pass_is_due(self) -> None:
        self._pass_timer, self._pass_owed = None, False
        self._pass_now.set()

    async def _passes(self, reconciler: Reconciler[K]) -> None:
        while True:
            await self._pass_now.wait()
            self._pass_now.clear()
            self._passing = True
            try:
                await reconciler.resync()
                self._pass_failures = 0
            except (Exception, asyncio.CancelledError) as exc:
                if isinstance(exc, asyncio.CancelledError) and _cancelled():
                    raise
                self._pass_failed(exc)
            finally:
                self._passing = False

    def _pass_failed(self, exc: BaseException) -> None:
        # Like a key's: logged, retried with backoff (not owed: a drain does not wait).
        self._pass_failures += 1
        delay = self._backoff.delay(self._pass_failures)
        log.error(
            "resync failed",
            exc_info=exc,
            extra={"queue": self.name, "error": f"{type(exc).__name__}: {exc}", "retryIn": delay},
        )
        self.resync(delay, owed=False)

    async def _work(self, reconciler: Reconciler[K]) -> None:
        while True:
            await self._ready.wait()
            if not self._waiting:
                self._ready.clear()
                continue
            key, _ = self._waiting.popitem(last=False)
            if self._refusal.holds(key):
                continue
            self._processing.add(key)
            try:
                result = await self._reconcile(reconciler, key)
            finally:
                self._processing.discard(key)
            report = self._ended(key, result)
            try:
                reconciler.report(key, report)
            except (Exception, asyncio.CancelledError):
                # Synchronous: a CancelledError here is raised, never a cancellation.
                log.exception("report failed", extra={"queue": self.name, "key": str(key)})
            if key in self._dirty:
                # Its turn again, behind whatever delay the end set.
                self.add(key, first=self._dirty.pop(key))
            # A reconcile that found nothing to write awaited nothing: yield, so that a
            # run of them (a flood of node events) never holds the loop.
            await asyncio.sleep(0)

    async def _reconcile(self, reconciler: Reconciler[K], key: K) -> Result:
        try:
            return await reconciler.reconcile(key, Turn(key, self._pace, self._damping))
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and _cancelled():
                raise
            return self._raised(key, exc)

    def _raised(self, key: K, exc: BaseException) -> Failed:
        """A bug, or a failure unforeseen: logged with its trace, retried like any failure."""
        log.error("reconcile failed", exc_info=exc, extra={"queue": self.name, "key": str(key)})
        return Failed(None, Sent(0, f"{type(exc).__name__}: {exc}"))

    # ----- how a reconcile ended --------------------------------------------------------

    def _ended(self, key: K, result: Result) -> Report:
        if isinstance(result, Done):
            failures = self._backoff.forget(key)
            if result.write is not None:
                self._damping.succeeded(key, result.write.content, failures)
            ended = self._refusal.accepted(key)
            if ended is not None:
                self._release(*ended)
            return Report(result)
        if isinstance(result, Unchanged):
            self._backoff.forget(key)  # nothing is wrong any more
            self._damping.forget(key)
            probe = self._refusal.skipped(key)
            if probe is not None:
                self._enqueue(probe)
            return Report(result)
        if isinstance(result, Retry):
            delay = result.after
            if delay is None:
                delay = self._backoff.delay(max(1, self._backoff.failures(key)))
            self._delay(key, delay, backoff=not result.early)
            return Report(result, retry_in=delay)
        return self._failed(key, result)

    def _failed(self, key: K, result: Failed) -> Report:
        sent = result.sent
        delay = self._backoff.when(key, sent.retry_after)
        if sent.status == 429 and sent.retry_after is not None:
            # The API server asks the client to slow down, not just this request.
            self.limiter.pause(sent.retry_after, cap=self.options.retry_max)
        refusal = ("forbidden" if sent.status == 403 else "rejected") if result.refused else ""
        if refusal and not self._refusal.alone(key):
            starting = not self._refusal.active
            probe = self._refusal.refused(key)
            if probe is not None:  # never sooner than the probe's own backoff
                probe = probe[0], max(probe[1], self._backoff.delay(self._backoff.failures(probe[0])))
                self._delay(*probe)
            failure = refusal if starting and self._backoff.say(key) else ""
            return Report(result, failure=failure, retry_in=probe[1] if probe and probe[0] == key else None)
        # A failure, or a refusal of this key alone (extender.leader.refusal): its own
        # backoff, said once per failing streak, holding no other key.
        self._delay(key, delay)
        failure = ""
        if (refusal or self._backoff.failures(key) >= self.options.max_attempts) and self._backoff.say(key):
            failure = refusal or "retries_exhausted"
        return Report(result, failure=failure, retry_in=delay)

    def _release(self, keys: list[K], lasted: float) -> None:
        log.info(
            "writes accepted again after a refusal",
            extra={"queue": self.name, "released": len(keys), "refusedFor": round(lasted, 3)},
        )
        for key in keys:
            failures = self._backoff.failures(key)
            if failures:
                self._delay(key, self._backoff.delay(failures))
            else:
                self._enqueue(key)

    # ----- bookkeeping ----------------------------------------------------------------

    def _enqueue(self, key: K, *, first: bool = False) -> None:
        if key in self._processing:
            self._dirty[key] = self._dirty.get(key, False) or first
        elif key not in self._waiting:
            self._waiting[key] = None
            if first:
                self._waiting.move_to_end(key, last=False)
            self._ready.set()

    def _delay(self, key: K, delay: float, *, backoff: bool = True) -> None:
        previous = self._delayed.pop(key, None)
        if previous is not None:
            previous[0].cancel()
        self._waiting.pop(key, None)

        def due_again() -> None:
            self._delayed.pop(key, None)
            self._enqueue(key)

        handle = asyncio.get_running_loop().call_later(delay, due_again)
        self._delayed[key] = (handle, backoff)
