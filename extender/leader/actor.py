"""The shape of leader work: what every replica observes, and what only the leader does.

Several replicas answer ``/filter`` side by side; work that *changes* the cluster
(the requeuer's pod patches, the audit's warnings and gauges, and every actor added
after them) must come from one. Each such part is a ``LeaderActor``:

- ``informers``: the resources it watches beyond the cluster state, run on **every**
  replica for the whole life of the process, so a new leader acts at once on warm
  caches. The runner waits for them (and for the cluster state) before the election
  campaigns, exports their health on ``/healthz`` and ``/metrics``, and names the one
  it is waiting for when the campaign cannot start.
- ``observe``: what else every replica keeps current between terms (plans, indexes,
  queues of what the leader owes). Runs for the life of the process; it may return
  at once when the informers' listeners do all of it.
- ``lead``: what only the Lease holder does, for one **term**. It is started when the
  term starts, cancelled *and awaited* when it ends, before the Lease is handed on;
  it never runs on two replicas at once (see ``extender.leader.election`` for the
  timing argument). Returning ends the actor's work for that term; raising is a bug
  that costs this actor only: the runner logs and counts it, and starts the part again
  after a backoff (``extender.leader.runner``), never ending the process's health.
- ``drain``: on shutdown, while still leading, a *bounded* wait for what ``lead`` owes
  (writes already planned) to go out, before ``lead`` is cancelled.
- ``register_metrics``: its counters and gauges, on the app's registry.

**Write actors level-triggered.** At each term start, and on every change an informer
reports, ``lead`` should recompute what the cluster *should* hold from what the
informers *show* it holds, and write only the difference, never replay a log of
events: a replica that takes over mid-way, a write lost with a term, or a change made
by hand are then all corrected by the same code path, and nothing is written twice.
Writes go through one ``extender.leader.writes.WriteQueue`` per actor (rate limit,
retries, one pending write per key, hand-back at term end).

With no election (a single replica, no ``--leader-elect``), this replica is the leader
for as long as it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from extender.kube.informer import Informer


class LeaderActor:
    """Base of every leader actor; override what the actor needs (see the module doc)."""

    #: The task name in logs and the ``/healthz`` report.
    name: str = "actor"

    @property
    def informers(self) -> Sequence[Informer[Any]]:
        return ()

    def waiting(self) -> list[str]:
        """What this actor still waits for before it can act (empty: ready). By default
        its informers' first LISTs; an actor that reads more (the cluster state) adds it."""
        return [reason for informer in self.informers if (reason := informer.waiting()) is not None]

    def register_metrics(self, registry: CollectorRegistry) -> None:
        return None

    async def observe(self) -> None:
        return None

    async def lead(self) -> None:
        return None

    async def drain(self) -> None:
        return None


async def wait_while(busy: Callable[[], bool], timeout: float, *, poll: float = 0.05) -> None:
    """The bounded wait of a ``drain``: until ``busy()`` is false or ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while busy() and loop.time() < deadline:
        await asyncio.sleep(poll)
