"""Malformed objects from the API server are handled one object at a time.

The fake API server serves what no real one would accept (it validates nothing): a Node
whose taint has no effect, a Node with a numeric label, a RuntimeClass whose
nodeSelector has the wrong type or whose node-selector annotation is invalid, objects
without a name or whose metadata is not an object. For each, through LIST and through
WATCH:

- the object is logged (a warning naming it) and left out of the store, or in the case
  of the annotation kept and failed closed;
- every other object is still served, and the filter answers for them are unchanged;
- a malformed new version of a known object removes the old version (the extender no
  longer knows the object's state, and a stale view could pass a node whose new taint
  it cannot read): names mode then answers that node "unknown" (FailedNodes), a pod
  of that class "not found";
- a later good version of the object is picked up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch
from extender.http.app import create_app
from extender.kube import connect as kube
from extender.policy_file import load_policy
from extender.tasks import stop as stop_task
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.apiserver.server import _event_line
from tests.support.apps import Client
from tests.support.reference_model import REASON_MISMATCH, REASON_TAINT, REASON_UNKNOWN, not_found
from tests.support.reflectors import fast_reflector
from tests.support.waiting import eventually

FAST = fast_reflector(page_size=2, watch_timeout=30.0, idle_timeout=5.0)
SANDBOX_TAINT = {"key": "sandbox", "value": "true", "effect": "NoSchedule"}
SANDBOX_TOLERATION = {"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}


class Extender:
    def __init__(self, state: ClusterState, client: Client) -> None:
        self.state, self.client = state, client

    async def filter(self, runtime_class: str | None, names: list[str]) -> dict[str, Any]:
        spec: dict[str, Any] = {"tolerations": [SANDBOX_TOLERATION]}
        if runtime_class:
            spec["runtimeClassName"] = runtime_class
        response = await self.client.post(
            "/filter",
            json={"Pod": {"metadata": {"name": "p"}, "spec": spec}, "NodeNames": names, "Nodes": None},
        )
        assert response.status == 200
        answer: dict[str, Any] = await response.json()
        return answer


@pytest.fixture
async def start_extender(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> AsyncIterator[Callable[[FakeApiServer], Any]]:
    watches: list[tuple[asyncio.Task[None], Any]] = []

    async def start(server: FakeApiServer) -> Extender:
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        watch = ClusterWatch(conn.api, state, options=FAST)
        watches.append((asyncio.create_task(watch.run()), conn.api))
        client = await aiohttp_client(create_app(state=state, policy=load_policy()))
        await eventually(lambda: state.synced, what="sync")
        await server.wait_for_watchers(NODES, 1)
        await server.wait_for_watchers(RUNTIME_CLASSES, 1)
        return Extender(state, client)

    yield start
    for task, api in watches:
        await stop_task(task)
        await api.close()


def skipped(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.getMessage() == "skipped malformed object" and getattr(r, "object", None) == name
    ]


def inject_event(server: FakeApiServer, resource: Any, event_type: str, obj: dict[str, Any]) -> None:
    """Send one raw event on every open watch of ``resource``, past the server's own checks."""
    for watcher in list(server._watchers):
        if watcher.resource is resource:
            watcher.queue.put_nowait(_event_line(event_type, obj))


def no_effect(obj: dict[str, Any]) -> None:
    obj["spec"]["taints"] = [{"key": "sandbox", "value": "true"}]


def good_cluster(server: FakeApiServer) -> None:
    server.add(NODES, make_node("plain"))
    server.add(NODES, make_node("sandboxed", labels={"sandbox": "true"}, taints=[SANDBOX_TAINT]))
    server.add(
        RUNTIME_CLASSES,
        make_runtime_class(
            "gvisor", handler="runsc", node_selector={"sandbox": "true"}, tolerations=[SANDBOX_TOLERATION]
        ),
    )
    server.add(RUNTIME_CLASSES, make_runtime_class("runc"))


