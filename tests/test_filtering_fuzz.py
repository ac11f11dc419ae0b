"""Property-based tests of ``POST /filter`` through the real aiohttp app over loopback.

The production app runs on its own event loop in a background thread, served on
127.0.0.1 by aiohttp's ordinary ``TCPSite``; the tests talk to it with a plain
``http.client`` connection (with a socket timeout, so a hang fails the test instead of
stalling it). Between examples the cluster state is swapped on the server's loop, the
way the watch swaps it after a LIST.

1. Structurally valid requests, random clusters: random labels, taints (every
   effect, integer-ish values), tolerations (Equal/Exists/Lt/Gt and operators
   Kubernetes does not know), pods with, without and with missing RuntimeClasses,
   names mode with unknown and duplicated names, full-nodes mode with duplicates. The
   answer must equal ``tests.support.reference_model`` exactly.
2. Hostile bodies: arbitrary JSON, good requests with a field replaced by a wrong
   type / null / deep nesting / a huge string, keys removed, bodies truncated,
   non-UTF-8 bytes spliced in. The answer must be 200 with an answer that keeps
   kube-scheduler's rules, or a 4xx with a JSON error; never a 5xx or a hang, and a
   good request still works right after.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cluster.objects import node_from_api, runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.decision_cache import DecisionCache
from extender.filtering import decide
from extender.http.app import create_app
from extender.policy_file import load_policy
from extender.protocol import ExtenderArgs
from tests.support.reference_model import (
    REASON_UNKNOWN,
    answer_full_nodes,
    answer_names,
    class_from_api,
    normalise,
)
from tests.support.reference_model import node_from_api as ref_node

# Bounded volume: the whole module stays well under a minute on a shared machine.
# FUZZ_SCALE=20 multiplies every count for a long run by hand.
SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
VALID_EXAMPLES = 120 * SCALE
HOSTILE_EXAMPLES = 150 * SCALE
FUZZ = settings(
    max_examples=VALID_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=False,
)


class ServerThread:
    """The production app on its own loop and thread, on an ephemeral loopback port."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.state = ClusterState()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-server", daemon=True)
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.requests = 0

    def start(self) -> None:
        self.thread.start()
        self.call(self._start())

    async def _start(self) -> None:
        app = create_app(state=self.state, policy=load_policy(), max_body_bytes=8 * 1024 * 1024)
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self.runner.addresses[0][1])

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def set_cluster(self, nodes: list[dict[str, Any]], classes: list[dict[str, Any]]) -> None:
        async def swap() -> None:
            self.state.nodes.replace([node_from_api(n) for n in nodes])
            self.state.runtime_classes.replace([runtime_class_from_api(c) for c in classes])

        self.call(swap())

    def stop(self) -> None:
        if self.runner is not None:
            self.call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


