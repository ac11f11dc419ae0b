"""docs/development.md's smallest actor, run as the page shows it against the test API
server: its code is taken from the page, so the page cannot show code that does not
work. It labels every node in a term, follows a new node and an undone label, says a
refusal once and comes back to it, and as a follower writes nothing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch
from extender.kube import connect as kube
from extender.leader.runner import LeaderRunner
from extender.tasks import stop as stop_task
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.docs import fenced_blocks, page, section
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

FAST = fast_reflector()
LABEL = "example.dev/marked"


def example() -> dict[str, Any]:
    (code,) = fenced_blocks(section(page("development.md"), "### The smallest actor"), "python")
    namespace: dict[str, Any] = {"__name__": "example"}
    exec(compile(code, "docs/development.md", "exec"), namespace)
    return namespace


def marked(server: FakeApiServer) -> set[str]:
    return {
        obj["metadata"]["name"]
        for obj in server.objects(NODES)
        if (obj["metadata"].get("labels") or {}).get(LABEL) == "true"
    }


async def test_the_smallest_actor_of_the_docs_does_its_job(
    fake_apiserver: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="example")
    for name in ("a", "b"):
        fake_apiserver.add(NODES, make_node(name))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    conn = await kube.connect(kubeconfig=str(fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    state = ClusterState()
    marker = example()["NodeMarker"](conn.api, state.nodes)
    watch = asyncio.create_task(ClusterWatch(conn.api, state, options=FAST).run())
    runner = asyncio.create_task(LeaderRunner([marker], None).run())
    try:
        await eventually(lambda: marked(fake_apiserver) == {"a", "b"}, what="every node marked")
        fake_apiserver.add(NODES, make_node("c"))
        await eventually(lambda: marked(fake_apiserver) == {"a", "b", "c"}, what="a new node marked")
        # Refused for a while (a 403 until RBAC is granted): said once, then done.
        fake_apiserver.fail_next(2, status=403, verbs={"patch"})
        fake_apiserver.modify(NODES, "a", lambda obj: obj["metadata"]["labels"].pop(LABEL))
        await eventually(lambda: marked(fake_apiserver) == {"a", "b", "c"}, timeout=10, what="marked again")
        assert [r.getMessage() for r in caplog.records] == ["cannot mark node"]
    finally:
        await stop_task(runner)
        await stop_task(watch)
    # Not leading (its term is over): a change queues nothing, and nothing is written.
    patches = sum(1 for r in fake_apiserver.requests if r.verb == "patch")
    marker.changed("nodes", None, state.nodes["a"])
    assert not marker.queue.busy
    await asyncio.sleep(0.05)
    assert sum(1 for r in fake_apiserver.requests if r.verb == "patch") == patches
    await conn.api.close()
