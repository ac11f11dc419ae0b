"""Failures that show: a background task that dies, an election that errs, a replica that
cannot start campaigning. Each must be visible at once (log, /healthz or /readyz, a
metric), never only at shutdown or as a silent leader gauge of 0 on every replica."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from extender.http.keys import TASKS
from extender.http.wiring import build_app
from extender.kube import connect as kube
from extender.leader import election
from extender.leader.actor import LeaderActor
from extender.leader.election import LeaderElector
from extender.leader.gate import LeaderGate, identity
from extender.leader.runner import LeaderRunner, RestartPolicy
from extender.settings import default_serve_settings
from extender.tasks import stop as stop_task
from tests.support.apiserver import NODES, PODS, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.apps import AppFactory, ClientFactory
from tests.support.replicas import FAST_ELECTION
from tests.support.virtual_time import run as run_virtual
from tests.support.waiting import eventually


async def test_a_background_task_that_dies_is_logged_at_once_and_turns_healthz_unhealthy(
    aiohttp_client: ClientFactory, make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="extender.tasks")
    app = make_app()
    fail = asyncio.Event()

    async def doomed() -> None:
        await fail.wait()
        raise RuntimeError("boom")

    app.cleanup_ctx.append(app[TASKS].job("doomed", doomed))
    client = await aiohttp_client(app)
    healthy = await client.get("/healthz")
    assert (healthy.status, await healthy.json()) == (200, {"status": "ok"})
    fail.set()

    async def unhealthy() -> bool:
        return (await client.get("/healthz")).status == 503

    await eventually(unhealthy, what="/healthz 503")
    body = await (await client.get("/healthz")).json()
    assert body == {"status": "unhealthy", "tasksEnded": [{"task": "doomed", "error": "RuntimeError: boom"}]}
    # Logged when it died, while the app still runs: once, with its name and error.
    (record,) = [r for r in caplog.records if r.getMessage() == "background task ended"]
    assert (getattr(record, "task", ""), getattr(record, "error", "")) == ("doomed", "RuntimeError: boom")


async def test_a_loop_that_returns_is_an_ended_task_too(
    aiohttp_client: ClientFactory, make_app: AppFactory
) -> None:
    app = make_app()

    async def returns() -> None:
        return None

    app.cleanup_ctx.append(app[TASKS].job("short-lived", returns))
    client = await aiohttp_client(app)

    async def unhealthy() -> bool:
        return (await client.get("/healthz")).status == 503

    await eventually(unhealthy, what="/healthz 503")
    assert (await (await client.get("/healthz")).json())["tasksEnded"] == [
        {"task": "short-lived", "error": "returned"}
    ]


async def test_the_election_never_fails_open(
    fake_apiserver: FakeApiServer, fake_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error in the renewal ends the term like a lost Lease: the gate
    closes and the acting job is stopped before the error propagates."""
    conn = await kube.connect(kubeconfig=str(fake_kubeconfig))
    gate = LeaderGate(identity({"POD_NAME": "a"}), FAST_ELECTION)
    seen: list[tuple[str, bool]] = []

    async def job() -> None:
        seen.append(("start", gate.leading))
        try:
            await asyncio.Event().wait()
        finally:
            seen.append(("stop", gate.leading))

    async def broken_renewal(self: Any) -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("unexpected")

    monkeypatch.setattr(election._Election, "renew_loop", broken_renewal)
    elector = LeaderElector(conn.api, gate)
    acting = asyncio.create_task(gate.while_leading(job))
    campaign = asyncio.create_task(elector.run())
    try:
        done, _ = await asyncio.wait({campaign}, timeout=10)
        assert done, "the election should have ended with its error"
        with pytest.raises(RuntimeError, match="unexpected"):
            campaign.result()
        assert not gate.leading
        assert seen == [("start", True), ("stop", False)]
    finally:
        await stop_task(campaign, log_error=False)
        await stop_task(acting)
        await conn.api.close()


