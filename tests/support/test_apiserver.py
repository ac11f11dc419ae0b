"""The fake API server answers as Kubernetes API conventions say a real one does.

Checked against api-conventions.md and the apiserver's behaviour: list metadata
(resourceVersion, continue, remainingItemCount), watch events ``{"type", "object"}``
with the object's ``metadata.resourceVersion``, bookmarks, and ``Status`` errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
import pytest
import yaml

from tests.support.apiserver import (
    CONFIGMAPS,
    ENDPOINT_SLICES,
    LEASES,
    NODES,
    PODS,
    RUNTIME_CLASSES,
    VALIDATING_WEBHOOKS,
    FakeApiServer,
    ResourceType,
    make_node,
    make_pod,
    make_runtime_class,
)

AUTH = {"Authorization": "Bearer fake-token"}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers=AUTH) as session:
        yield session


async def get_json(http: aiohttp.ClientSession, url: str, **params: str) -> tuple[int, Any]:
    async with http.get(url, params=params) as resp:
        return resp.status, orjson.loads(await resp.read())


class WatchStream:
    """Reads watch events one line at a time."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        line = await asyncio.wait_for(self.resp.content.readline(), timeout)
        assert line, "stream ended"
        assert line.endswith(b"\n")
        event = orjson.loads(line)
        # Every watch event is exactly {"type", "object"} (watch.Event in apimachinery).
        assert set(event) == {"type", "object"}
        assert event["type"] in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
        return dict(event)

    async def ended(self, timeout: float = 5.0) -> bool:
        line = await asyncio.wait_for(self.resp.content.readline(), timeout)
        return line == b""


async def open_watch(http: aiohttp.ClientSession, url: str, **params: str) -> WatchStream:
    resp = await http.get(url, params={"watch": "true", **params})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"].startswith("application/json")
    return WatchStream(resp)


def nodes_url(server: FakeApiServer) -> str:
    return server.url + NODES.collection_path()


def assert_status(body: Any, code: int, reason: str) -> None:
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == code
    assert body["reason"] == reason
    assert isinstance(body["message"], str) and body["message"]