async def test_malformed_objects_in_the_list_are_skipped_and_logged_one_by_one(
    fake_apiserver: FakeApiServer, start_extender: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    good_cluster(fake_apiserver)
    bad = make_node("no-effect", taints=[SANDBOX_TAINT])
    no_effect(bad)
    fake_apiserver.add(NODES, bad)
    fake_apiserver.add(NODES, make_node("numeric-label", labels={"gpu.count": 4}))  # type: ignore[dict-item]
    broken_class = make_runtime_class("broken", node_selector={"a": "b"})
    broken_class["scheduling"]["nodeSelector"] = ["a=b"]
    fake_apiserver.add(RUNTIME_CLASSES, broken_class)
    fake_apiserver.add(RUNTIME_CLASSES, {"metadata": {"name": "no-handler"}})

    extender = await start_extender(fake_apiserver)
    assert set(extender.state.nodes) == {"plain", "sandboxed"}
    assert set(extender.state.runtime_classes) == {"gvisor", "runc"}
    for name in ("no-effect", "numeric-label", "broken", "no-handler"):
        assert skipped(caplog, name), name
    # The malformed effect and the label are named in the log line, not just "invalid".
    assert "effect" in skipped(caplog, "no-effect")[0].error  # type: ignore[attr-defined]

    answer = await extender.filter("gvisor", ["plain", "sandboxed", "no-effect", "numeric-label"])
    assert answer["NodeNames"] == ["sandboxed"]
    assert answer["FailedAndUnresolvableNodes"] == {"plain": REASON_MISMATCH}
    assert answer["FailedNodes"] == {"no-effect": REASON_UNKNOWN, "numeric-label": REASON_UNKNOWN}
    answer = await extender.filter("broken", ["plain"])
    assert answer["FailedAndUnresolvableNodes"] == {"plain": not_found("broken")}

    # Later good versions are picked up by the watch.
    fake_apiserver.modify(NODES, "no-effect", lambda o: o["spec"].update(taints=[SANDBOX_TAINT]))
    fake_apiserver.modify(
        NODES, "numeric-label", lambda o: o["metadata"]["labels"].update({"gpu.count": "4"})
    )
    fake_apiserver.modify(
        RUNTIME_CLASSES, "broken", lambda o: o["scheduling"].update(nodeSelector={"a": "b"})
    )
    fake_apiserver.modify(RUNTIME_CLASSES, "no-handler", {"handler": "runc"})
    await eventually(lambda: len(extender.state.nodes) == 4, what="fixed nodes")
    await eventually(lambda: len(extender.state.runtime_classes) == 4, what="fixed classes")
    answer = await extender.filter(None, ["plain", "sandboxed", "no-effect", "numeric-label"])
    assert answer["NodeNames"] == ["plain", "sandboxed", "no-effect", "numeric-label"]


async def test_a_malformed_update_removes_the_stale_version_until_a_good_one_arrives(
    fake_apiserver: FakeApiServer, start_extender: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    good_cluster(fake_apiserver)
    extender = await start_extender(fake_apiserver)
    assert (await extender.filter(None, ["plain"]))["NodeNames"] == ["plain"]

    # The node gains a taint the extender cannot read: it must not keep passing.
    fake_apiserver.modify(
        NODES, "plain", lambda o: o["spec"].update(taints=[{"key": "dedicated", "value": "x"}])
    )
    await eventually(lambda: "plain" not in extender.state.nodes, what="stale node dropped")
    assert skipped(caplog, "plain")
    answer = await extender.filter(None, ["plain", "sandboxed"])
    assert answer["FailedNodes"] == {"plain": REASON_UNKNOWN}
    assert answer["NodeNames"] == ["sandboxed"]  # the others are untouched

    # A class whose new version is malformed: its pods are not placed on the old rules.
    fake_apiserver.modify(RUNTIME_CLASSES, "gvisor", lambda o: o["scheduling"].update(tolerations="all"))
    await eventually(lambda: "gvisor" not in extender.state.runtime_classes, what="stale class dropped")
    answer = await extender.filter("gvisor", ["sandboxed"])
    assert answer["FailedAndUnresolvableNodes"] == {"sandboxed": not_found("gvisor")}
    assert (await extender.filter("runc", ["sandboxed"]))["NodeNames"] == ["sandboxed"]

    # Good versions again.
    fake_apiserver.modify(
        NODES,
        "plain",
        lambda o: o["spec"].update(taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    )
    fake_apiserver.modify(
        RUNTIME_CLASSES, "gvisor", lambda o: o["scheduling"].update(tolerations=[SANDBOX_TOLERATION])
    )
    await eventually(
        lambda: "plain" in extender.state.nodes and "gvisor" in extender.state.runtime_classes, what="fixed"
    )
    answer = await extender.filter(None, ["plain", "sandboxed"])
    assert answer["FailedAndUnresolvableNodes"] == {"plain": REASON_TAINT}
    assert (await extender.filter("gvisor", ["sandboxed"]))["NodeNames"] == ["sandboxed"]


async def test_invalid_selector_annotation_fails_only_that_class_closed(
    fake_apiserver: FakeApiServer, start_extender: Callable[..., Any]
) -> None:
    good_cluster(fake_apiserver)
    bad = make_runtime_class("gpu")
    bad["metadata"]["annotations"] = {
        "runtimeclass-extender.dev/node-selector-term": "matchExpressions: [oops"
    }
    fake_apiserver.add(RUNTIME_CLASSES, bad)
    extender = await start_extender(fake_apiserver)
    answer = await extender.filter("gpu", ["plain", "sandboxed"])
    reason = 'RuntimeClass "gpu" has an invalid node selector annotation'
    assert answer["FailedAndUnresolvableNodes"] == {"plain": reason, "sandboxed": reason}
    assert (await extender.filter("gvisor", ["plain", "sandboxed"]))["NodeNames"] == ["sandboxed"]

    term = '{"matchExpressions": [{"key": "sandbox", "operator": "DoesNotExist"}]}'
    fake_apiserver.modify(
        RUNTIME_CLASSES,
        "gpu",
        {"metadata": {"annotations": {"runtimeclass-extender.dev/node-selector-term": term}}},
    )
    await eventually(
        lambda: (rc := extender.state.runtime_classes.get("gpu")) is not None and rc.selector_error is None,
        what="fixed annotation",
    )
    answer = await extender.filter("gpu", ["plain", "sandboxed"])
    assert answer["NodeNames"] == ["plain"]
    assert answer["FailedAndUnresolvableNodes"] == {"sandboxed": REASON_MISMATCH}


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"labels": {"a": "b"}}},  # no name
        {"metadata": {"name": ""}},
        {"metadata": "n1"},
        {"metadata": {"name": 7}},
        {"metadata": {"name": "n-bad"}, "spec": []},
        {"metadata": {"name": "n-bad"}, "spec": {"taints": "sandbox"}},
        {"metadata": {"name": "n-bad"}, "status": {"runtimeHandlers": [{"name": 1}]}},
    ],
)
async def test_malformed_watch_events_leave_the_rest_of_the_store_alone(
    fake_apiserver: FakeApiServer, start_extender: Callable[..., Any], obj: dict[str, Any]
) -> None:
    good_cluster(fake_apiserver)
    extender = await start_extender(fake_apiserver)
    before = dict(extender.state.nodes.items())
    inject_event(fake_apiserver, NODES, "ADDED", obj)
    inject_event(fake_apiserver, NODES, "MODIFIED", obj)
    # A marker after the bad events: once it is in, the bad ones were handled.
    fake_apiserver.add(NODES, make_node("marker"))
    await eventually(lambda: "marker" in extender.state.nodes, what="marker")
    after = dict(extender.state.nodes.items())
    assert after.pop("marker") is not None
    assert after == before
    answer = await extender.filter("gvisor", ["plain", "sandboxed", "marker"])
    assert answer["NodeNames"] == ["sandboxed"]
