"""Replicas of the extender's leader actors over one test API server, as ``serve
--leader-elect`` wires them: each with its own API connection (through a ``TcpProxy``,
so one can be cut off alone), its own RuntimeClass watch, requeuer and/or auditor run
by a ``LeaderRunner`` (serve's runner), and a ``LeaderElector`` on one shared Lease.

Shared by tests/requeue/test_requeuer_ha.py, tests/audit/test_auditor_ha.py and
bench/failover_bench.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from extender.audit.auditor import AuditOptions, Auditor
from extender.cluster.pending_pods import REQUEUE_ANNOTATION, REVISION_ANNOTATION
from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch, runtime_class_resource
from extender.http.actors import ActorOptions, leader_actors
from extender.kube import connect as kube
from extender.kube.health import waiting_report
from extender.labeller.events import ClassEvents, EventOptions
from extender.labeller.labeller import LabelOptions, NodeLabeller
from extender.leader.election import LeaderElector
from extender.leader.gate import ElectionOptions, LeaderGate, identity
from extender.leader.runner import LeaderRunner
from extender.podtable.keeper import TableOptions
from extender.policy_file import load_policy
from extender.requeue.requeuer import RequeueOptions, Requeuer
from extender.tasks import stop as stop_task
from tests.support.apiserver import PODS, FakeApiServer
from tests.support.proxy import TcpProxy
from tests.support.reflectors import fast_reflector

# Test-speed election: a follower takes over 1 s after the last renewal it saw.
FAST_ELECTION = ElectionOptions(
    lease_name="runtimeclass-extender",
    namespace="runtimeclass-extender",
    lease_duration=1.0,
    renew_deadline=0.6,
    retry_period=0.1,
)
FAST_REFLECTOR = fast_reflector(page_size=50)
FAST_EVENTS = EventOptions(rate=1000.0, burst=100, interval=0.05, request_timeout=2.0, retry_max=0.5)
SCHED = "runtimeclass-scheduler"
FAST_REQUEUE = RequeueOptions(
    scheduler_names=(SCHED,),
    window=0.1,
    rate=200.0,
    burst=20,
    retry_initial=0.02,
    retry_max=0.1,
    request_timeout=0.5,
    drain_timeout=0.5,
    reflector=FAST_REFLECTOR,
)


@dataclass
class Replica:
    name: str
    proxy: TcpProxy
    api: Any
    state: ClusterState
    gate: LeaderGate
    requeuer: Requeuer | None
    auditor: Auditor | None
    labeller: NodeLabeller | None
    runner: LeaderRunner
    registry: CollectorRegistry
    # With the drain each needs on stop (the actors' jobs drain while leading).
    tasks: list[tuple[asyncio.Task[None], Callable[[], Awaitable[None]] | None]] = field(default_factory=list)
    stopped: bool = False

    @property
    def leading(self) -> bool:
        return self.gate.leading

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def synced(self) -> bool:
        return not self.runner.waiting()

    async def stop(self) -> None:
        """Shut down as ``serve`` does: the acting parts (drained), then the election
        (which releases the Lease), then the watch."""
        if self.stopped:
            return
        self.stopped = True
        for task, drain in self.tasks:
            await stop_task(task, drain=drain)
        await self.proxy.stop()
        await self.api.close()


async def start_replica(
    server: FakeApiServer,
    directory: Path,
    name: str,
    *,
    requeue: RequeueOptions | None = FAST_REQUEUE,
    audit: bool = False,
    label: LabelOptions | None = None,
    events: bool = False,
    table: TableOptions | None = None,
    election: ElectionOptions = FAST_ELECTION,
    user: str = "",
    lease_namespace: str | None = None,
) -> Replica:
    """``user``: the identity its requests carry (a ServiceAccount's user name, which the
    server authorizes when RBAC is loaded); the server's administrator by default."""
    proxy = TcpProxy(server.host, server.port)
    await proxy.start()
    token = server.token_for(user) if user else server.token
    conn = await kube.connect(kubeconfig=str(proxy.write_kubeconfig(directory / f"{name}.kubeconfig", token)))
    if lease_namespace is not None:
        election = replace(election, namespace=lease_namespace)
    state = ClusterState()
    gate = LeaderGate(identity({"POD_NAME": name}), election)
    registry = CollectorRegistry()
    # As serve builds them (extender.http.actors), at test speed.
    actors = leader_actors(
        conn.api,
        state,
        load_policy(),
        ActorOptions(
            requeue=requeue,
            audit=AuditOptions(reflector=FAST_REFLECTOR) if audit else None,
            label=label,
            events=FAST_EVENTS if events else None,
            table=replace(table, reflector=FAST_REFLECTOR) if table is not None else None,
            pending_reflector=FAST_REFLECTOR,
        ),
        gate=gate,
    )
    requeuer = next((a for a in actors if isinstance(a, Requeuer)), None)
    auditor = next((a for a in actors if isinstance(a, Auditor)), None)
    labeller = next((a for a in actors if isinstance(a, NodeLabeller)), None)
    class_events = next((a for a in actors if isinstance(a, ClassEvents)), None)
    # Every kind with the audit, the labeller or the events; the requeuer reads
    # RuntimeClasses only.
    every_kind = audit or labeller is not None or class_events is not None
    resources = None if every_kind else (runtime_class_resource(),)
    watch = ClusterWatch(
        conn.api, state, options=FAST_REFLECTOR, **({"resources": resources} if resources else {})
    )
    runner = LeaderRunner(
        actors, gate, also_waiting=lambda: [r for s in watch.stats if (r := waiting_report(s)) is not None]
    )
    runner.register_metrics(registry)
    replica = Replica(name, proxy, conn.api, state, gate, requeuer, auditor, labeller, runner, registry)
    elector = LeaderElector(conn.api, gate, waiting=runner.waiting)
    # Stop order (the list's order), as serve's cleanup unwinds: the actors, the
    # election, the watch.
    for job in runner.jobs():
        replica.tasks.append((asyncio.create_task(job.run(), name=job.name), job.drain))
    replica.tasks.append((asyncio.create_task(elector.run(), name="leader-election"), None))
    replica.tasks.append((asyncio.create_task(watch.run(), name="cluster-watch"), None))
    return replica


# Starts one replica by name; keyword arguments are start_replica's options.
Start = Callable[..., Awaitable[Replica]]


@contextlib.asynccontextmanager
async def replica_set(server: FakeApiServer, directory: Path, **defaults: Any) -> AsyncIterator[Start]:
    """Starts replicas (``start_replica`` with ``defaults``, which a call may override)
    and stops every one it started on the way out, the newest first."""
    started: list[Replica] = []

    async def start(name: str, **options: Any) -> Replica:
        replica = await start_replica(server, directory, name, **{**defaults, **options})
        started.append(replica)
        return replica

    try:
        yield start
    finally:
        for replica in reversed(started):
            await replica.stop()


def nudges(server: FakeApiServer) -> dict[str, list[str]]:
    """Per pod (namespace/name): the revision digests of the nudges applied, in order."""
    applied: dict[str, list[str]] = {}
    for event_type, obj, prev in server.changes(PODS):
        if event_type != "MODIFIED" or prev is None:
            continue
        after = obj["metadata"].get("annotations") or {}
        before = prev["metadata"].get("annotations") or {}
        if after.get(REQUEUE_ANNOTATION) != before.get(REQUEUE_ANNOTATION):
            key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            applied.setdefault(key, []).append(str(after.get(REVISION_ANNOTATION, "")))
    return applied