class Http:
    """One keep-alive connection; reconnects after the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(
        self, body: bytes, content_type: str = "application/json", path: str = "/filter"
    ) -> tuple[int, str, bytes]:
        for attempt in range(2):
            try:
                self.conn.request("POST", path, body=body, headers={"Content-Type": content_type})
                response = self.conn.getresponse()
                data = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                return response.status, response.getheader("Content-Type", ""), data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server may close a connection after a refused body; a fresh one must work.
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    running = ServerThread()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def client(server: ServerThread) -> Http:
    return Http(server.port)


# ----------------------------------------------------------------------------- strategies

LABEL_KEYS = ["a", "b", "zone", "example.com/pool", "sandbox"]
LABEL_VALUES = ["", "x", "y", "1", "10", "-5"]
TAINT_KEYS = ["sandbox", "gpu", "dedicated", "node.kubernetes.io/unreachable"]
# Integer-ish values on both sides of Lt/Gt: canonical, leading zeros, signs, overflow.
INT_VALUES = [
    "0",
    "1",
    "5",
    "10",
    "-3",
    "-0",
    "007",
    "+4",
    "x",
    "",
    "9223372036854775807",
    "9223372036854775808",
]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]
OPERATORS = ["", "Equal", "Exists", "Lt", "Gt", "exists", "In", "NotEqual"]
CLASS_NAMES = ["rc-a", "rc-b", "rc-c"]
NODE_NAMES = [f"n{i}" for i in range(10)]

label_maps = st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES), max_size=4)


@st.composite
def taints(draw: st.DrawFn) -> dict[str, str]:
    taint = {"key": draw(st.sampled_from(TAINT_KEYS)), "effect": draw(st.sampled_from([*EFFECTS, ""]))}
    if draw(st.booleans()):
        taint["value"] = draw(st.sampled_from(INT_VALUES))
    return taint


@st.composite
def tolerations(draw: st.DrawFn) -> dict[str, Any]:
    toleration: dict[str, Any] = {}
    for field, values in (
        ("key", ["", *TAINT_KEYS]),
        ("operator", OPERATORS),
        ("value", INT_VALUES),
        ("effect", ["", *EFFECTS, "Bogus"]),
    ):
        if draw(st.booleans()):
            toleration[field] = draw(st.sampled_from(values))
    if draw(st.integers(0, 4)) == 0:
        toleration["tolerationSeconds"] = draw(st.integers(-10, 3600))
    return toleration


@st.composite
def node_objects(draw: st.DrawFn, name: str) -> dict[str, Any]:
    node: dict[str, Any] = {"metadata": {"name": name}, "spec": {}, "status": {}}
    labels: dict[str, str] = draw(label_maps)
    keep_empty = draw(st.booleans())
    if labels or keep_empty:
        node["metadata"]["labels"] = labels
    node_taints = draw(st.lists(taints(), max_size=3))
    if node_taints:
        node["spec"]["taints"] = node_taints
    node["metadata"]["resourceVersion"] = str(draw(st.integers(1, 10**6)))
    return node


@st.composite
def class_objects(draw: st.DrawFn, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name}, "handler": draw(st.sampled_from(["runc", "runsc"]))}
    if draw(st.booleans()):
        scheduling: dict[str, Any] = {}
        if draw(st.booleans()):
            scheduling["nodeSelector"] = draw(label_maps)
        if draw(st.booleans()):
            scheduling["tolerations"] = draw(st.lists(tolerations(), max_size=3))
        obj["scheduling"] = scheduling
    return obj


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    names = draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=8))
    classes = draw(st.lists(st.sampled_from(CLASS_NAMES), unique=True, max_size=3))
    return [draw(node_objects(n)) for n in names], [draw(class_objects(c)) for c in classes]


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "pause"}]}
    class_name = draw(st.sampled_from([None, "", *CLASS_NAMES, "missing"]))
    if class_name is not None or draw(st.booleans()):
        spec["runtimeClassName"] = class_name
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(tolerations(), max_size=4))
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec}


unknown_names = st.one_of(st.sampled_from(["ghost", "n99", ""]), st.text(max_size=20))


# ----------------------------------------------------------------------------- checks


def answer(client: Http, request: dict[str, Any]) -> dict[str, Any]:
    status, content_type, data = client.post(json.dumps(request).encode())
    assert status == 200, data[:500]
    assert content_type.startswith("application/json")
    parsed: dict[str, Any] = json.loads(data)
    return parsed


def check_rules(request: Any, status: int, data: bytes) -> None:
    """kube-scheduler's answer rules for any 200 answer; a JSON error for any 4xx."""
    assert status < 500, data[:500]
    body = json.loads(data)
    if status != 200:
        assert 400 <= status < 500
        assert isinstance(body.get("error"), str) and body["error"]
        assert b"Traceback" not in data
        return
    assert set(body) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    if body["Error"]:
        return
    failed, unresolvable = body["FailedNodes"], body["FailedAndUnresolvableNodes"]
    assert not set(failed) & set(unresolvable)
    if body["NodeNames"] is not None:
        asked = request.get("NodeNames", request.get("nodeNames"))
        passing = body["NodeNames"]
        assert body["Nodes"] is None
    else:
        nodes = request.get("Nodes", request.get("nodes"))
        asked = [item["metadata"]["name"] for item in nodes.get("items") or []]
        passing = [item["metadata"]["name"] for item in body["Nodes"]["items"]]
    assert len(passing) == len(set(passing))
    assert set(passing) | set(failed) | set(unresolvable) == set(asked)
    assert not set(passing) & (set(failed) | set(unresolvable))


