"""What the queue promises every actor, on a loop whose clock moves only when nothing is
ready (``tests.support.virtual_time``): a simulated minute takes as long as its
callbacks. Each test here failed on the queue before it counted attempts itself,
contained ``report``, ran the pass on its own, shared the 429 pause and kept
``busy`` to what a drain can deliver."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

import pytest

from extender.leader.controller import Controller
from extender.leader.limits import WriteLimiter
from extender.leader.results import Failed, Report, Result, Retry, Sent, Unchanged, Write
from extender.leader.workqueue import WorkQueue, WriteOptions
from extender.leader.writes import Turn
from tests.leader.test_workqueue import Desired
from tests.support.virtual_time import run


class Keys:
    """A reconciler whose pass adds ``keys`` and whose reconcile and report are given."""

    def __init__(
        self,
        keys: list[str],
        reconcile: Callable[[str, Turn], Awaitable[Result]],
        report: Callable[[str, Report], None] = lambda key, report: None,
    ) -> None:
        self.keys, self._reconcile, self._report = keys, reconcile, report
        self.queue: WorkQueue[str] | None = None

    async def resync(self) -> None:
        assert self.queue is not None
        for key in self.keys:
            self.queue.add(key)

    async def reconcile(self, key: str, turn: Turn) -> Result:
        return await self._reconcile(key, turn)

    def report(self, key: str, report: Report) -> None:
        self._report(key, report)


async def for_a_while(queue: WorkQueue[str], reconciler: Keys | Desired, seconds: float) -> object:
    """Run one term for ``seconds`` of the loop's time; what the term ended with."""
    reconciler.queue = queue
    task = asyncio.create_task(queue.run(reconciler))  # type: ignore[arg-type]
    await asyncio.sleep(seconds)
    task.cancel()
    return (await asyncio.gather(task, return_exceptions=True))[0]


def _queue(**options: float) -> WorkQueue[str]:
    loop = asyncio.get_running_loop()
    return WorkQueue(WriteOptions(**options), clock=loop.time)  # type: ignore[arg-type]


def test_a_failed_result_returned_directly_is_counted_backed_off_and_said() -> None:
    """The queue counts the attempt, not the path that made it: a reconcile that
    returns ``Failed`` itself (a read that failed) backs off doubling and is said at
    ``max_attempts`` (it was 40 tries in 20 s at ``retry_initial``, never said)."""
    reports: list[Report] = []

    async def failing(key: str, turn: Turn) -> Result:
        return Failed(None, Sent(500, "boom"))

    async def main() -> None:
        queue = _queue(max_attempts=3, retry_initial=0.5, retry_max=30.0)
        await for_a_while(queue, Keys(["x"], failing, lambda key, r: reports.append(r)), 20.0)

    run(main())
    assert [r.retry_in for r in reports] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert [r.failure for r in reports] == ["", "", "retries_exhausted", "", "", ""]


def test_a_plan_that_raises_after_a_refused_send_is_one_attempt() -> None:
    """It was counted twice (once at the send, once for the raise): a 200 s retry
    instead of 100 s."""
    reports: list[Report] = []
    plans = 0

    def plan() -> Write | Unchanged:
        nonlocal plans
        plans += 1
        if plans == 2:
            raise RuntimeError("plan broke")
        return Write("1", partial(asyncio.sleep, 0, Sent(403, "no")))

    async def reconcile(key: str, turn: Turn) -> Result:
        return await turn.write(plan)

    async def main() -> None:
        queue = _queue(retry_initial=100.0, retry_max=1000.0)
        await for_a_while(queue, Keys(["x"], reconcile, lambda key, r: reports.append(r)), 1.0)

    run(main())
    assert [r.retry_in for r in reports] == [100.0]


def test_a_report_that_raises_costs_only_that_report(caplog: pytest.LogCaptureFixture) -> None:
    """It ended the term for every key (b and c were dropped, and the runner restarted
    the actor after a backoff)."""
    desired = Desired(want={"a": "1", "b": "1", "c": "1"}, initial=["a", "b", "c"])
    report = desired.report

    def broken(key: str, end: Report) -> None:
        if key == "a":
            raise RuntimeError("report broke")
        report(key, end)

    desired.report = broken  # type: ignore[method-assign]

    async def main() -> object:
        return await for_a_while(_queue(), desired, 5.0)

    assert isinstance(run(main()), asyncio.CancelledError)  # ended by its cancel alone
    assert desired.sent == ["a@1", "b@1", "c@1"]
    assert desired.reports == [("b", "sent", ""), ("c", "sent", "")]
    (logged,) = [r for r in caplog.records if r.getMessage() == "report failed"]
    assert logged.exc_info is not None and "report broke" in str(logged.exc_info[1])


def test_a_cancelled_error_raised_by_a_reconcile_is_a_failure_of_its_key() -> None:
    """Not a cancellation of the term: the key is retried, the others go on (it ended
    the term: nothing was written)."""
    desired = Desired(want={"x": "1", "y": "1"}, initial=["x", "y"])
    send = desired.send
    raised = False

    async def raising(key: str, content: str) -> Sent:
        nonlocal raised
        if key == "x" and not raised:
            raised = True
            raise asyncio.CancelledError()
        return await send(key, content)

    desired.send = raising  # type: ignore[method-assign]

    async def main() -> object:
        return await for_a_while(_queue(retry_initial=0.5), desired, 5.0)

    assert isinstance(run(main()), asyncio.CancelledError)
    assert desired.sent == ["y@1", "x@1"]
    assert desired.reports == [("x", "failed", ""), ("y", "sent", ""), ("x", "sent", "")]