async def test_a_replica_that_cannot_list_pods_says_why_it_does_not_campaign(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    aiohttp_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="extender.leader")
    monkeypatch.setenv("POD_NAME", "extender-0")
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    forbidden = 'pods is forbidden: User "system:serviceaccount:x:y" cannot list resource "pods"'
    fake_apiserver.fail_next(10_000, 403, verbs={"list"}, resource=PODS, message=forbidden)
    settings = default_serve_settings(
        kubeconfig=str(fake_kubeconfig),
        requeue_pending_pods=True,
        leader_elect=True,
        leader_elect_lease_namespace="runtimeclass-extender",
        leader_elect_lease_duration=1.0,
        leader_elect_renew_deadline=0.6,
        leader_elect_retry_period=0.1,
    )
    app, _ = await build_app(settings)
    client = await aiohttp_client(app)

    async def waiting_for_pods() -> bool:
        body = await (await client.get("/readyz")).json()
        return any(forbidden in reason for reason in body["leader"]["waitingFor"])

    await eventually(waiting_for_pods, what="/readyz names the forbidden pod LIST")
    readyz = await client.get("/readyz")
    body = await readyz.json()
    # Still ready (it answers /filter), not campaigning, and it says why.
    assert readyz.status == 200
    assert body["leader"]["campaigning"] is False and body["leader"]["leading"] is False
    assert body["leader"]["waitingFor"] == [f"pods: not listed yet: HTTP 403: {forbidden}"]
    metrics = await (await client.get("/metrics")).text()
    assert "runtimeclass_extender_leader_campaigning 0.0" in metrics
    assert 'runtimeclass_extender_watch_failing_seconds{kind="pods"}' in metrics
    warned = [
        r
        for r in caplog.records
        if r.getMessage() == "not campaigning for leadership yet: waiting for caches"
    ]
    assert any(r.levelno == logging.WARNING and forbidden in getattr(r, "waitingFor", "") for r in warned)
    # Liveness reports the pod informer but is not judged by it: a restart would not
    # grant the RBAC, and /filter must keep serving.
    healthz = await client.get("/healthz")
    health = await healthz.json()
    assert healthz.status == 200
    pods = next(entry for entry in health["informers"] if entry["kind"] == "pods")
    assert pods["listed"] is False and forbidden in pods["error"]
    assert not [r for r in fake_apiserver.requests if "/leases" in r.path]

    # The RBAC is granted: the replica lists, campaigns and leads.
    fake_apiserver.clear_failures()

    async def leading() -> bool:
        body = await (await client.get("/readyz")).json()
        return bool(body["leader"]["leading"])

    await eventually(leading, timeout=20, what="leading once pods can be listed")
    body = await (await client.get("/readyz")).json()
    assert body["leader"]["campaigning"] is True and body["leader"]["waitingFor"] == []
    assert "runtimeclass_extender_leader_campaigning 1.0" in await (await client.get("/metrics")).text()


async def test_an_actor_that_raises_costs_only_itself(
    aiohttp_client: ClientFactory, make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in a writer's loop (the labeller's compare, the events' pass) must never end
    the background task that serves it: /healthz would turn 503 and the kubelet would
    restart the sidecar that answers kube-scheduler's /filter. It is logged with its
    traceback, counted, and the part is started again after a backoff."""
    caplog.set_level(logging.ERROR, logger="extender.leader")
    calls = {"observe": 0, "lead": 0}

    class Buggy(LeaderActor):
        name = "buggy"

        async def observe(self) -> None:
            calls["observe"] += 1
            if calls["observe"] == 1:
                raise KeyError("missing")
            await asyncio.Event().wait()

        async def lead(self) -> None:
            calls["lead"] += 1
            if calls["lead"] <= 2:
                raise RuntimeError("boom")
            await asyncio.Event().wait()

    app = make_app()
    runner = LeaderRunner([Buggy()], None, restart=RestartPolicy(initial=0.01, maximum=0.02))
    registry = CollectorRegistry()
    runner.register_metrics(registry)
    for job in runner.jobs():
        app.cleanup_ctx.append(app[TASKS].job(job.name, job.run, drain=job.drain))
    client = await aiohttp_client(app)
    await eventually(lambda: calls["lead"] == 3 and calls["observe"] == 2, what="both parts restarted")
    health = await client.get("/healthz")
    assert (health.status, await health.json()) == (200, {"status": "ok"})
    failures = registry.get_sample_value("runtimeclass_extender_actor_failures_total", {"actor": "buggy"})
    assert failures == 3
    logged = [r for r in caplog.records if r.getMessage() == "leader actor failed; starting it again"]
    assert [getattr(r, "part", "") for r in logged].count("lead") == 2
    assert all(r.exc_info is not None for r in logged)  # the traceback, for the bug report


def test_a_cancelled_error_an_actor_raises_itself_costs_only_itself() -> None:
    """Not a cancellation of its job: restarted like any failure (the job ended, and
    with it /healthz)."""
    calls = 0

    class Raising(LeaderActor):
        name = "raising"

        async def lead(self) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise asyncio.CancelledError()
            await asyncio.Event().wait()

    async def main() -> bool:
        runner = LeaderRunner([Raising()], None, restart=RestartPolicy(initial=0.1, maximum=0.2))
        (job,) = runner.jobs()
        task = asyncio.create_task(job.run())
        await asyncio.sleep(5.0)
        ended = task.done()
        await stop_task(task)
        return ended

    assert run_virtual(main()) is False
    assert calls == 2


def test_the_actors_drain_together_within_the_grace_period() -> None:
    """serve stops the actors' jobs one after another; the first drains them all at
    once (three drains of a second each took three seconds)."""
    drained: list[tuple[str, float]] = []

    class Slow(LeaderActor):
        def __init__(self, name: str) -> None:
            self.name = name

        async def lead(self) -> None:
            await asyncio.Event().wait()

        async def drain(self) -> None:
            await asyncio.sleep(1.0)
            drained.append((self.name, asyncio.get_running_loop().time()))

    async def main() -> float:
        loop = asyncio.get_running_loop()
        runner = LeaderRunner([Slow("a"), Slow("b"), Slow("c")], None)
        jobs = [(asyncio.create_task(job.run()), job.drain) for job in runner.jobs()]
        await asyncio.sleep(0.1)
        started = loop.time()
        for task, drain in reversed(jobs):  # as serve's cleanup unwinds
            await stop_task(task, drain=drain)
        return loop.time() - started

    assert run_virtual(main()) == pytest.approx(1.0)
    assert sorted(name for name, _ in drained) == ["a", "b", "c"]
