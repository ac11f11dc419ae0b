"""The leader's write queue: rate limit, retries, one pending write per key, hand-back.

The mechanics are driven with a substituted clock and sleep and a handler that records
what the queue told it; the requeuer's tests (tests/requeue) run the same queue against
the test API server.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import pytest

from extender.leader.writes import (
    Outcome,
    Sent,
    TokenBucket,
    WriteOptions,
    WriteQueue,
    retry_delay,
    write_outcome,
)


def test_token_bucket_allows_a_burst_then_the_rate_each_caller_its_own_slot() -> None:
    """golang.org/x/time/rate's Reserve, which client-go's limiter waits on: callers
    waiting together get successive slots, not one shared wake-up."""
    bucket = TokenBucket(rate=10.0, burst=2, now=0.0)
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.0) == 0.0
    # Two more callers at once: one token in 0.1 s, the next in 0.2 s.
    assert bucket.take(0.0) == pytest.approx(0.1)
    assert bucket.take(0.0) == pytest.approx(0.2)
    # 0.15 s later a fifth caller waits behind the two slots still reserved.
    assert bucket.take(0.15) == pytest.approx(0.15)
    # Idle time refills up to the burst, not beyond.
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.1)]
    with pytest.raises(ValueError):
        TokenBucket(rate=0.0, burst=1, now=0.0)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.DONE),
        (404, Outcome.GONE),
        (409, Outcome.RETRY),
        (429, Outcome.RETRY),
        (500, Outcome.RETRY),
        (503, Outcome.RETRY),
        (400, Outcome.FAIL),
        (403, Outcome.FAIL),
        (415, Outcome.FAIL),
        (422, Outcome.FAIL),
        (0, Outcome.RETRY),  # no answer: a connection error or a timeout
    ],
)
def test_write_outcome(status: int, outcome: Outcome) -> None:
    assert write_outcome(status) is outcome


def test_retry_delay_doubles_up_to_the_cap_and_honours_retry_after() -> None:
    delays = [retry_delay(n, initial=0.5, maximum=4.0) for n in range(1, 7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert retry_delay(1, initial=0.5, maximum=30.0, retry_after=3.0) == 3.0
    assert retry_delay(5, initial=0.5, maximum=30.0, retry_after=3.0) == 8.0
    assert retry_delay(1, initial=0.5, maximum=30.0, retry_after=600.0) == 30.0


# --- the queue ------------------------------------------------------------------------


@dataclass
class Recorder:
    """A handler whose writes answer from a script, recording every call."""

    answers: dict[str, list[Sent]] = field(default_factory=dict)
    skip: dict[str, str] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    settled: list[tuple[str, str, str]] = field(default_factory=list)
    retried: list[tuple[str, float]] = field(default_factory=list)
    block: asyncio.Event | None = None

    def key(self, item: str) -> str:
        return item.split("@")[0]

    def due(self, item: str) -> str | None:
        return self.skip.get(item)

    def content(self, item: str) -> str:
        # "key@version": each version says something new; "key" alone, always the same.
        return item

    async def send(self, item: str) -> Sent:
        self.sent.append(item)
        if self.block is not None:
            await self.block.wait()
        script = self.answers.get(item)
        return script.pop(0) if script else Sent(200)

    def settle(self, item: str, outcome: str, *, reason: str = "", sent: Sent | None = None) -> None:
        self.settled.append((item, outcome, reason))

    def retrying(self, item: str, sent: Sent, delay: float) -> None:
        self.retried.append((item, delay))


class Clock:
    """Time that moves only when the queue sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


FAST = WriteOptions(rate=1000.0, burst=100, max_attempts=3, retry_initial=0.001, retry_max=0.004)


async def drained(queue: WriteQueue[str]) -> None:
    for _ in range(2000):
        if not queue.busy:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the queue never emptied")


async def running(queue: WriteQueue[str]) -> asyncio.Task[None]:
    task = asyncio.create_task(queue.run())
    await asyncio.sleep(0)
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_newer_write_supersedes_the_waiting_one_and_keeps_its_place() -> None:
    handler, clock = Recorder(), Clock()
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)
    queue.put("a@1")
    queue.put("b@1")
    queue.put("a@2")
    assert len(queue) == 2
    task = await running(queue)
    await drained(queue)
    await stopped(task)
    assert handler.sent == ["a@2", "b@1"]  # a's place in line, a's newest write
    assert handler.settled == [("a@1", "superseded", ""), ("a@2", "sent", ""), ("b@1", "sent", "")]


