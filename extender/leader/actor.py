"""The shape of leader work: what every replica observes, and what only the leader does.

Several replicas answer ``/filter`` side by side; work that *changes* the cluster (the
node labels, the events on pending pods, the requeue nudges, the webhook certificates,
the audit's warnings and gauges, and every actor added after them) must come from one.
Each such part is a ``LeaderActor``, run by ``extender.leader.runner``:

- ``informers``: the resources it watches beyond the cluster state, run on **every**
  replica for the whole life of the process, so a new leader acts at once on warm
  caches. The runner waits for them (and for the cluster state) before the election
  campaigns, exports their health on ``/healthz`` and ``/metrics``, and names the one
  it is waiting for when the campaign cannot start (``waiting``).
- ``observe``: what else every replica keeps current between terms. Runs for the life
  of the process; it may return at once when the informers' listeners do all of it.
- ``lead``: what only the Lease holder does, for one **term**. It is started when the
  term starts, cancelled *and awaited* when it ends, before the Lease is handed on; it
  never runs on two replicas at once (``extender.leader.election`` has the timing
  argument). With no election the term is the whole run. A ``lead`` that returns has
  done its work for the term (the job then waits for the term's end, never ending the
  process's health); one that raises is a bug that costs this actor only (logged,
  counted, started again after a backoff).
- ``drain``: on shutdown, while still leading, a *bounded* wait for what ``lead``
  owes to go out, before ``lead`` is cancelled (every actor's drain at once: the
  runner's).
- ``register_metrics``: its counters and gauges, on the app's registry.

**The one recipe: an actor that writes is a ``Controller``** (``extender.leader.
controller``): its listeners turn every change into a key on its ``WorkQueue`` (or ask
for a pass, which adds the keys out of line), the queue calls ``reconcile(key)``, which
reads the current state and returns what happened, and the queue owns the term (a pass
when it starts, everything forgotten when it ends; keys added outside a term are
dropped, so a follower queues nothing). docs/development.md ("The smallest actor")
shows the smallest one.

**The one exception: the audit** (``extender.audit.auditor``) writes nothing, so it has
no queue: its ``lead`` marks its term (its logs and gauges are this replica's while it
runs) and waits for the term to end.
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
