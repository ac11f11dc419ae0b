"""The leader's queue of keys: one reconcile per key, rate limit, retries, the term.

The mechanics are driven with a substituted clock and sleep and a reconciler over a
table of what each key's object should say (``Desired``), which records what it sent
and what the queue reported; the actors' tests (tests/labeller, tests/requeue,
tests/certificates) run the same queue against the test API server.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from functools import partial

import pytest

from extender.leader.backoff import retry_delay
from extender.leader.limits import TokenBucket
from extender.leader.results import Done, Failed, Report, Result, Retry, Sent, Unchanged, Write
from extender.leader.workqueue import WorkQueue, WriteOptions
from extender.leader.writes import Turn


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
    ("status", "refused"),
    [
        (409, False),
        (429, False),
        (500, False),
        (503, False),
        (0, False),
        (400, True),
        (403, True),
        (415, True),
        (422, True),
    ],
)
def test_a_failure_is_a_refusal_for_4xx_but_conflicts_and_throttling(status: int, refused: bool) -> None:
    assert Failed(None, Sent(status)).refused is refused


def test_retry_delay_doubles_up_to_the_cap_and_honours_retry_after() -> None:
    delays = [retry_delay(n, initial=0.5, maximum=4.0) for n in range(1, 7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert retry_delay(1, initial=0.5, maximum=30.0, retry_after=3.0) == 3.0
    assert retry_delay(5, initial=0.5, maximum=30.0, retry_after=3.0) == 8.0
    assert retry_delay(1, initial=0.5, maximum=30.0, retry_after=600.0) == 30.0


# --- the queue ------------------------------------------------------------------------


@dataclass
class Desired:
    """A reconciler over what each key's object should say (``want``; a key without
    an entry is in sync), whose writes answer from a script, recording every write
    sent (``key@content``) and every report (``(key, what, failure)``: what is ``sent``,
    an Unchanged reason, ``retry:<reason>``, or ``failed``)."""

    want: dict[str, str] = field(default_factory=dict)
    answers: dict[str, list[Sent]] = field(default_factory=dict)
    skip: dict[str, str] = field(default_factory=dict)
    initial: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    reports: list[tuple[str, str, str]] = field(default_factory=list)
    block: asyncio.Event | None = None
    # The queue it runs on (``term`` sets it): its pass adds ``initial``.
    queue: WorkQueue[str] | None = None

    async def resync(self) -> None:
        assert self.queue is not None
        for key in self.initial:
            self.queue.add(key)

    async def reconcile(self, key: str, turn: Turn) -> Result:
        return await turn.write(partial(self.plan, key))

    def plan(self, key: str) -> Write | Unchanged:
        if key in self.skip:
            return Unchanged(self.skip[key])
        content = self.want.get(key)
        if content is None:
            return Unchanged("in_sync")
        return Write(content, partial(self.send, key, content))

    async def send(self, key: str, content: str) -> Sent:
        self.sent.append(f"{key}@{content}")
        if self.block is not None:
            await self.block.wait()
        script = self.answers.get(key)
        return script.pop(0) if script else Sent(200)

    def report(self, key: str, report: Report) -> None:
        result = report.result
        if isinstance(result, Done):
            what = "sent"
        elif isinstance(result, Unchanged):
            what = result.reason
        elif isinstance(result, Retry):
            what = f"retry:{result.reason}"
        else:
            what = "failed"
        self.reports.append((key, what, report.failure))

    def ends(self) -> list[tuple[str, str, str]]:
        """The reports but the failures said again (a streak's later failures)."""
        return [r for r in self.reports if r[1] != "failed" or r[2]]

    def failures(self) -> int:
        return sum(1 for r in self.reports if r[1] == "failed")


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


async def drained(queue: WorkQueue[str]) -> None:
    """Until nothing is queued at all: waiting, in flight, in backoff or held."""
    for _ in range(2000):
        if not queue.busy and len(queue) == 0:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the queue never emptied")


async def term(queue: WorkQueue[str], reconciler: Desired) -> asyncio.Task[None]:
    reconciler.queue = queue
    task = asyncio.create_task(queue.run(reconciler))
    for _ in range(3):  # the term's first pass has run
        await asyncio.sleep(0)
    return task


async def ended(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _queue(options: WriteOptions = FAST, clock: Clock | None = None) -> tuple[WorkQueue[str], Clock]:
    clock = clock or Clock()
    return WorkQueue(options, clock=clock, sleep=clock.sleep), clock


async def test_a_key_added_again_while_waiting_keeps_its_place_and_writes_the_newest() -> None:
    desired = Desired(want={"a": "1", "b": "1"})
    queue, _ = _queue()
    task = await term(queue, desired)
    queue.add("a")
    queue.add("b")
    desired.want["a"] = "2"
    queue.add("a")
    assert len(queue) == 2
    await drained(queue)
    await ended(task)
    assert desired.sent == ["a@2", "b@1"]  # a's place in line, what a says now
    assert desired.reports == [("a", "sent", ""), ("b", "sent", "")]


@pytest.mark.parametrize(
    ("answers", "ends", "failures"),
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
async def test_each_answer_ends_the_reconcile_as_kubernetes_means_it(
    answers: list[Sent], ends: list[tuple[str, str, str]], failures: int
) -> None:
    desired = Desired(want={"x": "1"}, answers={"x": list(answers)})
    queue, _ = _queue()
    task = await term(queue, desired)
    queue.add("x")
    await drained(queue)
    await ended(task)
    assert desired.ends() == ends
    assert desired.failures() == failures
    assert desired.sent == ["x@1"] * (failures + 1)


async def test_a_refused_write_whose_object_changed_is_nothing_to_do_not_a_failure() -> None:
    desired = Desired(want={"x": "1"})
    queue, _ = _queue()

    async def send(key: str, content: str) -> Sent:
        desired.skip[key] = "recreated"  # the refusal and the change arrive together
        return Sent(422, "uid mismatch")

    desired.send = send  # type: ignore[method-assign]
    task = await term(queue, desired)
    queue.add("x")
    await drained(queue)
    await ended(task)
    assert desired.reports == [("x", "recreated", "")]


async def test_a_key_in_sync_is_nothing_to_do_unsent() -> None:
    desired = Desired(skip={"x": "not_pending"})
    queue, clock = _queue(WriteOptions(rate=1.0, burst=1))
    task = await term(queue, desired)
    for key in ("x", "y", "z"):
        queue.add(key)
    await drained(queue)
    await ended(task)
    assert (desired.sent, desired.reports) == (
        [],
        [("x", "not_pending", ""), ("y", "in_sync", ""), ("z", "in_sync", "")],
    )
    assert clock.now == 0.0  # a key with nothing to write takes no token


async def test_retry_after_of_a_429_pauses_every_write() -> None:
    clock = Clock()
    desired = Desired(want={"x": "1", "y": "1"}, answers={"x": [Sent(429, "slow down", retry_after=0.004)]})
    sent_at: list[tuple[str, float]] = []
    send = desired.send

    async def timed_send(key: str, content: str) -> Sent:
        sent_at.append((key, clock.now))
        return await send(key, content)

    desired.send = timed_send  # type: ignore[method-assign]
    queue, _ = _queue(clock=clock)
    task = await term(queue, desired)
    queue.add("x")
    queue.add("y")
    await drained(queue)
    await ended(task)
    # y, next in line, waited out the pause the API server asked of x.
    assert sent_at[0] == ("x", 0.0)
    assert sent_at[1][0] == "y" and sent_at[1][1] >= 0.004 - 1e-9
    assert sorted(r for r in desired.reports if r[1] == "sent") == [("x", "sent", ""), ("y", "sent", "")]


async def test_the_rate_limit_spaces_writes_after_the_burst() -> None:
    desired = Desired(want=dict.fromkeys("abcd", "1"))
    queue, clock = _queue(WriteOptions(rate=10.0, burst=2))
    task = await term(queue, desired)
    for name in "abcd":
        queue.add(name)
    await drained(queue)
    await ended(task)
    assert desired.sent == ["a@1", "b@1", "c@1", "d@1"]
    assert clock.now == pytest.approx(0.2)  # two at once, then one per 0.1 s


async def test_the_term_starts_with_every_key_and_ends_with_none() -> None:
    """The queue owns the term: what the reconciler's pass names is added when it
    starts; when it ends (here with a write in flight, a key waiting and one out a
    backoff) nothing is left, and the next term starts again from what is (a key now in
    sync is not written)."""
    desired = Desired(
        want={"a": "1", "b": "1", "c": "1"}, answers={"c": [Sent(500, "no")]}, initial=["c", "a", "b"]
    )
    queue, _ = _queue(WriteOptions(rate=1000.0, burst=100, retry_initial=10.0, retry_max=10.0))
    release = asyncio.Event()
    send = desired.send

    async def slow_a(key: str, content: str) -> Sent:
        if key == "a":
            desired.sent.append(f"{key}@{content}")
            await release.wait()
            return Sent(200)
        return await send(key, content)

    desired.send = slow_a  # type: ignore[method-assign]
    task = await term(queue, desired)
    for _ in range(100):
        if "a@1" in desired.sent:
            break
        await asyncio.sleep(0)
    assert desired.sent == ["c@1", "a@1"]
    assert queue.has("c") and queue.has("b") and queue.in_flight == 1
    await ended(task)  # the term ends while "a" is in flight
    assert (len(queue), queue.in_flight, queue.busy, queue.has("c")) == (0, 0, False, False)
    queue.add("b")  # no term: nothing is queued
    assert len(queue) == 0
    release.set()
    desired.want.pop("b")  # fixed meanwhile
    task = await term(queue, desired)  # the next term
    await drained(queue)
    await ended(task)
    assert desired.sent == ["c@1", "a@1", "c@1", "a@1"]
    assert desired.ends()[-3:] == [("c", "sent", ""), ("a", "sent", ""), ("b", "in_sync", "")]


async def test_keys_in_flight_are_bounded_by_the_concurrency() -> None:
    release = asyncio.Event()
    in_flight, most = 0, 0
    desired = Desired(want={f"n{i}": "1" for i in range(10)})

    async def send(key: str, content: str) -> Sent:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1
        return Sent(200)

    desired.send = send  # type: ignore[method-assign]
    queue, _ = _queue(WriteOptions(rate=1000.0, burst=100, concurrency=3))
    task = await term(queue, desired)
    for i in range(10):
        queue.add(f"n{i}")
    for _ in range(100):
        await asyncio.sleep(0)
    assert (most, queue.in_flight) == (3, 3)
    release.set()
    await drained(queue)
    await ended(task)
    assert most == 3 and len(desired.reports) == 10


async def test_one_reconcile_per_key_at_a_time_whatever_the_concurrency() -> None:
    """A key added again while it is being reconciled waits for that reconcile to end,
    then takes its turn (client-go's workqueue keeps a processing set for this): ten
    workers never write one node twice at once."""
    release = asyncio.Event()
    at_once, most = 0, 0
    desired = Desired(want={"n": "1"})

    async def send(key: str, content: str) -> Sent:
        nonlocal at_once, most
        desired.sent.append(f"{key}@{content}")
        at_once += 1
        most = max(most, at_once)
        await release.wait()
        at_once -= 1
        return Sent(200)

    desired.send = send  # type: ignore[method-assign]
    queue, _ = _queue(
        WriteOptions(rate=1000.0, burst=100, concurrency=10, retry_initial=0.001, retry_max=0.002)
    )
    task = await term(queue, desired)
    queue.add("n")
    for _ in range(20):
        await asyncio.sleep(0)
    assert (desired.sent, queue.in_flight) == (["n@1"], 1)
    # Node events arrive while the write is in flight: one more reconcile, of the newest.
    desired.want["n"] = "2"
    queue.add("n")
    desired.want["n"] = "3"
    queue.add("n")
    for _ in range(20):
        await asyncio.sleep(0)
    assert (desired.sent, queue.in_flight, len(queue)) == (["n@1"], 1, 1)
    release.set()
    await drained(queue)
    await ended(task)
    assert desired.sent == ["n@1", "n@3"]
    assert most == 1
    assert desired.reports == [("n", "sent", ""), ("n", "sent", "")]


async def test_a_refused_key_waits_out_its_backoff_whatever_the_events() -> None:
    """The retry storm the queue prevents: three keys refused by admission, twenty
    events about each of their objects while refused. The refusal is said once for the
    actor, and each key is written again only as the probe's turns allow, never once
    per event."""
    desired = Desired(want=dict.fromkeys("abc", "0"))

    async def refusing(key: str, content: str) -> Sent:
        desired.sent.append(f"{key}@{content}")
        return Sent(422, "denied by policy")

    desired.send = refusing  # type: ignore[method-assign]
    options = WriteOptions(rate=1000.0, burst=100, concurrency=3, retry_initial=0.05, retry_max=0.2)
    queue: WorkQueue[str] = WorkQueue(options, clock=asyncio.get_running_loop().time)
    task = await term(queue, desired)
    for key in "abc":
        queue.add(key)
    for n in range(1, 21):
        await asyncio.sleep(0.005)  # 0.1 s of events in all, while the backoff runs
        for key in "abc":
            desired.want[key] = str(n)
            queue.add(key)
    await asyncio.sleep(0.01)
    await ended(task)
    sends = {key: sum(1 for s in desired.sent if s.startswith(key)) for key in "abc"}
    # 0.11 s, the probe's wait 0.05: a refused, then probing once more, then b probing.
    assert sends["a"] >= 1 and all(n <= 2 for n in sends.values()) and sum(sends.values()) <= 4, sends
    said = [r for r in desired.reports if r[2]]
    assert said == [("a", "failed", "rejected")]


async def test_a_refused_key_in_sync_at_its_retry_is_nothing_to_do_unsent() -> None:
    desired = Desired(want={"x": "1"}, answers={"x": [Sent(403, "forbidden")]})
    queue, _ = _queue()
    task = await term(queue, desired)
    queue.add("x")
    for _ in range(100):
        if desired.reports:
            break
        await asyncio.sleep(0)
    desired.skip["x"] = "in_sync"  # someone else fixed it meanwhile
    await drained(queue)
    await ended(task)
    assert desired.sent == ["x@1"]
    assert desired.reports == [("x", "failed", "forbidden"), ("x", "in_sync", "")]


async def test_a_write_of_something_new_soon_after_a_success_is_not_damped() -> None:
    """A caBundle that adds a new CA, then drops the old one a moment later; a label a
    second class edit moves back: each write says something its key's last success did
    not, nobody undid anything, and each goes out at once. Only a return to what the
    last success said is damped (test_a_write_undone_again_and_again_is_damped_not_looped)."""
    desired = Desired()
    loop = asyncio.get_running_loop()
    options = WriteOptions(rate=1000.0, burst=100, retry_initial=0.5, retry_max=5.0)
    queue: WorkQueue[str] = WorkQueue(options, clock=loop.time)
    task = await term(queue, desired)
    started = loop.time()
    for content in ("old+new", "new", "old+new", "new"):
        count = len(desired.sent)
        desired.want["bundle"] = content
        queue.add("bundle")
        while len(desired.sent) == count:
            await asyncio.sleep(0.001)
    # The same content as the last success, again: undone, so it waits retry_initial.
    queue.add("bundle")
    await asyncio.sleep(0.1)
    assert queue.has("bundle")
    await ended(task)
    assert desired.sent == ["bundle@old+new", "bundle@new", "bundle@old+new", "bundle@new"]
    assert loop.time() - started < 0.5
    assert ("bundle", "retry:damped", "") in desired.reports


async def test_a_write_undone_again_and_again_is_damped_not_looped() -> None:
    """A GitOps tool reverting what the keeper writes: each success undone at once is
    needed again, and the key backs off as if it had failed, up to retry_max."""
    desired = Desired(want={"bundle": "ca"})
    sent_at: list[float] = []
    loop = asyncio.get_running_loop()
    send = desired.send

    async def timed(key: str, content: str) -> Sent:
        sent_at.append(loop.time())
        return await send(key, content)

    desired.send = timed  # type: ignore[method-assign]
    options = WriteOptions(rate=1000.0, burst=100, retry_initial=0.02, retry_max=0.16)
    queue: WorkQueue[str] = WorkQueue(options, clock=loop.time)
    task = await term(queue, desired)
    for _ in range(6):
        count = len(desired.sent)
        queue.add("bundle")  # reverted: needed again
        while len(desired.sent) == count:
            await asyncio.sleep(0.001)
    await ended(task)
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(sent_at)]
    # 0.02, 0.04, 0.08, then the cap: never a hot loop.
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04 and gaps[2] >= 0.08 and all(g >= 0.16 for g in gaps[3:]), gaps
    # A new term remembers nothing: written without a delay (a damped one would wait
    # the cap).
    task = await term(queue, desired)
    before = loop.time()
    queue.add("bundle")
    while len(sent_at) == 6:
        await asyncio.sleep(0.001)
    await ended(task)
    assert sent_at[-1] - before < 0.16


async def test_a_reconcile_that_raises_is_logged_and_tried_again_never_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug, or a failure the actor did not foresee (a send that raises): the key is
    reported failed, logged with its trace, and reconciled again after its backoff."""
    caplog.set_level(logging.ERROR, logger="extender.leader.workqueue")
    desired = Desired(want={"x": "1"})
    send = desired.send
    calls = 0

    async def flaky(key: str, content: str) -> Sent:
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise RuntimeError("boom")
        return await send(key, content)

    desired.send = flaky  # type: ignore[method-assign]
    queue, _ = _queue()
    task = await term(queue, desired)
    queue.add("x")
    await drained(queue)
    await ended(task)
    assert desired.ends()[-1] == ("x", "sent", "")
    assert desired.failures() == 2 and calls == 3
    (record, _) = [r for r in caplog.records if r.getMessage() == "reconcile failed"]
    assert record.exc_info is not None and "boom" in str(record.exc_info[1])
