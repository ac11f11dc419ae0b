"""A refusal (403, 422) is the actor's condition: said once, one key probing on a wait
that grows with the refusal, the others held until a write is accepted. Run on a loop
whose clock moves only when nothing is ready (``tests.support.virtual_time``), so an
hour of refusal takes the time its callbacks do."""

from __future__ import annotations

import asyncio
import logging

import pytest

from extender.leader.controller import WriteLog
from extender.leader.refusal import PROBE_FRACTION, Refusal
from extender.leader.results import Result, Sent, Unchanged, Write
from extender.leader.workqueue import WorkQueue, WriteOptions
from extender.leader.writes import Turn
from tests.leader.test_queue_contract import Keys
from tests.support.virtual_time import run

# The node labeller's production settings.
LABELLER = WriteOptions(rate=100.0, burst=20, concurrency=10, retry_initial=0.5, retry_max=30.0)
LOG = WriteLog(
    logging.getLogger("test.refusal"),
    subject="node",
    failing="cannot label node",
    retrying="node label write will be retried",
    hints={403: ": grant the node-labels ClusterRole (patch nodes)"},
    retry_level=logging.INFO,
)


class Nodes:
    """15,000 node keys whose writes are refused until ``allowed`` (loop time)."""

    def __init__(self, count: int, allowed: float) -> None:
        self.allowed = allowed
        self.keys = Keys([f"n{i}" for i in range(count)], self.reconcile, LOG)
        self.writes: list[float] = []
        self.written: set[str] = set()

    async def reconcile(self, key: str, turn: Turn) -> Result:
        if key in self.written:
            return Unchanged("in_sync")
        return await turn.write(lambda: Write("v", lambda: self.send(key)))

    async def send(self, key: str) -> Sent:
        now = asyncio.get_running_loop().time()
        self.writes.append(now)
        if now < self.allowed:
            return Sent(403, 'nodes "x" is forbidden')
        self.written.add(key)
        return Sent(200)


def test_15000_keys_refused_for_an_hour_cost_a_bounded_number_of_writes_and_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retried per key it was 30,020 writes and 15,000 warnings in five minutes (the
    rate limit's 100 a second, one warning per key). Now: one warning, writes that grow
    with the logarithm of the refusal's length, and every node written once it ends."""
    caplog.set_level(logging.DEBUG, logger="test.refusal")
    caplog.set_level(logging.INFO, logger="extender.leader.workqueue")
    hour = 3600.0
    nodes = Nodes(15_000, allowed=hour)

    async def main() -> WorkQueue[str]:
        loop = asyncio.get_running_loop()
        queue: WorkQueue[str] = WorkQueue(LABELLER, clock=loop.time)
        nodes.keys.queue = queue
        task = asyncio.create_task(queue.run(nodes.keys))
        await asyncio.sleep(hour)
        assert queue.refused and len(queue) == 15_000 and not queue.busy
        await asyncio.sleep(hour / 16 + 300)  # the probe's wait, and 150 s of writes
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return queue

    run(main())
    refused = [at for at in nodes.writes if at < hour]
    # The ten in flight when it began, 16 probes of 0.5 s, then about 11 per doubling
    # of its length (the wait grows by a sixteenth): some 110 in the hour.
    assert 10 < len(refused) < 150, len(refused)
    assert len(nodes.written) == 15_000
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == ["cannot label node: grant the node-labels ClusterRole (patch nodes)"]
    # The probes' retries at DEBUG (the warning said it), and one line when it ends.
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.getMessage().endswith("retried"))
    (ended,) = [r for r in caplog.records if r.getMessage() == "writes accepted again after a refusal"]
    assert ended.__dict__["released"] > 14_000
    assert len(caplog.records) < 2 * len(refused) + 10


def test_the_probe_waits_a_sixteenth_of_the_refusal_within_its_bounds() -> None:
    now = 0.0
    refusal: Refusal[str] = Refusal(initial=0.5, maximum=1000.0, clock=lambda: now)
    assert refusal.refused("a") == ("a", 0.5)
    now = 80.0
    assert refusal.wait() == 80.0 * PROBE_FRACTION
    now = 100_000.0
    assert refusal.wait() == 1000.0


def test_a_refusal_of_one_object_holds_the_others_for_two_probes_only() -> None:
    """A policy that refuses one node alone: it probes once more, then another key
    does, whose write is accepted and releases the rest; the refused node is retried on
    its own backoff."""
    writes: list[tuple[str, float]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def send(key: str) -> Sent:
            writes.append((key, loop.time()))
            return Sent(422, "denied") if key == "poison" else Sent(200)

        done: set[str] = set()

        async def reconcile(key: str, turn: Turn) -> Result:
            if key in done:
                return Unchanged("in_sync")
            result = await turn.write(lambda: Write("v", lambda: send(key)))
            if isinstance(result, Unchanged):
                return result
            if getattr(result, "sent", None) is not None and result.sent.status == 200:  # type: ignore[union-attr]
                done.add(key)
            return result

        queue: WorkQueue[str] = WorkQueue(WriteOptions(rate=100.0, burst=20), clock=loop.time)
        keys = Keys(["poison", "a", "b", "c"], reconcile)
        keys.queue = queue
        task = asyncio.create_task(queue.run(keys))
        await asyncio.sleep(10.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(main())
    assert writes[:4] == [("poison", 0.0), ("poison", 0.5), ("a", 1.0), ("b", 1.0)]
    assert {key for key, _ in writes} == {"poison", "a", "b", "c"}
    poisoned = [at for key, at in writes if key == "poison"]
    # Its own backoff (0.5 s doubling), never once per release.
    assert len(poisoned) <= 6, poisoned


def test_a_key_refused_alone_while_the_others_are_written_holds_no_key_again() -> None:
    """One node the admission policy refuses (422, always) among a stream of nodes that
    each need one write, at the labeller's production settings. Each new failure of that
    node used to start a new refusal of the whole actor with it as the probe, and the
    nodes arriving meanwhile waited out its backoff (up to ``retry_max``), over and
    over. Once a write of another key was accepted during its refusal, the refusal is
    that key's alone: it backs off alone, and holds nothing again."""
    added: dict[str, float] = {}
    written: dict[str, float] = {}
    poisoned: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def send(key: str) -> Sent:
            if key == "poison":
                poisoned.append(loop.time())
                return Sent(422, "denied by the node policy")
            written.setdefault(key, loop.time())
            return Sent(200)

        async def reconcile(key: str, turn: Turn) -> Result:
            if key in written:
                return Unchanged("in_sync")
            return await turn.write(lambda: Write("v", lambda: send(key)))

        queue: WorkQueue[str] = WorkQueue(LABELLER, clock=loop.time)
        keys = Keys(["poison"], reconcile, LOG)
        keys.queue = queue
        task = asyncio.create_task(queue.run(keys))
        for index in range(200):  # a node event every 0.1 s for 20 s
            await asyncio.sleep(0.1)
            name = f"n{index}"
            added[name] = loop.time()
            queue.add(name)
        await asyncio.sleep(5.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(main())
    assert set(written) == set(added)
    waits = {key: written[key] - added[key] for key in added}
    held = sorted((key for key, wait in waits.items() if wait > 0.05), key=added.__getitem__)
    # The first refusal holds the nodes that arrive during its two probes (about a
    # second), and none after it.
    assert len(held) <= 12, held
    assert all(added[key] < 1.5 for key in held), [(key, added[key], waits[key]) for key in held]
    # The refused node itself: on its own backoff (0.5 s doubling), never once per release.
    assert len(poisoned) <= 8, poisoned
