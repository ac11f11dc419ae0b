"""Request limits of ``POST /filter``: body size, nodes per request, JSON nesting depth.

Each limit is tested at the limit (accepted, answered correctly) and just beyond it
(refused with a JSON error naming the limit), and the process keeps serving after.

- ``max-body-bytes``: 413 beyond (aiohttp's ``client_max_size``, checked while reading).
- ``max-nodes-per-request``: 400 beyond, counted with one ``len()`` after parsing.
- JSON nesting: the parser's fixed limit (``extender.http.app.JSON_DEPTH_LIMIT``), 400 beyond.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.cli import build_parser
from extender.http.app import JSON_DEPTH_LIMIT, create_app
from extender.http.keys import POLICY, STATE
from extender.settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_NODES_PER_REQUEST,
    SERVE_SETTINGS,
    SettingsError,
    resolve,
)
from tests.support.apps import AppFactory, Client
from tests.support.paths import REPO

JSON = {"Content-Type": "application/json"}
# tests/data/capture-cluster.yaml: plain-1 is unlabelled and untainted, so a pod without
# a RuntimeClass passes it.
POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default"}, "spec": {}}
UNKNOWN = "node(s) unknown to the RuntimeClass extender"


def names_body(names: list[str], **extra: Any) -> bytes:
    return json.dumps({"Pod": POD, "NodeNames": names, "Nodes": None, **extra}).encode()


def node_item(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


def nodes_body(count: int) -> bytes:
    items = [node_item(f"n{i}") for i in range(count)]
    return json.dumps({"Pod": POD, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}).encode()


async def post(client: Client, body: bytes) -> tuple[int, Any]:
    response = await client.post("/filter", data=body, headers=JSON)
    assert response.content_type == "application/json"
    return response.status, await response.json()


async def still_serving(client: Client) -> None:
    status, answer = await post(client, names_body(["plain-1"]))
    assert status == 200 and answer["NodeNames"] == ["plain-1"]


# ----------------------------------------------------------------------------- body size


async def test_body_size_at_and_beyond_the_limit(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    at_limit = names_body(["plain-1"])
    client = await aiohttp_client(make_app(max_body_bytes=len(at_limit)))
    status, answer = await post(client, at_limit)
    assert status == 200 and answer["NodeNames"] == ["plain-1"]
    status, answer = await post(client, at_limit + b" ")  # one byte over
    assert status == 413 and answer["error"]
    await still_serving(client)


async def test_chunked_body_without_a_length_is_cut_off_at_the_limit(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    # No Content-Length to refuse up front: the limit applies while reading.
    body = names_body(["plain-1"])

    async def chunks(data: bytes) -> Any:
        for start in range(0, len(data), 7):
            yield data[start : start + 7]

    client = await aiohttp_client(make_app(max_body_bytes=len(body)))
    response = await client.post("/filter", data=chunks(body), headers=JSON)
    assert response.status == 200 and (await response.json())["NodeNames"] == ["plain-1"]
    response = await client.post("/filter", data=chunks(body + b" " * 10_000), headers=JSON)
    assert response.status == 413 and (await response.json())["error"]
    await still_serving(client)


def test_default_body_limit_fits_a_real_5000_node_full_nodes_request() -> None:
    # bench/cluster_gen.py's Nodes are what a real kube-scheduler sends in full-nodes
    # mode (managedFields, conditions, image lists). 200 of them, scaled to 5,000.
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import cluster_gen
    finally:
        sys.path.remove(str(REPO / "bench"))
    sample = cluster_gen.nodes(200)
    body = json.dumps({"Pod": POD, "Nodes": {"metadata": {}, "items": sample}, "NodeNames": None})
    estimate = len(body) * 5000 // 200
    assert estimate > 10 * 1024 * 1024  # realistic: tens of MB
    assert estimate * 4 < DEFAULT_MAX_BODY_BYTES


# ----------------------------------------------------------------------------- slow bodies


async def test_a_body_that_trickles_gets_408_and_frees_the_connection(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    base = make_app()
    app = create_app(state=base[STATE], policy=base[POLICY], body_read_timeout=0.2)
    client = await aiohttp_client(app)
    assert client.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        body = names_body(["plain-1"])
        writer.write(
            b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body[:10]
        )
        await writer.drain()
        # The rest never comes: the server answers 408 by itself and closes.
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(payload) == {
        "error": "request timeout",
        "detail": "request body not received within body-read-timeout (0.2 s)",
    }
    await still_serving(client)


# ----------------------------------------------------------------------------- node count


@pytest.mark.parametrize("mode", ["names", "nodes"])
async def test_node_count_at_and_beyond_the_limit(
    aiohttp_client: AiohttpClient, make_app: AppFactory, mode: str
) -> None:
    limit = 50
    base = make_app()
    # create_app's keyword, as serve passes the setting.
    client = await aiohttp_client(
        create_app(state=base[STATE], policy=base[POLICY], max_nodes_per_request=limit)
    )
    at = names_body([f"n{i}" for i in range(limit)]) if mode == "names" else nodes_body(limit)
    status, answer = await post(client, at)
    assert status == 200 and answer["Error"] == ""
    if mode == "names":
        assert answer["FailedNodes"] == {f"n{i}": UNKNOWN for i in range(limit)}
    else:
        assert len(answer["Nodes"]["items"]) == limit

    beyond = names_body([f"n{i}" for i in range(limit + 1)]) if mode == "names" else nodes_body(limit + 1)
    status, answer = await post(client, beyond)
    assert status == 400
    assert answer["error"] == "malformed ExtenderArgs"
    assert answer["detail"] == f"request: {limit + 1} nodes, more than max-nodes-per-request ({limit})"
    await still_serving(client)


async def test_node_count_is_counted_before_duplicates_are_folded(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    base = make_app()
    client = await aiohttp_client(create_app(state=base[STATE], policy=base[POLICY], max_nodes_per_request=2))
    status, _ = await post(client, names_body(["plain-1", "plain-1"]))  # counted before dedup
    assert status == 200
    status, answer = await post(client, names_body(["plain-1", "plain-1", "plain-1"]))
    assert status == 400 and "max-nodes-per-request (2)" in answer["detail"]


async def test_default_node_count_takes_a_15000_node_names_request(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    assert DEFAULT_MAX_NODES_PER_REQUEST >= 15_000
    client = await aiohttp_client(make_app())
    status, answer = await post(client, names_body([f"n{i}" for i in range(15_000)]))
    assert status == 200 and len(answer["FailedNodes"]) == 15_000


def test_node_count_setting_resolves_and_validates() -> None:
    parser = build_parser()
    args = parser.parse_args(["serve", "--max-nodes-per-request", "7"])
    assert resolve(args, SERVE_SETTINGS, environ={})["max_nodes_per_request"] == 7
    args = parser.parse_args(["serve"])
    values = resolve(args, SERVE_SETTINGS, environ={"RUNTIMECLASS_EXTENDER_MAX_NODES_PER_REQUEST": "9"})
    assert values["max_nodes_per_request"] == 9
    assert resolve(args, SERVE_SETTINGS, environ={})["max_nodes_per_request"] == DEFAULT_MAX_NODES_PER_REQUEST
    assert resolve(args, SERVE_SETTINGS, environ={})["body_read_timeout"] == 30.0
    with pytest.raises(SettingsError, match="body-read-timeout"):
        resolve(parser.parse_args(["serve", "--body-read-timeout", "0"]), SERVE_SETTINGS, environ={})
    with pytest.raises(SettingsError, match="max-nodes-per-request"):
        resolve(parser.parse_args(["serve", "--max-nodes-per-request", "0"]), SERVE_SETTINGS, environ={})


# ----------------------------------------------------------------------------- nesting depth


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def depth_in_ignored_field(total: int) -> bytes:
    # {"Pod":..., "x": [[...]]}: the top-level object is level 1, the arrays the rest.
    return b'{"Pod":{"spec":{}},"NodeNames":["plain-1"],"x":' + nested(total - 1) + b"}"


def depth_in_node_item(total: int) -> bytes:
    # {"Nodes": {"items": [ {node, "x": [[...]]} ]}}: four levels before the arrays.
    return (
        b'{"Pod":{"spec":{}},"NodeNames":null,"Nodes":{"items":[{"metadata":{"name":"n"},"x":'
        + nested(total - 4)
        + b"}]}}"
    )


@pytest.mark.parametrize("build", [depth_in_ignored_field, depth_in_node_item])
async def test_nesting_at_and_beyond_the_parser_limit(
    client_for_capture: Client, build: Callable[[int], bytes]
) -> None:
    status, answer = await post(client_for_capture, build(JSON_DEPTH_LIMIT))
    assert status == 200 and answer["Error"] == ""
    for depth in (JSON_DEPTH_LIMIT + 1, 100_000):
        status, answer = await post(client_for_capture, build(depth))
        assert status == 400
        assert answer["detail"] == f"request: JSON nested deeper than {JSON_DEPTH_LIMIT} levels"
    await still_serving(client_for_capture)


async def test_deep_nesting_within_a_small_body_limit_still_400(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    body = b"[" * 1_000_000
    client = await aiohttp_client(make_app(max_body_bytes=2 * len(body)))
    status, answer = await post(client, body)
    assert status == 400 and str(JSON_DEPTH_LIMIT) in answer["detail"]
    await still_serving(client)


@pytest.fixture
async def client_for_capture(aiohttp_client: AiohttpClient, make_app: AppFactory) -> Client:
    return await aiohttp_client(make_app())
