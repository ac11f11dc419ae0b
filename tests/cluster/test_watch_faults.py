"""Faults of the API server while the extender watches it and answers filter calls.

Each test runs the production ``ClusterWatch`` and app against the fake API server
(tests/support/apiserver), with filter calls running throughout and every answer checked
by tests/support/faults.py against the reference evaluated on the store states visible
during that call. Then it injects one kind of fault while the cluster churns:

- the server dies in the middle of a paginated LIST (a later page fails with 500, the
  connection is cut, or the server stops and comes back);
- open watches are cut mid-stream;
- 500s and 429s with Retry-After on LIST and WATCH;
- a 410 storm: history compacted again and again, watches forced to resume from
  compacted resourceVersions (as an ERROR event and as HTTP 410);
- stalled streams: watches that stay open and send nothing, which only the
  reflector's read timeout can notice;
- a restart with a fresh, lower history;
- garbage on the wire: a truncated LIST body, half an event before a cut, a line that is
  not JSON, an event that is not ``{type, object}``.

After each fault the stores converge to the server's objects, no answer contradicted
the observed state, and some answers were checked exactly (no state change in flight).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpClient

from extender.kube import connect as kube
from extender.policy_file import load_policy
from extender.tasks import stop as stop_task
from policies.registry import Policy
from tests.support.apiserver import NODES, FakeApiServer, status_object
from tests.support.apiserver.server import _DROP
from tests.support.apps import Client
from tests.support.faults import FAST, Harness, build_harness, churn, filter_calls, seed_cluster
from tests.support.waiting import eventually

# Faults take longer to settle than a plain watch: a longer bound for every wait here.
FAULT_WAIT = 20.0


class Running:
    """A harness with its filter-call task; ``finish`` stops the calls and checks them."""

    def __init__(self, harness: Harness, client: Client, rng: random.Random) -> None:
        self.harness, self.client, self.rng = harness, client, rng
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(
            filter_calls(self._post, harness, random.Random(rng.random()), self.stop)
        )

    async def _post(self, request: dict[str, Any]) -> int:
        response = await self.client.post("/filter", json=request)
        await response.read()
        return response.status

    async def churn(self, steps: int, *, pause: float = 0.005) -> None:
        for _ in range(steps):
            churn(self.harness.server, self.rng)
            await asyncio.sleep(pause)

    async def wait_for_answers(self, more: int) -> None:
        target = self.harness.checks.answers + more
        await eventually(
            lambda: self.harness.checks.answers >= target,
            timeout=FAULT_WAIT,
            what=f"{more} more answers",
        )

    async def finish(self) -> None:
        await self.harness.converged()
        await self.wait_for_answers(5)  # some answers on the converged state, too
        self.stop.set()
        await self.task
        checks = self.harness.checks
        assert checks.mismatches == [], checks.mismatches[0][:3000]
        assert checks.answers > 0 and checks.exact > 0


@pytest.fixture
async def servers() -> AsyncIterator[list[FakeApiServer]]:
    started: list[FakeApiServer] = []
    yield started
    for server in started:
        await server.stop()


@pytest.fixture
async def extender(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> AsyncIterator[Callable[..., Awaitable[Running]]]:
    runs: list[tuple[Running, Any, asyncio.Task[None]]] = []

    async def start(
        server: FakeApiServer, *, seed: int = 7, policy: Policy | None = None, **options: Any
    ) -> Running:
        rng = random.Random(seed)
        if not server.objects(NODES):
            seed_cluster(server, rng)
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        harness = build_harness(conn.api, server, dataclasses.replace(FAST, **options), policy=policy)
        client = await aiohttp_client(harness.app)
        watch_task = asyncio.create_task(harness.watch.run())
        running = Running(harness, client, rng)
        runs.append((running, conn.api, watch_task))
        return running

    yield start
    for running, api, watch_task in runs:
        running.stop.set()
        await asyncio.gather(running.task, return_exceptions=True)
        await stop_task(watch_task)
        await api.close()


async def started(servers: list[FakeApiServer], server: FakeApiServer | None = None) -> FakeApiServer:
    server = server or FakeApiServer()
    await server.start()
    servers.append(server)
    return server


# ----------------------------------------------------------------------------- LIST


@pytest.mark.parametrize("fault", ["500", "cut", "stop"])
async def test_server_dies_mid_list(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]], fault: str
) -> None:
    server = FakeApiServer()
    seed_cluster(server, random.Random(1), nodes=14)  # five pages of three
    dispatch = server._dispatch
    faults = {"left": 2}

    async def dying_dispatch(request: web.Request) -> web.StreamResponse:
        later_page = "continue" in request.query and request.path == "/api/v1/nodes"
        if later_page and faults["left"] > 0:
            faults["left"] -= 1
            # The cluster moves on while the LIST is broken.
            churn(server, random.Random(faults["left"]))
            if fault == "500":
                return web.json_response(status_object(500, "etcd leader changed"), status=500)
            if fault == "cut" and request.transport is not None:
                request.transport.abort()
                return web.Response(status=500)
            asyncio.get_running_loop().create_task(server.restart())
            await asyncio.sleep(0.05)
            return web.Response(status=503)
        return await dispatch(request)

    server._dispatch = dying_dispatch  # type: ignore[method-assign]
    await started(servers, server)
    running = await extender(server)
    await running.harness.converged()
    assert faults["left"] == 0
    assert running.harness.watch.stats[0].lists >= 1
    await running.churn(20)
    await running.finish()


# ----------------------------------------------------------------------------- WATCH


async def test_watches_cut_mid_stream_during_churn(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]]
) -> None:
    server = await started(servers)
    running = await extender(server)
    await running.harness.converged()
    for _ in range(8):
        await running.churn(5)
        assert server.drop_watches() >= 0
        await running.churn(5)
        await running.wait_for_answers(2)
    await running.finish()
    assert sum(s.reconnects for s in running.harness.watch.stats) >= 8


async def test_500s_and_429s_with_retry_after(
    servers: list[FakeApiServer],
    extender: Callable[..., Awaitable[Running]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="extender.watch")
    server = await started(servers)
    server.fail_next(3, status=500, verbs={"list"})
    running = await extender(server, backoff_max=2.0)
    await running.harness.converged()
    assert [r.verb for r in server.requests[:3]] == ["list"] * 3
    for status in (500, 429):
        server.fail_next(2, status=status, retry_after=1 if status == 429 else None, verbs={"watch", "list"})
        server.drop_watches()
        await running.churn(10)
        await running.harness.converged()
        await running.wait_for_answers(3)
    await running.finish()
    waits = [r for r in caplog.records if "HTTP 429" in str(getattr(r, "error", ""))]
    assert waits, "no 429 was seen"
    # Retry-After: 1 is honoured (the delay is at least a second, capped by backoff_max).
    assert all(r.retryIn >= 1.0 for r in waits)  # type: ignore[attr-defined]


@pytest.mark.parametrize("gone_as", ["event", "http"])
async def test_410_storm(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]], gone_as: str
) -> None:
    server = await started(servers, FakeApiServer(gone_as=gone_as))  # type: ignore[arg-type]
    running = await extender(server)
    await running.harness.converged()
    relists = sum(s.relists for s in running.harness.watch.stats)
    for _ in range(10):
        await running.churn(4)
        server.compact()
        server.drop_watches()
        await running.churn(2)
        await running.wait_for_answers(1)
    await running.finish()
    assert sum(s.relists for s in running.harness.watch.stats) > relists


async def test_stalled_streams_are_noticed_and_replaced(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]]
) -> None:
    server = await started(servers)
    running = await extender(server, idle_timeout=0.3)
    await running.harness.converged()
    for _ in range(3):
        watches = sum(1 for r in server.requests if r.verb == "watch")
        server.stall_watches()
        await running.churn(10)
        # The silent streams are abandoned (read timeout) and the watches come back.
        await eventually(
            timeout=FAULT_WAIT,
            condition=lambda w=watches: sum(1 for r in server.requests if r.verb == "watch") >= w + 2,  # type: ignore[misc]
            what="reconnects after a stalled stream",
        )
        server.resume_watches()
        await running.harness.converged()
        await running.wait_for_answers(2)
    await running.finish()


async def test_restart_with_a_fresh_lower_history(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]]
) -> None:
    server = await started(servers)
    running = await extender(server)
    await running.harness.converged()
    await running.churn(60)  # the extender now holds resourceVersions the new history lacks
    await running.harness.converged()
    held = int(running.harness.watch.reflectors[0].resource_version or 0)
    await server.restart(fresh_history=True)
    assert server.resource_version < held
    await running.churn(15)
    await running.harness.converged()
    await running.churn(15)
    await running.finish()


async def test_server_down_for_a_while_keeps_serving_the_last_state(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]]
) -> None:
    server = await started(servers)
    running = await extender(server)
    await running.harness.converged()
    await server.stop()
    # Answers go on from the last observed state, and are checked against it.
    await running.wait_for_answers(20)
    await running.churn(10)  # changes the extender cannot see yet
    await server.start()
    await running.finish()


async def test_the_checker_catches_answers_the_state_does_not_support(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]], tmp_path: Path
) -> None:
    # An extender that ignores taints answers differently from the reference: the
    # harness must notice, or its silence in the tests above would mean nothing.
    policy_file = tmp_path / "no-taints.yaml"
    policy_file.write_text(
        "apiVersion: runtimeclass-extender.dev/v1alpha1\nkind: Policy\n"
        "predicates:\n- name: RuntimeClassExists\n- name: RuntimeClassNodeSelector\n"
    )
    server = await started(servers)
    running = await extender(server, policy=load_policy(str(policy_file)))
    await running.harness.converged()
    await eventually(
        lambda: len(running.harness.checks.mismatches) > 0,
        timeout=FAULT_WAIT,
        what="a detected mismatch",
    )
    running.stop.set()
    await running.task


async def test_garbage_on_the_wire(
    servers: list[FakeApiServer], extender: Callable[..., Awaitable[Running]]
) -> None:
    # A LIST answered with a truncated body, then watch streams carrying half an event,
    # a line that is not JSON, and an event that is not {type, object}.
    server = FakeApiServer()
    dispatch = server._dispatch
    garbled = {"left": 2}

    async def garbling_dispatch(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") is None and request.path == "/api/v1/nodes" and garbled["left"] > 0:
            garbled["left"] -= 1
            return web.Response(body=b'{"kind":"NodeList","items":[{"metad', content_type="application/json")
        return await dispatch(request)

    server._dispatch = garbling_dispatch  # type: ignore[method-assign]
    await started(servers, server)
    running = await extender(server)
    await running.harness.converged()
    assert garbled["left"] == 0
    for line in (b'{"type":"ADDED","object":{"metadata":{"na', b"not json at all\n", b'["ADDED"]\n'):
        await server.wait_for_watchers(NODES, 1)
        for watcher in list(server._watchers):
            if watcher.resource is NODES:
                watcher.queue.put_nowait(line)
                if not line.endswith(b"\n"):
                    watcher.queue.put_nowait(_DROP)
        await running.churn(10)
        await running.harness.converged()
    await running.finish()