# The cluster of the tests that send a request and judge it by the same rules whatever
# the cluster: each sets it itself, never relying on what a test before left.
SMALL_CLUSTER = (
    [{"metadata": {"name": "n0", "labels": {"a": "x"}}}, {"metadata": {"name": "n1"}}],
    [{"metadata": {"name": "rc-a"}, "handler": "runc", "scheduling": {"nodeSelector": {"a": "x"}}}],
)


def still_serving(client: Http, server: ServerThread) -> None:
    status, _, data = client.post(
        json.dumps({"Pod": {"spec": {}}, "NodeNames": ["fuzz-ok"], "Nodes": None}).encode()
    )
    assert status == 200, data
    assert json.loads(data)["FailedNodes"] == {"fuzz-ok": REASON_UNKNOWN}


# ----------------------------------------------------------------------------- 1. valid requests


@FUZZ
@given(cluster=clusters(), pod=pods(), data=st.data())
def test_names_mode_matches_the_reference(
    server: ServerThread, client: Http, cluster: Any, pod: dict[str, Any], data: st.DataObject
) -> None:
    nodes, classes = cluster
    server.set_cluster(nodes, classes)
    known = [n["metadata"]["name"] for n in nodes]
    names = data.draw(st.lists(st.one_of(st.sampled_from(known), unknown_names) if known else unknown_names))
    request = {"Pod": pod, "NodeNames": names, "Nodes": None}
    got = answer(client, request)
    expected = answer_names(
        pod,
        names,
        {n["name"]: n for n in map(ref_node, nodes)},
        {c["name"]: c for c in map(class_from_api, classes)},
    )
    # The passing names in any order (docs/reference.md, POST /filter), each once:
    # normalise sorts them, so a name listed twice still differs; the maps identical.
    assert normalise(got) == normalise(expected)


@FUZZ
@given(cluster=clusters(), pod=pods(), data=st.data())
def test_full_nodes_mode_matches_the_reference(
    server: ServerThread, client: Http, cluster: Any, pod: dict[str, Any], data: st.DataObject
) -> None:
    nodes, classes = cluster
    # The cache plays no part in full-nodes mode: keep the classes, drop the nodes.
    server.set_cluster([], classes)
    items = data.draw(st.lists(st.sampled_from(nodes), max_size=12)) if nodes else []
    request = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    got = answer(client, request)
    expected = answer_full_nodes(pod, items, {c["name"]: c for c in map(class_from_api, classes)})
    assert normalise(got) == normalise(expected)


# ----------------------------------------------------------------------------- 2. hostile bodies

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
GOOD_REQUEST: dict[str, Any] = {
    "Pod": {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "runtimeClassName": "rc-a",
            "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        },
    },
    "NodeNames": ["n0", "n1", "n2", "ghost"],
    "Nodes": None,
}
GOOD_FULL: dict[str, Any] = {
    "Pod": GOOD_REQUEST["Pod"],
    "Nodes": {"metadata": {}, "items": [{"metadata": {"name": "n0", "labels": {"a": "x"}}}]},
    "NodeNames": None,
}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _replace(value: Any, path: tuple[Any, ...], new: Any, *, delete: bool = False) -> Any:
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    head = path[0]
    if len(path) == 1 and delete:
        del copy[head]
        return copy
    copy[head] = _replace(copy[head], path[1:], new, delete=delete)
    return copy