@pytest.mark.parametrize(
    ("answers", "settled", "retries"),
    [
        ([Sent(409), Sent(200)], [("x", "sent", "")], 1),
        ([Sent(0, "timeout"), Sent(503), Sent(200)], [("x", "sent", "")], 2),
        ([Sent(404)], [("x", "deleted", "")], 0),
        # Refused: said once, then tried again after a backoff (the writers are
        # level-triggered: what is still wrong is come back to), here with success.
        ([Sent(403, "forbidden")], [("x", "failed", "forbidden"), ("x", "sent", "")], 1),
        ([Sent(422, "invalid")], [("x", "failed", "rejected"), ("x", "sent", "")], 1),
        ([Sent(422), Sent(422), Sent(403)], [("x", "failed", "rejected"), ("x", "sent", "")], 3),
        # Retryable, max_attempts times: said once, and still retried.
        ([Sent(500), Sent(500), Sent(500)], [("x", "failed", "retries_exhausted"), ("x", "sent", "")], 3),
    ],
)
async def test_each_answer_ends_the_write_as_kubernetes_means_it(
    answers: list[Sent], settled: list[tuple[str, str, str]], retries: int
) -> None:
    handler, clock = Recorder(answers={"x": list(answers)}), Clock()
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)
    task = await running(queue)
    queue.put("x")
    await drained(queue)
    await stopped(task)
    assert handler.settled == settled
    assert len(handler.retried) == retries
    assert handler.sent == ["x"] * (retries + 1)


async def test_a_refused_write_whose_object_changed_is_a_skip_not_a_failure() -> None:
    handler, clock = Recorder(answers={"x": [Sent(422, "uid mismatch")]}), Clock()
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)

    async def send(item: str) -> Sent:
        handler.skip[item] = "recreated"  # the refusal and the change arrive together
        return Sent(422, "uid mismatch")

    handler.send = send  # type: ignore[method-assign]
    task = await running(queue)
    queue.put("x")
    await drained(queue)
    await stopped(task)
    assert handler.settled == [("x", "recreated", "")]


async def test_a_write_no_longer_due_is_skipped_unsent() -> None:
    handler, clock = Recorder(skip={"x": "not_pending"}), Clock()
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)
    task = await running(queue)
    queue.put("x")
    await drained(queue)
    await stopped(task)
    assert (handler.sent, handler.settled) == ([], [("x", "not_pending", "")])


async def test_retry_after_of_a_429_pauses_every_write() -> None:
    clock = Clock()
    handler = Recorder(answers={"x": [Sent(429, "slow down", retry_after=0.004)]})
    sent_at: list[tuple[str, float]] = []
    send = handler.send

    async def timed_send(item: str) -> Sent:
        sent_at.append((item, clock.now))
        return await send(item)

    handler.send = timed_send  # type: ignore[method-assign]
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)
    queue.put("x")
    queue.put("y")
    task = await running(queue)
    await drained(queue)
    await stopped(task)
    # y, next in line, waited out the pause the API server asked of x.
    assert sent_at[0] == ("x", 0.0)
    assert sent_at[1][0] == "y" and sent_at[1][1] >= 0.004 - 1e-9
    assert sorted(handler.settled) == [("x", "sent", ""), ("y", "sent", "")]


async def test_the_rate_limit_spaces_writes_after_the_burst() -> None:
    handler, clock = Recorder(), Clock()
    options = WriteOptions(rate=10.0, burst=2)
    queue: WriteQueue[str] = WriteQueue(handler, options, clock=clock, sleep=clock.sleep)
    for name in "abcd":
        queue.put(name)
    task = await running(queue)
    await drained(queue)
    await stopped(task)
    assert handler.sent == ["a", "b", "c", "d"]
    assert clock.now == pytest.approx(0.2)  # two at once, then one per 0.1 s