def test_the_pass_never_waits_behind_the_writes() -> None:
    """Twenty writes at 10 a second in line, then a change asks for a pass within
    0.05 s: it runs then (it ran after 1.9 s, behind the writes)."""
    passes: list[float] = []
    desired = Desired(want={f"k{i}": "1" for i in range(20)}, initial=[f"k{i}" for i in range(20)])
    resync = desired.resync

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def timed() -> None:
            passes.append(loop.time())
            await resync()
            desired.initial = []  # the later passes find nothing out of line

        desired.resync = timed  # type: ignore[method-assign]
        queue = WorkQueue(WriteOptions(rate=10.0, burst=1), clock=loop.time)
        desired.queue = queue
        task = asyncio.create_task(queue.run(desired))
        await asyncio.sleep(0.1)
        queue.resync(0.05)
        await asyncio.sleep(5.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(main())
    assert passes == [0.0, pytest.approx(0.15)]
    assert len(desired.sent) == 20


def test_add_cuts_an_early_retry_short_but_never_a_backoff() -> None:
    """client-go's ``Add`` of a key waiting on ``AddAfter`` (it waited the whole
    delay): a key that asked to be retried early (``Retry(early=True)``, a wait for its
    object to change) is reconciled at once when added meanwhile; a key in backoff is
    not written once per event (module doc)."""
    at: list[tuple[str, float]] = []
    waited: set[str] = set()

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def reconcile(key: str, turn: Turn) -> Result:
            at.append((key, loop.time()))
            if key == "k" and key not in waited:
                waited.add(key)
                return Retry("waiting", after=10.0, early=True)
            if key == "f" and len([k for k, _ in at if k == "f"]) == 1:
                return Failed(None, Sent(500, "boom"))
            return Unchanged("in_sync")

        queue = _queue(retry_initial=10.0, retry_max=10.0)
        keys = Keys([], reconcile)
        keys.queue = queue
        task = asyncio.create_task(queue.run(keys))
        await asyncio.sleep(0)
        queue.add("k")
        queue.add("f")
        await asyncio.sleep(1.0)
        queue.add("k")  # its object changed: wanted now
        queue.add("f")  # an event while f backs off
        await asyncio.sleep(20.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(main())
    assert at == [("k", 0.0), ("f", 0.0), ("k", 1.0), ("f", 10.0)]


def test_a_429_pauses_every_actor_over_the_client() -> None:
    """One limiter per API client: the 429 one actor hears holds back another's write
    (each queue had its own pause)."""
    at: list[tuple[str, float]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        limiter = WriteLimiter(clock=loop.time)
        first = WorkQueue(WriteOptions(), clock=loop.time, limiter=limiter, name="first")
        second = WorkQueue(WriteOptions(), clock=loop.time, limiter=limiter, name="second")

        def writer(name: str, status: int) -> Keys:
            async def send() -> Sent:
                at.append((name, loop.time()))
                if status == 429 and len(at) == 1:
                    return Sent(429, retry_after=3.0)
                return Sent(200)

            async def reconcile(key: str, turn: Turn) -> Result:
                return await turn.write(lambda: Write("1", send))

            return Keys([], reconcile)

        one, other = writer("first", 429), writer("second", 200)
        one.queue, other.queue = first, second
        tasks = [asyncio.create_task(first.run(one)), asyncio.create_task(second.run(other))]
        await asyncio.sleep(0)
        first.add("x")
        await asyncio.sleep(0.5)
        second.add("y")
        await asyncio.sleep(5.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(main())
    assert at == [("first", 0.0), ("first", pytest.approx(3.0)), ("second", pytest.approx(3.0))]


class Marking(Controller[str]):
    """A controller whose one key is refused (backing off) and whose hooks record."""

    name = "marking"

    def __init__(self, options: WriteOptions, clock: Callable[[], float]) -> None:
        super().__init__(options, clock=clock)
        self.seen: list[str] = []

    def starting(self) -> None:
        self.seen.append("starting")

    def stopped(self) -> None:
        self.seen.append("stopped")

    async def resync(self) -> None:
        self.queue.add("x")

    async def reconcile(self, key: str, turn: Turn) -> Result:
        return await turn.write(lambda: Write("v", partial(asyncio.sleep, 0, Sent(500))))


def test_a_drain_does_not_wait_out_a_backoff_and_the_term_says_it_stopped() -> None:
    """``busy`` is "waiting or being reconciled": a key in a 30 s backoff owes nothing
    a drain could deliver (the drain waited its whole timeout). ``stopped`` mirrors
    ``starting``."""

    async def main() -> tuple[float, list[str]]:
        loop = asyncio.get_running_loop()
        actor = Marking(WriteOptions(retry_initial=30.0, retry_max=300.0, drain_timeout=1.0), loop.time)
        task = asyncio.create_task(actor.lead())
        await asyncio.sleep(0.1)
        assert actor.queue.has("x") and not actor.busy
        started = loop.time()
        await actor.drain()
        took = loop.time() - started
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return took, actor.seen

    took, seen = run(main())
    assert took == 0.0
    assert seen == ["starting", "stopped"]


def test_a_pass_that_raises_is_retried_with_backoff(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="extender.leader.workqueue")
    passes: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        class Broken(Keys):
            async def resync(self) -> None:
                passes.append(loop.time())
                if len(passes) < 3:
                    raise asyncio.CancelledError()  # raised, not a cancellation
                await super().resync()

        async def nothing(key: str, turn: Turn) -> Result:
            return Unchanged("in_sync")

        await for_a_while(_queue(retry_initial=1.0), Broken(["x"], nothing), 10.0)

    run(main())
    assert passes == [0.0, 1.0, 3.0]
    assert [r.getMessage() for r in caplog.records] == ["resync failed", "resync failed"]
