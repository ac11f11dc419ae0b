"""Runs the leader actors of one process: what ``serve`` and the multi-replica tests loop over.

Each informer the actors list (``extender.leader.actor``) runs once, as a background job
of its own, for the life of the process, however many actors read it (the pending pods
are one informer for the requeuer and the node labeller's events). For each actor one
background job runs, for the life of the process, its ``observe`` on every replica, and
its ``lead`` through the leader gate (each term, cancelled and awaited when the term
ends), or once for the whole run when there is no election. Stopping a job drains the actors first (bounded,
and only while this replica leads: a follower owes nothing), then cancels it. The
first job stopped drains **every** actor at once, so the actors share the grace period
instead of each waiting out the others' drains; the jobs stopped after it find that
drain done.

**A bug costs its actor only.** An actor's ``observe`` or ``lead`` that raises (a bug,
or a failure its own code did not foresee; a ``CancelledError`` it raises itself too,
when its task is not being cancelled) is logged with its traceback, counted
(``runtimeclass_extender_actor_failures_total{actor}``) and started again after
a capped exponential backoff; its ``lead`` is restarted within the same term. Nothing
of it reaches the background task that runs it, so ``/healthz`` stays healthy and the
kubelet never restarts the process that serves ``/filter`` (its kube-scheduler's
sidecar) because a writer stumbled. A ``lead`` that *returns* has ended its work for
the term, as the actor shape says; without an election the term is the whole run, so
its job then waits for shutdown rather than end (a job that ends turns ``/healthz``
unhealthy).

The runner also answers the questions about all actors at once: what the election
must wait for before it campaigns (``waiting``: every informer listed, plus whatever
the caller adds, such as the cluster state), every informer's health (``sources``, for
``/healthz`` and ``/metrics``), and the leader's own gauges.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from extender import METRIC_PREFIX
from extender.kube.backoff import Backoff
from extender.kube.health import SourceStats
from extender.kube.informer import Informer
from extender.leader.actor import LeaderActor
from extender.leader.gate import LeaderGate
from extender.tasks import run_all

log = logging.getLogger("extender.leader")

# With --leader-elect: 1 on the replica that acts.
LEADER_GAUGE = METRIC_PREFIX + "leader"
# With --leader-elect: 1 once the replica campaigns (its caches are listed), 0 while
# it waits; /readyz's leader.waitingFor says for what.
CAMPAIGNING_GAUGE = METRIC_PREFIX + "leader_campaigning"
# An actor's observe or lead that raised and was started again.
ACTOR_FAILURES = METRIC_PREFIX + "actor_failures"


@dataclass(frozen=True)
class RestartPolicy:
    """The backoff between restarts of an actor's part that raised."""

    initial: float = 1.0
    maximum: float = 60.0


@dataclass(frozen=True)
class Job:
    """One actor's background job, as ``extender.tasks`` runs it."""

    name: str
    run: Callable[[], Awaitable[None]]
    drain: Callable[[], Awaitable[None]]