async def test_a_write_cut_short_by_the_end_of_a_term_goes_back_to_the_front() -> None:
    handler, clock = Recorder(block=asyncio.Event()), Clock()
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)
    queue.put("a")
    queue.put("b")
    task = await running(queue)
    for _ in range(100):
        if handler.sent:
            break
        await asyncio.sleep(0)
    await stopped(task)  # the term ends while "a" is in flight
    assert (len(queue), queue.in_flight, handler.settled) == (2, 0, [])
    assert handler.block is not None
    handler.block.set()
    task = await running(queue)  # the next term
    await drained(queue)
    await stopped(task)
    assert handler.sent == ["a", "a", "b"]
    assert handler.settled == [("a", "sent", ""), ("b", "sent", "")]


async def test_writes_in_flight_are_bounded_by_the_concurrency() -> None:
    clock = Clock()
    release = asyncio.Event()
    in_flight, most = 0, 0

    class Slow(Recorder):
        async def send(self, item: str) -> Sent:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await release.wait()
            in_flight -= 1
            return Sent(200)

    handler = Slow()
    options = WriteOptions(rate=1000.0, burst=100, concurrency=3)
    queue: WriteQueue[str] = WriteQueue(handler, options, clock=clock, sleep=clock.sleep)
    for i in range(10):
        queue.put(f"n{i}")
    task = await running(queue)
    for _ in range(100):
        await asyncio.sleep(0)
    assert (most, queue.in_flight) == (3, 3)
    release.set()
    await drained(queue)
    await stopped(task)
    assert most == 3 and len(handler.settled) == 10


async def test_one_write_per_key_in_flight_whatever_the_concurrency() -> None:
    """A key put again while its write is in flight waits for that write to end, then
    takes its turn (client-go's workqueue keeps a processing set for this): ten
    workers never send for one node twice at once."""
    clock = Clock()
    release = asyncio.Event()
    at_once: dict[str, int] = {}
    most: dict[str, int] = {}

    class Slow(Recorder):
        async def send(self, item: str) -> Sent:
            key = self.key(item)
            self.sent.append(item)
            at_once[key] = at_once.get(key, 0) + 1
            most[key] = max(most.get(key, 0), at_once[key])
            await release.wait()
            at_once[key] -= 1
            return Sent(200)

    handler = Slow()
    options = WriteOptions(rate=1000.0, burst=100, concurrency=10, retry_initial=0.001, retry_max=0.002)
    queue: WriteQueue[str] = WriteQueue(handler, options, clock=clock, sleep=clock.sleep)
    task = await running(queue)
    queue.put("n@1")
    for _ in range(20):
        await asyncio.sleep(0)
    assert (handler.sent, queue.in_flight) == (["n@1"], 1)
    # Node events arrive while the write is in flight: one next write, the newest.
    queue.put("n@2")
    queue.put("n@3")
    for _ in range(20):
        await asyncio.sleep(0)
    assert (handler.sent, queue.in_flight, len(queue)) == (["n@1"], 1, 1)
    assert queue.get("n") == "n@3"
    release.set()
    await drained(queue)
    await stopped(task)
    assert handler.sent == ["n@1", "n@3"]
    assert most == {"n": 1}
    assert handler.settled == [("n@2", "superseded", ""), ("n@1", "sent", ""), ("n@3", "sent", "")]


async def test_a_refused_key_waits_out_its_backoff_whatever_the_events() -> None:
    """The retry storm the queue prevents: three writes refused by admission, twenty
    events about each of their objects while refused. Every write is said failed once
    and sent again only as its backoff allows, never once per event."""
    clock = Clock()

    class Refusing(Recorder):
        async def send(self, item: str) -> Sent:
            self.sent.append(item)
            return Sent(422, "denied by policy")

    handler = Refusing()
    options = WriteOptions(rate=1000.0, burst=100, concurrency=3, retry_initial=0.05, retry_max=0.2)
    queue: WriteQueue[str] = WriteQueue(handler, options, clock=clock, sleep=clock.sleep)
    task = await running(queue)
    for key in "abc":
        queue.put(f"{key}@0")
    for n in range(1, 21):
        await asyncio.sleep(0.005)  # 0.1 s of events in all, while the backoff runs
        for key in "abc":
            queue.put(f"{key}@{n}")
    await asyncio.sleep(0.01)
    await stopped(task)
    queue.close()
    sends = {key: sum(1 for s in handler.sent if s.startswith(key)) for key in "abc"}
    # 0.11 s with delays of 0.05 then 0.1: at most two sends of each in that time.
    assert all(1 <= n <= 2 for n in sends.values()), sends
    failed = [s for s in handler.settled if s[1] == "failed"]
    assert sorted(failed) == [(f"{key}@0", "failed", "rejected") for key in "abc"]
    # The events replaced the write waiting out its delay; only the newest is left.
    assert {queue.get(key) for key in "ab"} <= {None, "a@20", "b@20"}