def deep(depth: int) -> str:
    # A placeholder the encoder cannot choke on; ``encode`` swaps in the nesting.
    return f"__DEEP_{depth}__"


def encode(value: Any) -> bytes:
    body = json.dumps(value).encode()
    for match in set(re.findall(rb'"__DEEP_(\d+)__"', body)):
        depth = int(match)
        body = body.replace(b'"__DEEP_%d__"' % depth, b"[" * depth + b"]" * depth)
    return body


replacements = st.one_of(
    json_values,
    st.just(None),
    st.integers(1, 3000).map(deep),
    st.integers(1, 3).map(lambda n: "x" * (n * 700_000)),
)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Any, bytes]:
    base = draw(st.sampled_from([GOOD_REQUEST, GOOD_FULL]))
    kind = draw(st.sampled_from(["replace", "delete", "duplicate", "arbitrary"]))
    if kind == "arbitrary":
        value: Any = draw(json_values)
    else:
        path = draw(st.sampled_from(list(_paths(base))))
        if kind == "replace":
            value = _replace(base, path, draw(replacements))
        elif kind == "delete" and path:
            value = _replace(base, path, None, delete=True)
        else:
            names = draw(st.lists(st.sampled_from(["n0", "n1", "ghost", "x" * 300]), max_size=30))
            value = {**base, "NodeNames": names, "Nodes": None}
    return value, encode(value)


@st.composite
def broken_bytes(draw: st.DrawFn) -> bytes:
    body = json.dumps(draw(st.sampled_from([GOOD_REQUEST, GOOD_FULL]))).encode()
    kind = draw(st.sampled_from(["truncate", "splice", "raw", "utf8-in-string", "deep"]))
    if kind == "truncate":
        return body[: draw(st.integers(0, len(body) - 1))]
    if kind == "splice":
        at = draw(st.integers(0, len(body)))
        return body[:at] + draw(st.binary(min_size=1, max_size=8)) + body[at:]
    if kind == "raw":
        return draw(st.binary(max_size=200))
    if kind == "utf8-in-string":
        # Invalid UTF-8 inside a node name.
        return body.replace(b'"ghost"', b'"gh\xff\xfeost"')
    depth = draw(st.integers(150, 20_000))
    return b'{"Pod":{"spec":{}},"NodeNames":[],"x":' + b"[" * depth + b"]" * depth + b"}"


@settings(FUZZ, max_examples=HOSTILE_EXAMPLES)
@given(case=mutated())
def test_mutated_requests_get_a_correct_answer_or_a_json_4xx(
    server: ServerThread, client: Http, case: tuple[Any, bytes]
) -> None:
    server.set_cluster(*SMALL_CLUSTER)
    _, body = case
    status, content_type, data = client.post(body)
    assert content_type.startswith("application/json")
    # A 200 is judged against the body as sent (a deep(1) placeholder goes out as a plain
    # "[]"); a refusal needs no request, and a body nested 3,000 deep would not decode.
    check_rules(json.loads(body) if status == 200 else None, status, data)
    still_serving(client, server)


@settings(FUZZ, max_examples=HOSTILE_EXAMPLES)
@given(body=broken_bytes())
def test_broken_bytes_get_a_json_4xx(server: ServerThread, client: Http, body: bytes) -> None:
    server.set_cluster(*SMALL_CLUSTER)
    status, content_type, data = client.post(body)
    assert content_type.startswith("application/json")
    assert status < 500, data[:500]
    if status == 200:
        # A truncation or splice can still leave valid JSON (e.g. a cut inside nothing).
        check_rules(json.loads(body), status, data)
    else:
        assert 400 <= status < 500 and json.loads(data)["error"]
    still_serving(client, server)


@settings(FUZZ, max_examples=20 * SCALE)
@given(
    content_type=st.sampled_from(["text/plain", "application/x-www-form-urlencoded", "", "application/jsonx"])
)
def test_wrong_content_types_get_415(server: ServerThread, client: Http, content_type: str) -> None:
    server.set_cluster(*SMALL_CLUSTER)
    status, _, data = client.post(json.dumps(GOOD_REQUEST).encode(), content_type=content_type)
    assert status == 415 and json.loads(data)["error"]
    still_serving(client, server)