class LeaderRunner:
    """The actors of one process, and the gate they lead through (None: no election)."""

    def __init__(
        self,
        actors: Sequence[LeaderActor],
        gate: LeaderGate | None,
        *,
        also_waiting: Callable[[], list[str]] = list,
        restart: RestartPolicy | None = None,
    ) -> None:
        self.actors = tuple(actors)
        # Every informer once, in the order the actors list them (shared ones are one
        # object listed by several actors).
        self.informers: tuple[Informer[Any], ...] = tuple(
            {id(i): i for actor in self.actors for i in actor.informers}.values()
        )
        self.gate = gate
        self._also_waiting = also_waiting
        self._restart = restart or RestartPolicy()
        self._failures: Counter | None = None
        # Every actor's drain, started by the first job stopped and awaited by each.
        self._draining: asyncio.Future[None] | None = None

    def waiting(self) -> list[str]:
        """What the campaign still waits for (empty: campaign). A new leader acts at
        once, so it must never lead on a cold cache."""
        reasons = [*self._also_waiting(), *(reason for actor in self.actors for reason in actor.waiting())]
        return list(dict.fromkeys(reasons))  # a shared informer is awaited once

    def sources(self) -> list[SourceStats]:
        """Every actor informer's health."""
        return [informer.stats for informer in self.informers]

    def register_metrics(self, registry: CollectorRegistry) -> None:
        for actor in self.actors:
            actor.register_metrics(registry)
        self._failures = Counter(
            ACTOR_FAILURES,
            "A leader actor's observe or lead that raised, logged and started again after a backoff "
            "(the process keeps serving), by actor.",
            ["actor"],
            registry=registry,
        )
        for actor in self.actors:
            self._failures.labels(actor.name)
        gate = self.gate
        if gate is None:
            return
        Gauge(
            LEADER_GAUGE,
            "1 while this replica holds the leader-election Lease (acts on the cluster), else 0.",
            registry=registry,
        ).set_function(lambda: 1.0 if gate.leading else 0.0)
        Gauge(
            CAMPAIGNING_GAUGE,
            "1 once this replica campaigns for the Lease, 0 while it waits for its caches "
            "(/readyz leader.waitingFor says which, with the last error).",
            registry=registry,
        ).set_function(lambda: 1.0 if gate.campaigning else 0.0)

    def jobs(self) -> Iterator[Job]:
        """Each informer's job, then each actor's (stopped in reverse: actors first)."""
        for informer in self.informers:
            yield Job(f"{informer.kind}-informer", informer.run, _nothing_to_drain)
        for actor in self.actors:
            yield Job(actor.name, self._runner_of(actor), self._drainer_of(actor))

    async def run(self) -> None:
        """Every job as one task, undrained (tests; serve registers each job apart)."""
        await run_all(*(job.run for job in self.jobs()))

    def _runner_of(self, actor: LeaderActor) -> Callable[[], Awaitable[None]]:
        gate = self.gate
        observe = self._supervised(actor, "observe", actor.observe)
        leading = self._supervised(actor, "lead", actor.lead)

        async def lead() -> None:
            if gate is None:
                # Without an election the one term is the whole run: a ``lead`` that
                # returns has ended its work for it, not the process (as in a term of
                # ``LeaderGate.while_leading``), so the job waits to be cancelled.
                await leading()
                await asyncio.Event().wait()
            else:
                await gate.while_leading(leading)

        async def run() -> None:
            await run_all(observe, lead)

        return run

    def _supervised(
        self, actor: LeaderActor, part: str, run: Callable[[], Awaitable[None]]
    ) -> Callable[[], Awaitable[None]]:
        """``run`` started again, after a backoff, each time it raises (see the module doc)."""
        policy = self._restart

        async def supervised() -> None:
            backoff = Backoff(
                initial=policy.initial,
                maximum=policy.maximum,
                reset_after=policy.maximum * 2,
                jitter=0.2,
                rng=random.Random(),
                clock=time.monotonic,
            )
            while True:
                try:
                    await run()
                    return
                except (Exception, asyncio.CancelledError) as exc:
                    if isinstance(exc, asyncio.CancelledError) and _cancelled():
                        raise  # the job is being stopped
                    delay = backoff.next()
                    log.exception(
                        "leader actor failed; starting it again",
                        extra={
                            "actor": actor.name,
                            "part": part,
                            "error": repr(exc),
                            "retryIn": round(delay, 3),
                        },
                    )
                    if self._failures is not None:
                        self._failures.labels(actor.name).inc()
                    await asyncio.sleep(delay)

        return supervised

    def _drainer_of(self, actor: LeaderActor) -> Callable[[], Awaitable[None]]:
        async def drain() -> None:
            if self._draining is None:
                self._draining = asyncio.ensure_future(self._drain_all())
            # Shielded: a caller cancelled while waiting leaves the others' drain running.
            await asyncio.shield(self._draining)

        return drain

    async def _drain_all(self) -> None:
        """Every actor's drain at once, while this replica leads (see the module doc)."""
        if self.gate is not None and not self.gate.leading:
            return
        names = [actor.name for actor in self.actors]
        ends = await asyncio.gather(*(actor.drain() for actor in self.actors), return_exceptions=True)
        for name, end in zip(names, ends, strict=True):
            if isinstance(end, BaseException):
                log.error("leader actor's drain failed", exc_info=end, extra={"actor": name})


def _cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _nothing_to_drain() -> None:
    return None
