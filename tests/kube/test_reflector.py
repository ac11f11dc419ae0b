"""The reflectors against the fake API server: list, watch, 410, drops, restarts, backoff."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from extender.cluster.state import NODES as NODES_KIND
from extender.cluster.state import ClusterState
from extender.cluster.watch import NODE_RESOURCE, ClusterWatch
from extender.kube import connect as kube
from extender.kube.backoff import Backoff
from extender.kube.health import SourceStats
from extender.kube.reflector import Reflector, ReflectorOptions
from extender.kube.store import Store
from extender.tasks import stop as stop_task
from policies.objects import NodeView
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

# Small numbers so failures and reconnects happen within a test's time.
FAST = fast_reflector(page_size=2, watch_timeout=30.0, idle_timeout=5.0)


def labels(state: ClusterState, name: str) -> dict[str, str] | None:
    node = state.nodes.get(name)
    return dict(node.labels) if node is not None else None


class Running:
    """A ClusterWatch over a kubeconfig, as the service runs it."""

    def __init__(self, watch: ClusterWatch, state: ClusterState, api: Any, task: asyncio.Task[None]) -> None:
        self.watch, self.state, self.api, self.task = watch, state, api, task

    @property
    def nodes_stats(self) -> SourceStats:
        return self.watch.stats[0]


@pytest.fixture
async def connect_watch(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Running] = []

    async def start(server: FakeApiServer, options: ReflectorOptions = FAST) -> Running:
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        watch = ClusterWatch(conn.api, state, options=options)
        running = Running(watch, state, conn.api, asyncio.create_task(watch.run()))
        started.append(running)
        return running

    yield start
    for running in started:
        await stop_task(running.task)
        await running.api.close()


def node_names(state: ClusterState) -> set[str]:
    return set(state.nodes)


async def test_initial_paginated_list_then_watch_from_its_version(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    for i in range(5):
        fake_apiserver.add(NODES, make_node(f"n{i}"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc"))
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.synced, what="sync")
    assert node_names(running.state) == {f"n{i}" for i in range(5)}
    assert running.state.runtime_classes.get("gvisor") is not None
    stats = running.nodes_stats
    assert stats.synced and stats.lists == 1 and stats.failing_since is None
    await fake_apiserver.wait_for_watchers(NODES, 1)
    node_requests = [r for r in fake_apiserver.requests if r.path == "/api/v1/nodes"]
    lists = [r for r in node_requests if r.verb == "list"]
    # Three pages of two, the later ones by continue token.
    assert [r.query.get("limit") for r in lists] == ["2", "2", "2"]
    assert "continue" not in lists[0].query and all("continue" in r.query for r in lists[1:])
    watch = next(r for r in node_requests if r.verb == "watch")
    assert watch.query["resourceVersion"] == "6"
    assert watch.query["allowWatchBookmarks"] == "true"
    assert 30 <= int(watch.query["timeoutSeconds"]) < 60


async def test_events_update_the_store(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata"))
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.synced)
    fake_apiserver.add(NODES, make_node("b", labels={"sandbox": "gvisor"}))
    await eventually(lambda: "b" in running.state.nodes, what="ADDED")
    fake_apiserver.modify(NODES, "a", {"metadata": {"labels": {"zone": "z1"}}})
    await eventually(lambda: (labels(running.state, "a") or {}).get("zone") == "z1", what="MODIFIED")
    fake_apiserver.delete(NODES, "b")
    await eventually(lambda: "b" not in running.state.nodes, what="DELETED")
    fake_apiserver.modify(RUNTIME_CLASSES, "kata", {"scheduling": {"nodeSelector": {"kata": "true"}}})
    await eventually(
        lambda: dict(running.state.runtime_classes.get("kata").node_selector) == {"kata": "true"},
        what="RuntimeClass MODIFIED",
    )
    assert running.nodes_stats.events == 3
    served = fake_apiserver.get(NODES, "a")
    assert served is not None
    assert running.state.nodes.get("a").resource_version == served["metadata"]["resourceVersion"]


@pytest.mark.parametrize("gone_as", ["event", "http"])
async def test_relist_after_410_drops_objects_deleted_in_the_gap(
    gone_as: str, tmp_path: Path, connect_watch: Callable[..., Any]
) -> None:
    server = FakeApiServer(gone_as=gone_as)  # type: ignore[arg-type]
    await server.start()
    try:
        for name in ("keep", "gone", "changed"):
            server.add(NODES, make_node(name))
        running = await connect_watch(server)
        await eventually(lambda: running.state.synced)
        await server.wait_for_watchers(NODES, 1)
        # While the extender is cut off, objects change and history is compacted away.
        await server.stop()
        server.delete(NODES, "gone")
        server.modify(NODES, "changed", {"metadata": {"labels": {"v": "2"}}})
        server.add(NODES, make_node("new"))
        server.compact()
        await server.start()
        await eventually(lambda: node_names(running.state) == {"keep", "changed", "new"}, what="relist")
        assert labels(running.state, "changed") == {"kubernetes.io/hostname": "changed", "v": "2"}
        assert running.nodes_stats.relists >= 1
        assert running.nodes_stats.lists >= 2
        # And the watch resumes after the relist.
        server.add(NODES, make_node("after"))
        await eventually(lambda: "after" in running.state.nodes, what="event after relist")
    finally:
        await server.stop()


async def test_dropped_connection_resumes_without_relist(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.synced)
    await fake_apiserver.wait_for_watchers(NODES, 1)
    fake_apiserver.drop_watches()
    # Changes made while no watch is connected are replayed from the last version.
    fake_apiserver.modify(NODES, "a", {"metadata": {"labels": {"x": "1"}}})
    fake_apiserver.add(NODES, make_node("b"))
    await eventually(
        lambda: "b" in running.state.nodes and (labels(running.state, "a") or {}).get("x") == "1"
    )
    stats = running.nodes_stats
    assert stats.lists == 1 and stats.relists == 0
    assert stats.reconnects >= 1


async def test_server_down_at_start_then_up(tmp_path: Path, connect_watch: Callable[..., Any]) -> None:
    server = FakeApiServer()
    await server.start()  # learn a port, then go away
    await server.stop()
    server.add(NODES, make_node("a"))
    server.add(RUNTIME_CLASSES, make_runtime_class("runc"))
    running = await connect_watch(server)
    await eventually(lambda: running.nodes_stats.failing_since is not None, what="a failure")
    assert not running.state.synced
    assert "Connect" in running.nodes_stats.last_error or "connect" in running.nodes_stats.last_error
    await server.start()
    try:
        await eventually(lambda: running.state.synced, what="sync after the server came up")
        assert node_names(running.state) == {"a"}
        assert running.nodes_stats.failing_since is None and running.nodes_stats.last_error == ""
    finally:
        await server.stop()


async def test_restart_with_lower_resource_versions_converges(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    for i in range(6):
        fake_apiserver.add(NODES, make_node(f"n{i}"))
    for i in range(6):
        fake_apiserver.modify(NODES, f"n{i}", {"metadata": {"labels": {"gen": "1"}}})
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.synced)
    await fake_apiserver.wait_for_watchers(NODES, 1)
    old_rv = int(running.watch.reflectors[0].resource_version or 0)
    # A restored API server: fewer objects, different labels, resourceVersions restart low.
    await fake_apiserver.stop()
    for i in range(3, 6):
        fake_apiserver.delete(NODES, f"n{i}")
    fake_apiserver.modify(NODES, "n0", {"metadata": {"labels": {"gen": "restored"}}})
    fake_apiserver.reset_history()
    assert fake_apiserver.resource_version < old_rv
    await fake_apiserver.start()
    await eventually(
        lambda: (
            node_names(running.state) == {"n0", "n1", "n2"}
            and (labels(running.state, "n0") or {}).get("gen") == "restored"
        ),
        what="convergence to the restored state",
    )
    # New changes at the new (lower) versions are applied, not mistaken for stale ones.
    fake_apiserver.modify(NODES, "n1", {"metadata": {"labels": {"gen": "2"}}})
    await eventually(
        lambda: (labels(running.state, "n1") or {}).get("gen") == "2", what="event after restore"
    )
    assert running.nodes_stats.relists >= 1


async def test_older_resource_version_never_overwrites_newer() -> None:
    store: Store[NodeView] = Store(NODES_KIND)
    reflector = Reflector(None, NODE_RESOURCE, store, SourceStats(NODES_KIND))

    def event(event_type: str, rv: str, zone: str) -> dict[str, Any]:
        node = make_node("a", labels={"zone": zone})
        node["metadata"]["resourceVersion"] = rv
        return {"type": event_type, "object": node}

    reflector.handle_event(event("ADDED", "10", "new"))
    reflector.handle_event(event("MODIFIED", "9", "old"))  # replayed late
    assert store.get("a").labels["zone"] == "new"  # type: ignore[union-attr]
    reflector.handle_event(event("DELETED", "8", "old"))  # a stale deletion
    assert "a" in store
    reflector.handle_event(event("MODIFIED", "11", "newer"))
    assert store.get("a").labels["zone"] == "newer"  # type: ignore[union-attr]
    # Opaque (non-integer) versions are not compared: the event wins.
    reflector.handle_event(event("MODIFIED", "opaque-token", "opaque"))
    assert store.get("a").labels["zone"] == "opaque"  # type: ignore[union-attr]
    reflector.handle_event(
        {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "20"}}}
    )
    assert reflector.resource_version == "20"
    reflector.handle_event(event("DELETED", "21", "x"))
    assert "a" not in store
    with pytest.raises(ValueError):
        reflector.handle_event({"type": "ADDED"})


async def test_malformed_objects_are_skipped_not_stored(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    fake_apiserver.add(NODES, make_node("good"))
    fake_apiserver.add(NODES, {"metadata": {"name": "bad", "labels": {"a": 1}}})
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.nodes.synced)
    assert node_names(running.state) == {"good"}
    fake_apiserver.modify(NODES, "good", {"spec": {"taints": "not-a-list"}})
    fake_apiserver.add(NODES, make_node("later"))
    await eventually(lambda: "later" in running.state.nodes)
    # The malformed update was skipped, and the stale view of "good" dropped with it (as
    # a re-LIST would drop it): names mode answers it "unknown" until a good version.
    assert running.state.nodes.get("good") is None
    fake_apiserver.modify(NODES, "good", {"spec": {"taints": []}})
    await eventually(lambda: "good" in running.state.nodes)


async def test_server_errors_back_off_then_recover(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    fake_apiserver.fail_next(3, status=500, verbs={"list"}, resource=NODES)
    fake_apiserver.fail_next(1, status=429, retry_after=1, verbs={"watch"}, resource=NODES)
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.nodes.synced, what="sync after 5xx")
    assert running.nodes_stats.lists == 1
    await fake_apiserver.wait_for_watchers(NODES, 1)
    statuses = [r.verb for r in fake_apiserver.requests if r.path == "/api/v1/nodes"]
    assert statuses.count("list") == 4  # three failures, one success
    assert statuses.count("watch") == 2  # one 429, one that stuck
    fake_apiserver.add(NODES, make_node("b"))
    await eventually(lambda: "b" in running.state.nodes)
    assert running.nodes_stats.failing_since is None


async def test_server_timeout_and_bookmarks_advance_the_version(
    connect_watch: Callable[..., Any],
) -> None:
    server = FakeApiServer(bookmark_interval=0.05)
    await server.start()
    try:
        server.add(NODES, make_node("a"))
        server.add(RUNTIME_CLASSES, make_runtime_class("runc"))
        options = ReflectorOptions(watch_timeout=0.5, backoff_initial=0.02, backoff_max=0.2)
        running = await connect_watch(server, options)
        await eventually(lambda: running.state.synced)
        node_reflector = running.watch.reflectors[0]
        # RuntimeClass changes move the global version; node bookmarks carry it along.
        server.add(RUNTIME_CLASSES, make_runtime_class("kata"))
        await eventually(
            lambda: node_reflector.resource_version == str(server.resource_version), what="bookmark"
        )
        watches_before = sum(1 for r in server.requests if r.verb == "watch" and r.path == "/api/v1/nodes")
        # timeoutSeconds=1 here: the server ends the stream, the reflector watches again.
        await eventually(
            lambda: (
                sum(1 for r in server.requests if r.verb == "watch" and r.path == "/api/v1/nodes")
                > watches_before
            ),
            what="a new watch after the server-side timeout",
        )
        assert running.nodes_stats.lists == 1 and running.nodes_stats.relists == 0
        server.add(NODES, make_node("b"))
        await eventually(lambda: "b" in running.state.nodes)
    finally:
        await server.stop()


async def test_stalled_watch_is_abandoned_after_idle_timeout(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    options = ReflectorOptions(idle_timeout=0.3, backoff_initial=0.02, backoff_max=0.2)
    running = await connect_watch(fake_apiserver, options)
    await eventually(lambda: running.state.nodes.synced)
    await fake_apiserver.wait_for_watchers(NODES, 1)
    fake_apiserver.stall_watches()
    fake_apiserver.add(NODES, make_node("b"))
    await eventually(lambda: running.nodes_stats.reconnects >= 1, what="reconnect after the stall")
    fake_apiserver.resume_watches()
    await eventually(lambda: "b" in running.state.nodes)


async def test_watch_closed_at_once_is_backed_off_not_hammered(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.nodes.synced)
    await fake_apiserver.wait_for_watchers(NODES, 1)
    # Something between us and the server closes the fresh watch cleanly, empty.
    fake_apiserver.end_watches()
    await eventually(lambda: "less than a second" in running.nodes_stats.last_error, what="short watch seen")
    assert running.nodes_stats.relists == 0
    # It is retried (after a backoff) and works again.
    fake_apiserver.add(NODES, make_node("b"))
    await eventually(lambda: "b" in running.state.nodes)


async def test_expired_continue_token_falls_back_to_a_full_list(
    fake_apiserver: FakeApiServer, connect_watch: Callable[..., Any]
) -> None:
    for i in range(5):
        fake_apiserver.add(NODES, make_node(f"n{i}"))
    fake_apiserver.fail_next(
        1,
        status=410,
        verbs={"list"},
        resource=NODES,
        only_if=lambda r: "continue" in r.query,
        message="The provided continue parameter is too old to display a consistent list result.",
    )
    running = await connect_watch(fake_apiserver)
    await eventually(lambda: running.state.nodes.synced)
    assert node_names(running.state) == {f"n{i}" for i in range(5)}
    lists = [r.query for r in fake_apiserver.requests if r.verb == "list" and r.path == "/api/v1/nodes"]
    # First page, the expired continuation, then one unpaginated LIST (client-go's
    # pager does the same: FullListIfExpired).
    assert len(lists) == 3 and "continue" in lists[1] and "limit" not in lists[2]
    stats = running.nodes_stats
    assert stats.lists == 1 and stats.failing_since is None


def test_backoff_grows_caps_jitters_and_resets() -> None:
    now = [0.0]
    options = ReflectorOptions(
        backoff_initial=0.8, backoff_max=30.0, backoff_reset_after=120.0, backoff_jitter=1.0
    )
    backoff = Backoff(
        initial=options.backoff_initial,
        maximum=options.backoff_max,
        reset_after=options.backoff_reset_after,
        jitter=options.backoff_jitter,
        rng=random.Random(7),
        clock=lambda: now[0],
    )
    delays = []
    for _ in range(10):
        delays.append(backoff.next())
        now[0] += 1
    bases = [min(0.8 * 2**i, 30.0) for i in range(10)]
    # Each delay is its base stretched by up to 100% (wait.Jitter with factor 1.0).
    assert all(base <= d < 2 * base for d, base in zip(delays, bases, strict=True))
    assert max(delays) < 60.0
    # Two quiet minutes and the next failure starts small again.
    now[0] += 121
    assert backoff.next() < 1.6
    backoff.next()
    backoff.reset()
    assert backoff.next() < 1.6