@settings(FUZZ, max_examples=HOSTILE_EXAMPLES // 2)
@given(case=mutated(), raw=broken_bytes(), use_raw=st.booleans())
def test_explain_gets_an_answer_or_a_json_4xx(
    server: ServerThread, client: Http, case: tuple[Any, bytes], raw: bytes, use_raw: bool
) -> None:
    # POST /explain takes a Pod: the Pod part of a mutated request, or broken bytes.
    server.set_cluster([{"metadata": {"name": "n0"}}], [{"metadata": {"name": "rc-a"}, "handler": "runc"}])
    request, _ = case
    pod = request.get("Pod", request) if isinstance(request, dict) else request
    body = raw if use_raw else encode(pod)
    status, content_type, data = client.post(body, path="/explain")
    assert content_type.startswith("application/json")
    assert status == 200 or 400 <= status < 500, data[:500]
    assert b"Traceback" not in data
    if status != 200:
        assert json.loads(data)["error"]
    still_serving(client, server)


# ----------------------------------------------------------------------------- 3. incremental changes

# One change to the cluster: (kind, name, new object or None for a delete).
Change = tuple[str, str, dict[str, Any] | None]


@st.composite
def changes(draw: st.DrawFn) -> Change:
    if draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from(CLASS_NAMES))
        return "class", name, None if draw(st.integers(0, 3)) == 0 else draw(class_objects(name))
    name = draw(st.sampled_from(NODE_NAMES[:6]))
    return "node", name, None if draw(st.integers(0, 4)) == 0 else draw(node_objects(name))


POLICY = load_policy()


@settings(FUZZ, max_examples=VALID_EXAMPLES)
@given(steps=st.lists(changes(), min_size=1, max_size=25), pod_list=st.lists(pods(), min_size=1, max_size=3))
def test_answers_follow_incremental_changes(steps: list[Change], pod_list: list[dict[str, Any]]) -> None:
    # The watch applies one event at a time (upsert/delete), and the names-mode fast path
    # keeps per-class verdicts that those events must invalidate exactly. After every
    # change, every pod's answer must equal the reference on the objects as they are now.
    state = ClusterState()
    state.nodes.replace([])
    state.runtime_classes.replace([])
    cache = DecisionCache(state)
    truth: dict[str, dict[str, dict[str, Any]]] = {"node": {}, "class": {}}
    names = [*NODE_NAMES[:6], "ghost"]
    for kind, name, obj in steps:
        store = state.nodes if kind == "node" else state.runtime_classes
        if obj is None:
            store.delete(name)
            truth[kind].pop(name, None)
        else:
            store.upsert(node_from_api(obj) if kind == "node" else runtime_class_from_api(obj))  # type: ignore[arg-type]
            truth[kind][name] = obj
        nodes = {n["name"]: n for n in map(ref_node, truth["node"].values())}
        classes = {c["name"]: c for c in map(class_from_api, truth["class"].values())}
        for pod in pod_list:
            args = ExtenderArgs.model_validate({"Pod": pod, "NodeNames": names, "Nodes": None})
            got = orjson.loads(decide(args, state, POLICY, cache=cache).to_json())
            assert normalise(got) == normalise(answer_names(pod, names, nodes, classes))
            # Every node the cluster has now, as kube-scheduler names them with
            # percentageOfNodesToScore: 100 (the prebuilt whole-cluster answer).
            every = sorted(truth["node"], reverse=True)
            args = ExtenderArgs.model_validate({"Pod": pod, "NodeNames": every, "Nodes": None})
            got = orjson.loads(decide(args, state, POLICY, cache=cache).to_json())
            assert normalise(got) == normalise(answer_names(pod, every, nodes, classes))