async def test_a_refused_write_no_longer_due_at_its_retry_is_settled_unsent() -> None:
    handler, clock = Recorder(answers={"x": [Sent(403, "forbidden")]}), Clock()
    queue: WriteQueue[str] = WriteQueue(handler, FAST, clock=clock, sleep=clock.sleep)
    task = await running(queue)
    queue.put("x")
    for _ in range(100):
        if handler.settled:
            break
        await asyncio.sleep(0)
    handler.skip["x"] = "in_sync"  # someone else fixed it meanwhile
    await drained(queue)
    await stopped(task)
    assert handler.sent == ["x"]
    assert handler.settled == [("x", "failed", "forbidden"), ("x", "in_sync", "")]


async def test_a_write_of_something_new_soon_after_a_success_is_not_damped() -> None:
    """A caBundle that adds a new CA, then drops the old one a moment later; a label a
    second class edit moves back: each write says something its key's last success did
    not, nobody undid anything, and each goes out at once. Only a return to what the
    last success said is damped (test_a_write_undone_again_and_again_is_damped_not_looped)."""
    handler = Recorder()
    loop = asyncio.get_running_loop()
    options = WriteOptions(rate=1000.0, burst=100, retry_initial=0.5, retry_max=5.0)
    queue: WriteQueue[str] = WriteQueue(handler, options, clock=loop.time, sleep=asyncio.sleep)
    task = await running(queue)
    started = loop.time()
    for item in ("bundle@old+new", "bundle@new", "bundle@old+new", "bundle@new"):
        count = len(handler.sent)
        queue.put(item)
        while len(handler.sent) == count:
            await asyncio.sleep(0.001)
    # The same content as the last success, again: undone, so it waits retry_initial.
    queue.put("bundle@new")
    await asyncio.sleep(0.1)
    await stopped(task)
    assert handler.sent == ["bundle@old+new", "bundle@new", "bundle@old+new", "bundle@new"]
    assert loop.time() - started < 0.5
    assert queue.has("bundle")


async def test_a_write_undone_again_and_again_is_damped_not_looped() -> None:
    """A GitOps tool reverting what the keeper writes: each success undone at once is
    needed again, and the key backs off as if it had failed, up to retry_max."""
    handler = Recorder()
    sent_at: list[float] = []
    loop = asyncio.get_running_loop()
    send = handler.send

    async def timed(item: str) -> Sent:
        sent_at.append(loop.time())
        return await send(item)

    handler.send = timed  # type: ignore[method-assign]
    options = WriteOptions(rate=1000.0, burst=100, retry_initial=0.02, retry_max=0.16)
    queue: WriteQueue[str] = WriteQueue(handler, options, clock=loop.time, sleep=asyncio.sleep)
    task = await running(queue)
    for _ in range(6):
        count = len(handler.sent)
        queue.put("bundle")  # reverted: needed again
        while len(handler.sent) == count:
            await asyncio.sleep(0.001)
    await stopped(task)
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(sent_at)]
    # 0.02, 0.04, 0.08, then the cap: never a hot loop.
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04 and gaps[2] >= 0.08 and all(g >= 0.16 for g in gaps[3:]), gaps
    # A key left alone for retry_max is at rest again: written without a delay (a
    # damped one would wait the cap).
    await asyncio.sleep(0.17)
    task = await running(queue)
    before = loop.time()
    queue.put("bundle")
    while len(sent_at) == 6:
        await asyncio.sleep(0.001)
    await stopped(task)
    assert sent_at[-1] - before < 0.16