async def test_list_shape_and_global_resource_versions(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", handler="runsc"))
    fake_apiserver.add(NODES, make_node("b"))
    status, body = await get_json(http, nodes_url(fake_apiserver))
    assert status == 200
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert body["metadata"] == {"resourceVersion": "3"}
    assert [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    # One counter across resources, like etcd's revision.
    assert [i["metadata"]["resourceVersion"] for i in body["items"]] == ["1", "3"]
    status, body = await get_json(http, fake_apiserver.url + RUNTIME_CLASSES.collection_path())
    assert body["kind"] == "RuntimeClassList" and body["apiVersion"] == "node.k8s.io/v1"
    assert body["items"][0]["handler"] == "runsc"


async def test_pagination_is_a_consistent_snapshot(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    for i in range(5):
        fake_apiserver.add(NODES, make_node(f"n{i}"))
    status, first = await get_json(http, nodes_url(fake_apiserver), limit="2")
    assert status == 200
    assert [i["metadata"]["name"] for i in first["items"]] == ["n0", "n1"]
    assert first["metadata"]["remainingItemCount"] == 3
    token = first["metadata"]["continue"]
    # Changes after the first page do not show up in later pages.
    fake_apiserver.delete(NODES, "n3")
    fake_apiserver.add(NODES, make_node("n9"))
    names = []
    while token:
        status, page = await get_json(http, nodes_url(fake_apiserver), limit="2", **{"continue": token})
        assert status == 200
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue", "")
    assert names == ["n2", "n3", "n4"]


async def test_continue_token_expires_with_compaction(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    for i in range(3):
        fake_apiserver.add(NODES, make_node(f"n{i}"))
    _, first = await get_json(http, nodes_url(fake_apiserver), limit="1")
    fake_apiserver.add(NODES, make_node("later"))
    fake_apiserver.compact()
    status, body = await get_json(
        http, nodes_url(fake_apiserver), limit="1", **{"continue": first["metadata"]["continue"]}
    )
    assert status == 410
    assert_status(body, 410, "Expired")


async def test_get_by_name_and_not_found(fake_apiserver: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake_apiserver.add(NODES, make_node("a", labels={"x": "y"}))
    status, body = await get_json(http, nodes_url(fake_apiserver) + "/a")
    assert status == 200
    assert body["kind"] == "Node" and body["metadata"]["labels"]["x"] == "y"
    status, body = await get_json(http, nodes_url(fake_apiserver) + "/missing")
    assert status == 404
    assert_status(body, 404, "NotFound")
    assert body["details"] == {"name": "missing", "kind": "nodes"}


async def test_unauthenticated_requests_are_refused(fake_apiserver: FakeApiServer) -> None:
    async with aiohttp.ClientSession() as anonymous:
        status, body = await get_json(anonymous, nodes_url(fake_apiserver))
    assert status == 401
    assert_status(body, 401, "Unauthorized")


async def test_watch_replays_from_resource_version_then_streams(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    _, listed = await get_json(http, nodes_url(fake_apiserver))
    rv = listed["metadata"]["resourceVersion"]
    fake_apiserver.modify(NODES, "a", {"metadata": {"labels": {"x": "1"}}})
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("kata"))  # another resource: not seen
    stream = await open_watch(http, nodes_url(fake_apiserver), resourceVersion=rv)
    event = await stream.next()
    assert event["type"] == "MODIFIED"
    assert event["object"]["kind"] == "Node" and event["object"]["apiVersion"] == "v1"
    assert event["object"]["metadata"]["labels"]["x"] == "1"
    assert event["object"]["metadata"]["resourceVersion"] == "2"
    fake_apiserver.add(NODES, make_node("b"))
    fake_apiserver.delete(NODES, "a")
    added, deleted = await stream.next(), await stream.next()
    assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "b")
    assert (deleted["type"], deleted["object"]["metadata"]["name"]) == ("DELETED", "a")
    # Strictly increasing, and the deletion is a revision of its own.
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in (event, added, deleted)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    stream.resp.close()


async def test_watch_without_resource_version_starts_with_synthetic_adds(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    fake_apiserver.add(NODES, make_node("b"))
    stream = await open_watch(http, nodes_url(fake_apiserver))
    names = [(await stream.next())["object"]["metadata"]["name"] for _ in range(2)]
    assert names == ["a", "b"]
    stream.resp.close()


async def test_watch_timeout_ends_cleanly_with_a_bookmark(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(NODES, make_node("a"))
    stream = await open_watch(
        http, nodes_url(fake_apiserver), resourceVersion="1", allowWatchBookmarks="true", timeoutSeconds="1"
    )
    fake_apiserver.add(NODES, make_node("b"))
    assert (await stream.next())["type"] == "ADDED"
    bookmark = await stream.next()
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "2"}},
    }
    assert await stream.ended()


async def test_bookmarks_on_request_only_when_allowed(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    with_bookmarks = await open_watch(
        http, nodes_url(fake_apiserver), resourceVersion="0", allowWatchBookmarks="true"
    )
    without = await open_watch(http, nodes_url(fake_apiserver), resourceVersion="0")
    await fake_apiserver.wait_for_watchers(NODES, 2)
    fake_apiserver.send_bookmarks()
    fake_apiserver.add(NODES, make_node("a"))
    assert (await with_bookmarks.next())["type"] == "BOOKMARK"
    assert (await with_bookmarks.next())["type"] == "ADDED"
    assert (await without.next())["type"] == "ADDED"
    with_bookmarks.resp.close()
    without.resp.close()


async def test_too_old_resource_version_is_410(http: aiohttp.ClientSession) -> None:
    modes: tuple[Literal["event", "http"], ...] = ("event", "http")
    for gone_as in modes:
        server = FakeApiServer(gone_as=gone_as)
        await server.start()
        try:
            server.add(NODES, make_node("a"))
            server.add(NODES, make_node("b"))
            server.compact()
            url = server.url + NODES.collection_path()
            resp = await http.get(url, params={"watch": "1", "resourceVersion": "1"})
            if gone_as == "http":
                assert resp.status == 410
                assert_status(orjson.loads(await resp.read()), 410, "Expired")
            else:
                assert resp.status == 200
                event = await WatchStream(resp).next()
                assert event["type"] == "ERROR"
                assert_status(event["object"], 410, "Expired")
                assert await WatchStream(resp).ended()
            resp.close()
            # The current resourceVersion itself is still watchable.
            stream = await open_watch(http, url, resourceVersion=str(server.resource_version))
            stream.resp.close()
        finally:
            await server.stop()


async def test_future_resource_version_is_too_large(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    resp = await http.get(nodes_url(fake_apiserver), params={"watch": "1", "resourceVersion": "99"})
    body = orjson.loads(await resp.read())
    assert resp.status == 504
    assert_status(body, 504, "Timeout")
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_drop_cuts_streams_mid_way(fake_apiserver: FakeApiServer, http: aiohttp.ClientSession) -> None:
    stream = await open_watch(http, nodes_url(fake_apiserver), resourceVersion="0")
    await fake_apiserver.wait_for_watchers(NODES, 1)
    assert fake_apiserver.drop_watches() == 1
    with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError)):
        await asyncio.wait_for(stream.resp.content.readline(), 5)
    assert fake_apiserver.watcher_count() == 0


async def test_stalled_stream_delivers_after_resume(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    stream = await open_watch(http, nodes_url(fake_apiserver), resourceVersion="0")
    await fake_apiserver.wait_for_watchers(NODES, 1)
    fake_apiserver.stall_watches()
    fake_apiserver.add(NODES, make_node("a"))
    with pytest.raises(TimeoutError):
        await stream.next(timeout=0.2)
    fake_apiserver.resume_watches()
    assert (await stream.next())["object"]["metadata"]["name"] == "a"
    stream.resp.close()


async def test_injected_failures(fake_apiserver: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake_apiserver.fail_next(1, status=429, retry_after=2, verbs={"list"})
    fake_apiserver.fail_next(1, status=500)
    async with http.get(nodes_url(fake_apiserver)) as resp:
        assert resp.status == 429
        assert resp.headers["Retry-After"] == "2"
        assert_status(orjson.loads(await resp.read()), 429, "TooManyRequests")
    status, body = await get_json(http, nodes_url(fake_apiserver) + "/x")
    assert status == 500
    assert_status(body, 500, "InternalError")
    status, _ = await get_json(http, nodes_url(fake_apiserver))
    assert status == 200


async def test_restart_keeps_port_and_fresh_history_lowers_versions(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    server = FakeApiServer()
    await server.start()
    try:
        port = server.port
        for i in range(5):
            server.add(NODES, make_node(f"n{i}"))
        server.modify(NODES, "n4", {"metadata": {"labels": {"a": "b"}}})
        await server.stop()
        with pytest.raises(aiohttp.ClientConnectionError):
            await get_json(http, server.url + NODES.collection_path())
        await server.restart(fresh_history=True)
        assert server.port == port
        status, body = await get_json(http, server.url + NODES.collection_path())
        assert status == 200
        assert int(body["metadata"]["resourceVersion"]) == 5 < 6
        assert body["items"][4]["metadata"]["labels"]["a"] == "b"
    finally:
        await server.stop()


async def test_namespaced_field_selector_and_merge_patch(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(PODS, make_pod("p1", node_name="n1"))
    fake_apiserver.add(PODS, make_pod("p2"))
    fake_apiserver.add(PODS, make_pod("p3", namespace="other", node_name="n1"))
    all_pods = fake_apiserver.url + PODS.collection_path()
    default_pods = fake_apiserver.url + PODS.collection_path("default")
    _, body = await get_json(http, all_pods, fieldSelector="spec.nodeName=")
    assert [p["metadata"]["name"] for p in body["items"]] == ["p2"]
    _, body = await get_json(http, default_pods, fieldSelector="spec.nodeName=n1")
    assert [p["metadata"]["name"] for p in body["items"]] == ["p1"]
    status, body = await get_json(http, all_pods, fieldSelector="spec.bogus=1")
    assert status == 400
    assert_status(body, 400, "BadRequest")

    unscheduled = await open_watch(
        http, all_pods, resourceVersion=str(fake_apiserver.resource_version), fieldSelector="spec.nodeName="
    )
    patch = {"metadata": {"annotations": {"requeue": "1"}}}
    async with http.patch(
        default_pods + "/p2",
        data=orjson.dumps(patch),
        headers={"Content-Type": "application/merge-patch+json"},
    ) as resp:
        assert resp.status == 200
        patched = orjson.loads(await resp.read())
    assert patched["metadata"]["annotations"] == {"requeue": "1"}
    assert patched["metadata"]["resourceVersion"] == "4"
    event = await unscheduled.next()
    assert (event["type"], event["object"]["metadata"]["resourceVersion"]) == ("MODIFIED", "4")
    # Binding p2 to a node takes it out of the selector: the watcher sees DELETED.
    fake_apiserver.modify(PODS, "p2", {"spec": {"nodeName": "n2"}})
    assert (await unscheduled.next())["type"] == "DELETED"
    unscheduled.resp.close()

    # A stale resourceVersion precondition conflicts; a wrong patch type is refused.
    stale = {"metadata": {"resourceVersion": "2", "labels": {"a": "b"}}}
    async with http.patch(
        default_pods + "/p1",
        data=orjson.dumps(stale),
        headers={"Content-Type": "application/merge-patch+json"},
    ) as resp:
        assert resp.status == 409
        assert_status(orjson.loads(await resp.read()), 409, "Conflict")
    async with http.patch(
        default_pods + "/p1", data=b"{}", headers={"Content-Type": "application/apply-patch+yaml"}
    ) as resp:
        assert resp.status == 415


async def test_a_json_patch_applies_whole_or_not_at_all(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    """RFC 6902 as kube-apiserver applies it (patch.go, applyJSPatch: json-patch v4): an
    "add" of an existing member replaces it whole; a patch with an operation that does
    not apply is a 422 and changes nothing; one that is no list of operations a 400."""
    fake_apiserver.add(PODS, make_pod("p1"))
    pod = fake_apiserver.url + PODS.collection_path("default") + "/p1"
    headers = {"Content-Type": "application/json-patch+json"}
    fake_apiserver.modify(PODS, "p1", {"metadata": {"annotations": {"a": "1", "b": "2"}}})
    replace = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "3"}}]
    async with http.patch(pod, data=orjson.dumps(replace), headers=headers) as resp:
        assert resp.status == 200
        assert orjson.loads(await resp.read())["metadata"]["annotations"] == {"a": "3"}
    before = fake_apiserver.get(PODS, "p1", namespace="default")
    broken = [
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
        {"op": "remove", "path": "/metadata/annotations/missing"},
    ]
    async with http.patch(pod, data=orjson.dumps(broken), headers=headers) as resp:
        assert resp.status == 422
    assert fake_apiserver.get(PODS, "p1", namespace="default") == before
    async with http.patch(pod, data=b"{}", headers=headers) as resp:
        assert resp.status == 400


async def test_generic_resource_registration(http: aiohttp.ClientSession) -> None:
    widgets = ResourceType("example.dev", "v1alpha1", "widgets", "Widget", namespaced=True)
    server = FakeApiServer(resources=(widgets,))
    await server.start()
    try:
        server.add(widgets, {"metadata": {"name": "w", "namespace": "ns"}, "spec": {"size": 1}})
        status, body = await get_json(http, server.url + "/apis/example.dev/v1alpha1/namespaces/ns/widgets/w")
        assert status == 200 and body["kind"] == "Widget" and body["apiVersion"] == "example.dev/v1alpha1"
        status, _ = await get_json(http, server.url + "/api/v1/nodes")
        assert status == 404
    finally:
        await server.stop()


def test_kubeconfig_is_ordinary(fake_apiserver: FakeApiServer, fake_kubeconfig: Path) -> None:
    config = yaml.safe_load(fake_kubeconfig.read_text())
    assert config["current-context"] == "fake"
    assert config["clusters"][0]["cluster"]["server"] == fake_apiserver.url
    assert config["users"][0]["user"]["token"] == "fake-token"


async def test_not_equal_field_selectors_are_anded_for_list_and_watch(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    """The running-pod audit's selector: bound, and neither Succeeded nor Failed."""
    running = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    fake_apiserver.add(PODS, make_pod("bound", node_name="n1", phase="Running"))
    fake_apiserver.add(PODS, make_pod("pending"))
    fake_apiserver.add(PODS, make_pod("done", node_name="n1", phase="Succeeded"))
    fake_apiserver.add(PODS, make_pod("failed", namespace="other", node_name="n2", phase="Failed"))
    all_pods = fake_apiserver.url + PODS.collection_path()
    _, body = await get_json(http, all_pods, fieldSelector=running)
    assert [p["metadata"]["name"] for p in body["items"]] == ["bound"]
    _, body = await get_json(http, all_pods, fieldSelector="spec.nodeName!=")
    assert sorted(p["metadata"]["name"] for p in body["items"]) == ["bound", "done", "failed"]

    watch = await open_watch(
        http, all_pods, resourceVersion=str(fake_apiserver.resource_version), fieldSelector=running
    )
    # Bound: it starts matching (ADDED); terminated: it stops (DELETED).
    fake_apiserver.modify(PODS, "pending", {"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}})
    event = await watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "pending")
    fake_apiserver.modify(PODS, "done", {"metadata": {"labels": {"a": "b"}}})  # never matches
    fake_apiserver.modify(PODS, "bound", {"status": {"phase": "Succeeded"}})
    event = await watch.next()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "bound")
    watch.resp.close()


# --- create and update (POST, PUT), as leader election writes its Lease ----------------


def _lease(name: str = "lock", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "a_1", "leaseDurationSeconds": 15, **spec},
    }


async def test_leases_are_created_once_and_updated_with_a_resource_version_precondition(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    """registry/generic/registry/store.go: Create answers AlreadyExists for a taken
    name; Update with a stale resourceVersion answers Conflict."""
    collection = f"{fake_apiserver.url}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    async with http.post(collection, json=_lease()) as resp:
        assert resp.status == 201
        created = await resp.json()
    assert created["metadata"]["namespace"] == "kube-system" and created["metadata"]["uid"]
    assert created["spec"]["holderIdentity"] == "a_1"
    async with http.post(collection, json=_lease(holderIdentity="b_2")) as resp:
        assert resp.status == 409
        status = await resp.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "AlreadyExists", 409)
    assert status["message"] == 'leases.coordination.k8s.io "lock" already exists'

    url = f"{collection}/lock"
    taken = {**created, "spec": {**created["spec"], "holderIdentity": "b_2"}}
    async with http.put(url, json=taken) as resp:
        assert resp.status == 200
        updated = await resp.json()
    assert updated["spec"]["holderIdentity"] == "b_2"
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    # The same stale resourceVersion again: the loser of a race.
    async with http.put(url, json={**taken, "spec": {**taken["spec"], "holderIdentity": "c_3"}}) as resp:
        assert resp.status == 409
        status = await resp.json()
    assert status["reason"] == "Conflict" and "the object has been modified" in status["message"]
    assert fake_apiserver.get(LEASES, "lock", namespace="kube-system")["spec"]["holderIdentity"] == "b_2"  # type: ignore[index]
    # An update of a Lease that does not exist is 404 (no create on update).
    async with http.put(f"{collection}/other", json=_lease("other")) as resp:
        assert resp.status == 404
    # A create may not carry a resourceVersion; a body that is not an object is 400.
    async with http.post(
        collection, json={**_lease("new"), "metadata": {"name": "new", "resourceVersion": "5"}}
    ) as resp:
        assert resp.status == 400
    async with http.post(collection, data=b"[1", headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 400
    # Watchers see the writes like any other change.
    assert [t for t, _, _ in fake_apiserver.changes(LEASES)] == ["ADDED", "MODIFIED"]


async def test_strategic_merge_patch_changes_one_webhook_by_name(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    """The webhooks list merges by name (admissionregistration/v1 types.go patchMergeKey):
    a patch naming one webhook's caBundle leaves its other fields and the other webhooks
    as they are; a JSON merge patch of the same body would replace the list."""
    hooks = [
        {"name": "a.example.dev", "sideEffects": "None", "clientConfig": {"service": {"name": "s"}}},
        {"name": "b.example.dev", "sideEffects": "None", "clientConfig": {"service": {"name": "s"}}},
    ]
    fake_apiserver.add(VALIDATING_WEBHOOKS, {"metadata": {"name": "hooks"}, "webhooks": hooks})
    url = fake_apiserver.url + VALIDATING_WEBHOOKS.collection_path() + "/hooks"
    patch = {"webhooks": [{"name": "b.example.dev", "clientConfig": {"caBundle": "Q0E="}}]}
    async with http.patch(
        url, data=orjson.dumps(patch), headers={"Content-Type": "application/strategic-merge-patch+json"}
    ) as resp:
        assert resp.status == 200
        patched = orjson.loads(await resp.read())
    assert patched["webhooks"] == [
        hooks[0],
        {
            "name": "b.example.dev",
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "s"}, "caBundle": "Q0E="},
        },
    ]
    async with http.patch(
        url, data=orjson.dumps(patch), headers={"Content-Type": "application/merge-patch+json"}
    ) as resp:
        assert resp.status == 200
        assert orjson.loads(await resp.read())["webhooks"] == patch["webhooks"]
    bad = {"webhooks": [{"clientConfig": {"caBundle": "Q0E="}}]}
    async with http.patch(
        url, data=orjson.dumps(bad), headers={"Content-Type": "application/strategic-merge-patch+json"}
    ) as resp:
        assert resp.status == 400


async def test_a_token_of_its_own_names_the_user_of_each_request(
    fake_apiserver: FakeApiServer, tmp_path: Path
) -> None:
    config = yaml.safe_load(
        fake_apiserver.write_kubeconfig(tmp_path / "a", user_name="replica-a").read_text()
    )
    token = config["users"][0]["user"]["token"]
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session:
        status, _ = await get_json(session, nodes_url(fake_apiserver))
    assert status == 200
    assert fake_apiserver.requests[-1].user == "replica-a"
    async with aiohttp.ClientSession(headers=AUTH) as session:
        await get_json(session, nodes_url(fake_apiserver))
    assert fake_apiserver.requests[-1].user == ""


async def test_delete_one_object_with_preconditions(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    node = fake_apiserver.add(NODES, make_node("n1"))
    url = nodes_url(fake_apiserver) + "/n1"
    for preconditions, cause in [
        ({"uid": "other"}, f"UID in precondition: other, UID in object meta: {node['metadata']['uid']}"),
        (
            {"resourceVersion": "999"},
            "ResourceVersion in precondition: 999, ResourceVersion in object meta: 1",
        ),
    ]:
        async with http.delete(url, json={"kind": "DeleteOptions", "preconditions": preconditions}) as resp:
            body = orjson.loads(await resp.read())
        assert_status(body, 409, "Conflict")
        assert body["message"] == f'Operation cannot be fulfilled on nodes "n1": Precondition failed: {cause}'
    assert fake_apiserver.get(NODES, "n1") is not None
    async with http.delete(url, json={"preconditions": {"uid": node["metadata"]["uid"]}}) as resp:
        assert resp.status == 200
        body = orjson.loads(await resp.read())
    # store.go finalizeDelete: a Success Status naming what was deleted.
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "n1", "kind": "nodes", "uid": node["metadata"]["uid"]},
    }
    assert fake_apiserver.get(NODES, "n1") is None
    assert fake_apiserver.changes(NODES)[-1][0] == "DELETED"
    async with http.delete(url) as resp:
        assert_status(orjson.loads(await resp.read()), 404, "NotFound")


async def test_status_subresource_writes_change_the_status_only(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(PODS, make_pod("p1"))
    url = fake_apiserver.url + PODS.collection_path("default") + "/p1/status"
    patch = {"metadata": {"labels": {"a": "b"}}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    async with http.patch(
        url, data=orjson.dumps(patch), headers={"Content-Type": "application/merge-patch+json"}
    ) as resp:
        assert resp.status == 200
    pod = fake_apiserver.get(PODS, "p1", namespace="default")
    assert pod is not None
    assert pod["status"] == {"phase": "Running"}
    assert "labels" not in pod["metadata"] and "nodeName" not in pod["spec"]
    pod["status"] = {"phase": "Succeeded"}
    pod["spec"]["nodeName"] = "n2"
    async with http.put(url, json=pod) as resp:
        assert resp.status == 200
    status, got = await get_json(http, url)
    assert status == 200
    assert got["status"] == {"phase": "Succeeded"} and "nodeName" not in got["spec"]
    async with http.patch(
        nodes_url(fake_apiserver) + "/n1/eviction",
        data=b"{}",
        headers={"Content-Type": "application/merge-patch+json"},
    ) as resp:
        assert resp.status == 404  # nodes have no eviction subresource


async def test_pod_binding_and_eviction(fake_apiserver: FakeApiServer, http: aiohttp.ClientSession) -> None:
    fake_apiserver.add(PODS, make_pod("p1"))
    url = fake_apiserver.url + PODS.collection_path("default") + "/p1"
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"}, "target": {"name": "n1"}}
    async with http.post(url + "/binding", json=binding) as resp:
        assert resp.status == 201
        assert orjson.loads(await resp.read())["status"] == "Success"
    pod = fake_apiserver.get(PODS, "p1", namespace="default")
    assert pod is not None and pod["spec"]["nodeName"] == "n1"
    async with http.post(url + "/binding", json=binding) as resp:
        body = orjson.loads(await resp.read())
    assert_status(body, 409, "Conflict")
    assert (
        body["message"]
        == 'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "n1"'
    )
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p1", "namespace": "default"},
    }
    async with http.post(url + "/eviction", json=eviction) as resp:
        assert resp.status == 201
    assert fake_apiserver.get(PODS, "p1", namespace="default") is None
    async with http.post(url + "/eviction", json=eviction) as resp:
        assert resp.status == 404


async def test_dry_run_writes_answer_but_store_nothing(
    fake_apiserver: FakeApiServer, http: aiohttp.ClientSession
) -> None:
    fake_apiserver.add(NODES, make_node("n1"))
    fake_apiserver.add(PODS, make_pod("p1"))
    before_rv, before_changes = fake_apiserver.resource_version, len(fake_apiserver.changes(NODES))
    dry = {"dryRun": "All"}
    merge = {"Content-Type": "application/merge-patch+json"}
    node_url = nodes_url(fake_apiserver) + "/n1"
    async with http.post(nodes_url(fake_apiserver), json=make_node("n2"), params=dry) as resp:
        assert resp.status == 201
        created = orjson.loads(await resp.read())
    assert created["metadata"]["name"] == "n2" and "resourceVersion" not in created["metadata"]
    async with http.patch(
        node_url, data=b'{"metadata":{"labels":{"a":"b"}}}', headers=merge, params=dry
    ) as resp:
        assert resp.status == 200
        patched = orjson.loads(await resp.read())
    assert patched["metadata"]["labels"]["a"] == "b" and patched["metadata"]["resourceVersion"] == "1"
    async with http.put(node_url, json=make_node("n1", labels={"c": "d"}), params=dry) as resp:
        assert resp.status == 200
    async with http.delete(node_url, params=dry) as resp:
        assert resp.status == 200
    async with http.delete(node_url, json={"dryRun": ["All"]}) as resp:
        assert resp.status == 200
    pod_url = fake_apiserver.url + PODS.collection_path("default") + "/p1"
    async with http.post(pod_url + "/eviction", json={"metadata": {"name": "p1"}}, params=dry) as resp:
        assert resp.status == 201
    assert fake_apiserver.resource_version == before_rv
    assert len(fake_apiserver.changes(NODES)) == before_changes
    assert fake_apiserver.get(NODES, "n2") is None
    node = fake_apiserver.get(NODES, "n1")
    assert node is not None and "a" not in node["metadata"]["labels"]
    assert fake_apiserver.get(PODS, "p1", namespace="default") is not None
    # A taken name is still taken in a dry run.
    async with http.post(nodes_url(fake_apiserver), json=make_node("n1"), params=dry) as resp:
        assert resp.status == 409
    async with http.delete(node_url, params={"dryRun": "Some"}) as resp:
        body = orjson.loads(await resp.read())
    assert_status(body, 422, "Invalid")
    assert (
        body["message"]
        == 'DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: "Some": supported values: "All"'
    )


async def test_configmaps_and_endpointslices_are_served(
    http: aiohttp.ClientSession, fake_apiserver: FakeApiServer
) -> None:
    for rtype, obj in [
        (CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"k": "v"}}),
        (ENDPOINT_SLICES, {"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": []}),
    ]:
        async with http.post(fake_apiserver.url + rtype.collection_path("ns"), json=obj) as resp:
            assert resp.status == 201
        status, listed = await get_json(http, fake_apiserver.url + rtype.collection_path("ns"))
        assert status == 200 and listed["kind"] == f"{rtype.kind}List"
        assert [i["metadata"]["name"] for i in listed["items"]] == [obj["metadata"]["name"]]
