"""Least exposure: which requests reach what, and what never reaches the logs.

- Only ``POST`` with a JSON content type reaches ``/filter`` (and ``/explain``); every
  other endpoint is ``GET`` (and ``HEAD``) only. Other methods get 405 with a JSON body
  and an ``Allow`` header; other content types 415.
- The service-account token the extender sends to the API server never appears in a
  log line, at any level down to debug, from any logger (ours, aiohttp's,
  kubernetes-asyncio's), through LIST, WATCH, node lookups and API errors (401, 500).
- Request bodies are not logged above debug: a unique marker placed in every part of
  good and bad requests never shows up at info level.

Related: the shipped RBAC grants only get/list/watch on nodes and runtimeclasses
(tests/test_deploy.py); client certificates with mTLS (tests/http/test_tls.py).
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.cluster.live import LiveCluster, LiveOptions
from extender.cluster.state import ClusterState
from extender.http.app import create_app
from extender.http.wiring import attach_live
from extender.kube import connect as kube
from extender.kube.reflector import ReflectorOptions
from extender.logs import JsonFormatter, TextFormatter
from extender.policy_file import load_policy
from tests.support.apiserver import NODES, RUNTIME_CLASSES, FakeApiServer, make_node, make_runtime_class
from tests.support.apps import AppFactory, Client
from tests.support.waiting import eventually

JSON = {"Content-Type": "application/json"}
GOOD = {"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": ["plain-1"], "Nodes": None}


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, make_app: AppFactory) -> Client:
    return await aiohttp_client(make_app())


# ----------------------------------------------------------------------------- methods


POST_ONLY = ["/filter", "/explain"]
GET_ONLY = ["/healthz", "/readyz", "/metrics", "/explain/runtimeclasses/gvisor"]


@pytest.mark.parametrize("path", POST_ONLY)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])
async def test_post_endpoints_refuse_other_methods(client: Client, path: str, method: str) -> None:
    response = await client.request(method, path, data=json.dumps(GOOD), headers=JSON)
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert (await response.json())["error"]


@pytest.mark.parametrize("path", GET_ONLY)
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_get_endpoints_refuse_other_methods(client: Client, path: str, method: str) -> None:
    response = await client.request(method, path, data=json.dumps(GOOD), headers=JSON)
    assert response.status == 405
    assert set(response.headers["Allow"].split(",")) <= {"GET", "HEAD"}
    assert (await response.json())["error"]


@pytest.mark.parametrize("path", GET_ONLY)
async def test_get_endpoints_answer_get(client: Client, path: str) -> None:
    response = await client.get(path)
    assert response.status == 200


@pytest.mark.parametrize("path", POST_ONLY)
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/yaml",
        None,
    ],
)
async def test_post_endpoints_need_a_json_content_type(
    client: Client, path: str, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = await client.post(path, data=json.dumps(GOOD).encode(), headers=headers)
    assert response.status == 415
    assert (await response.json())["error"]


async def test_unknown_paths_are_404_json(client: Client) -> None:
    for path in ("/", "/filter/", "/admin", "/../etc/passwd", "/prioritize", "/bind"):
        response = await client.post(path, data=json.dumps(GOOD), headers=JSON)
        assert response.status in (404, 405), path
        assert (await response.json())["error"]


# ----------------------------------------------------------------------------- logs


def rendered(records: list[logging.LogRecord]) -> str:
    """Every record as both formats render it, extras and tracebacks included."""
    text, js = TextFormatter(), JsonFormatter()
    return "\n".join(f"{text.format(r)}\n{js.format(r)}\n{r.__dict__!r}" for r in records)


async def test_the_service_account_token_never_reaches_the_logs(
    tmp_path: Path, aiohttp_client: AiohttpClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, every level
    token = f"sa-token-{uuid.uuid4().hex}"
    server = FakeApiServer(token=token)
    server.add(NODES, make_node("n1"))
    server.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await server.start()
    try:
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        options = LiveOptions(
            reflector=ReflectorOptions(
                page_size=1, watch_timeout=5.0, idle_timeout=2.0, backoff_initial=0.01, backoff_max=0.05
            )
        )
        live = LiveCluster(conn.api, state, options=options)
        app = create_app(state=state, policy=load_policy(), source_stats=live.source_stats)
        attach_live(app, live)
        client = await aiohttp_client(app)
        await eventually(lambda: state.synced)

        # Errors: a 500 and a 401 (the server stops accepting the token), a dropped watch.
        server.fail_next(2, status=500, verbs={"list", "watch"})
        server.drop_watches()
        await eventually(lambda: any(r.verb == "watch" for r in server.requests[-3:]))
        server.token = "rotated"
        server.drop_watches()
        await eventually(lambda: sum("Unauthorized" in str(r.__dict__) for r in caplog.records) > 0)
        server.token = token
        server.add(NODES, make_node("n2"))
        await eventually(lambda: "n2" in state.nodes)

        # A node lookup (GET by name) for a name the watch has not delivered.
        server.stall_watches()
        server.add(NODES, make_node("n3"))
        body = {
            "Pod": {"metadata": {"name": "p"}, "spec": {}},
            "NodeNames": ["n1", "n3", "ghost"],
            "Nodes": None,
        }
        response = await client.post("/filter", json=body)
        assert response.status == 200
        answer = await response.json()
        assert sorted(answer["NodeNames"]) == ["n1", "n3"]  # in any order
        assert any(r.verb == "get" for r in server.requests)
        server.resume_watches()
    finally:
        await server.stop()

    assert caplog.records, "nothing was logged: the test would prove nothing"
    assert any(r.levelno == logging.DEBUG for r in caplog.records)
    logged = rendered(caplog.records)
    assert token not in logged
    assert "Bearer" not in logged


MARKER = f"marker-{uuid.uuid4().hex}"


def bodies_with_marker() -> list[tuple[bytes, dict[str, str]]]:
    pod = {
        "metadata": {"name": "p", "namespace": "default", "annotations": {"secret": MARKER}},
        "spec": {"containers": [{"name": "c", "image": "x", "env": [{"name": "PASSWORD", "value": MARKER}]}]},
    }
    node = {"metadata": {"name": "plain-1", "labels": {"x": MARKER}}}
    good_names = {"Pod": pod, "NodeNames": ["plain-1", "gvisor-1"], "Nodes": None, "Extra": MARKER}
    good_nodes = {"Pod": pod, "Nodes": {"metadata": {}, "items": [node]}, "NodeNames": None}
    return [
        (json.dumps(good_names).encode(), JSON),
        (json.dumps(good_nodes).encode(), JSON),
        (json.dumps({**good_names, "NodeNames": MARKER}).encode(), JSON),  # wrong type
        (json.dumps({**good_names, "Pod": {"spec": {"runtimeClassName": 7, "x": MARKER}}}).encode(), JSON),
        (json.dumps({"Pod": MARKER}).encode(), JSON),
        (json.dumps(good_names).encode()[:-5] + MARKER.encode(), JSON),  # not JSON
        (json.dumps(good_names).encode(), {"Content-Type": "text/plain"}),  # 415
        (
            json.dumps({**good_nodes, "Nodes": {"items": [{"metadata": {"name": 5, "x": MARKER}}]}}).encode(),
            JSON,
        ),
    ]


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
async def test_request_bodies_are_not_logged_above_debug(
    aiohttp_client: AiohttpClient, make_app: AppFactory, caplog: pytest.LogCaptureFixture, level: int
) -> None:
    caplog.set_level(level)
    client = await aiohttp_client(make_app())
    statuses = []
    for body, headers in bodies_with_marker():
        response = await client.post("/filter", data=body, headers=headers)
        statuses.append(response.status)
        await response.read()
    # Small bodies over the limit, too.
    small = await aiohttp_client(make_app(max_body_bytes=64))
    response = await small.post("/filter", data=bodies_with_marker()[0][0], headers=JSON)
    statuses.append(response.status)
    assert statuses.count(200) == 2 and 400 in statuses and 413 in statuses and 415 in statuses
    if level == logging.INFO:
        assert caplog.records, "the bad requests were not logged at all"
    assert MARKER not in rendered(caplog.records)


async def test_debug_level_is_where_request_detail_lives(
    aiohttp_client: AiohttpClient, make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # The counterpart: at debug the per-node detail is there (so the test above is not
    # vacuous because nothing is ever logged about a request).
    caplog.set_level(logging.DEBUG, logger="extender.http")
    client = await aiohttp_client(make_app())
    body: dict[str, Any] = {"Pod": {"metadata": {"name": MARKER}, "spec": {"runtimeClassName": "gvisor"}}}
    response = await client.post("/filter", json={**body, "NodeNames": ["plain-1"], "Nodes": None})
    assert response.status == 200
    assert MARKER in rendered(caplog.records)


async def test_names_from_a_request_cannot_steer_the_node_lookup(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> None:
    # A name the cache lacks is fetched with GET /api/v1/nodes/<name>. Names that are not
    # node names must not become paths: "n1/" or "/n1" would fetch node n1 and answer
    # for it under another name, "." would LIST every node.
    server = FakeApiServer()
    server.add(NODES, make_node("n0"))
    server.add(RUNTIME_CLASSES, make_runtime_class("gvisor"))
    await server.start()
    try:
        conn = await kube.connect(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        state = ClusterState()
        live = LiveCluster(conn.api, state)
        app = create_app(state=state, policy=load_policy(), source_stats=live.source_stats)
        attach_live(app, live)
        client = await aiohttp_client(app)
        await eventually(lambda: state.synced)
        await server.wait_for_watchers(NODES, 1)
        server.stall_watches()  # n1 reaches the extender only by lookup
        server.add(NODES, make_node("n1"))
        before = len(server.requests)
        hostile = ["n1/", "/n1", ".", "..", "./n1", "nodes/n1", "n1?watch=1", "N1", "n1/status"]
        body = {"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": [*hostile, "n1"], "Nodes": None}
        response = await client.post("/filter", json=body)
        assert response.status == 200
        answer = await response.json()
        assert answer["NodeNames"] == ["n1"]
        assert set(answer["FailedNodes"]) == set(hostile)
        fetched = [(r.verb, r.path) for r in server.requests[before:] if r.verb in ("get", "list", "GET")]
        assert fetched == [("get", "/api/v1/nodes/n1")]
        server.resume_watches()
    finally:
        await server.stop()


async def test_huge_keys_from_a_request_do_not_make_huge_log_lines(
    aiohttp_client: AiohttpClient, make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # A 400 names the field that was wrong, and map keys (labels, annotations) are part
    # of the path: shown, but cut short.
    caplog.set_level(logging.INFO)
    client = await aiohttp_client(make_app())
    key = "k" * 100_000 + MARKER
    pod = {"metadata": {"name": "p", "annotations": {key: 1}}, "spec": {}}
    response = await client.post("/filter", json={"Pod": pod, "NodeNames": [], "Nodes": None})
    assert response.status == 400
    detail = (await response.json())["detail"]
    assert detail.startswith("request.Pod.metadata.annotations.kkk") and len(detail) < 300
    assert MARKER not in detail
    logged = rendered(caplog.records)
    assert caplog.records and MARKER not in logged and len(logged) < 10_000
