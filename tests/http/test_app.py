"""``POST /filter``, ``/healthz`` and ``/readyz`` over HTTP (pytest-aiohttp).

The app serves tests/data/capture-cluster.yaml unless a test says otherwise:
gvisor-{1,fail-1,unres-1} labelled runtime/gvisor=true and tainted
sandbox=true:NoSchedule; plain-{1,fail-1,unres-1} unlabelled and untainted;
RuntimeClass gvisor (selector runtime/gvisor=true, tolerates the sandbox taint) and runc
(no scheduling).

The answer rules are kube-scheduler's (pkg/scheduler/extender.go ``Filter``): the
answer comes in the form asked, the passing list is always present, every rejected
node is in exactly one failure map, and no unasked node is ever named.
"""

from __future__ import annotations

import copy
import json
import logging
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.cluster.state import ClusterState
from policies.objects import NodeView, PodView, RuntimeClassView
from policies.registry import Policy
from policies.verdict import Verdict
from tests.support.apps import AppFactory, Client
from tests.support.docs import fenced_blocks, page, section
from tests.support.paths import REPO

MISMATCH = "node(s) didn't match RuntimeClass"
UNTOLERATED = "node(s) had untolerated taint(s)"
UNKNOWN = "node(s) unknown to the RuntimeClass extender"
GVISOR_NODES = ["gvisor-1", "gvisor-fail-1", "gvisor-unres-1"]
PLAIN_NODES = ["plain-1", "plain-fail-1", "plain-unres-1"]
ALL_NODES = GVISOR_NODES + PLAIN_NODES
JSON = {"Content-Type": "application/json"}

# What the API server's DefaultTolerationSeconds admission adds to every pod.
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]

# The version pyproject.toml declares: the one the CLI and /readyz report.
PROJECT_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def pod_json(
    runtime_class: str | None = None, tolerations: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """A Pod as kube-scheduler embeds it (no kind/apiVersion), with some fields we ignore."""
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {}}],
        "schedulerName": "default-scheduler",
        "tolerations": [*DEFAULT_TOLERATIONS, *tolerations],
        "priority": 0,
        "enableServiceLinks": True,
    }
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u-1", "labels": {"app": "x"}},
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def names_request(pod: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": list(names)}


def node_json(
    name: str, labels: Mapping[str, str] | None = None, taints: Sequence[Mapping[str, str]] = ()
) -> dict[str, Any]:
    """A Node as the API serves it, with the bulky fields real requests carry."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "300",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {"podCIDR": "10.0.0.0/24"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 321}],
            "someFutureField": {"x": 1},
        },
    }


SANDBOX_TAINT = {"key": "sandbox", "value": "true", "effect": "NoSchedule"}


def nodes_request(pod: dict[str, Any], nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}


async def post(client: Client, body: Any, headers: Mapping[str, str] = JSON) -> tuple[int, Any, str]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = await client.post("/filter", data=raw, headers=dict(headers))
    text = await response.text()
    return response.status, json.loads(text), text


@pytest.fixture
async def client(aiohttp_client: AiohttpClient, make_app: AppFactory) -> Client:
    test_client: Client = await aiohttp_client(make_app())
    return test_client


# --- names mode ---------------------------------------------------------------------

NAMES_CASES = [
    pytest.param(
        pod_json("gvisor"),
        ALL_NODES,
        GVISOR_NODES,
        dict.fromkeys(PLAIN_NODES, MISMATCH),
        id="gvisor-pod-lands-on-tainted-sandbox-nodes-via-class-toleration",
    ),
    pytest.param(
        pod_json(None),
        ALL_NODES,
        PLAIN_NODES,
        dict.fromkeys(GVISOR_NODES, UNTOLERATED),
        id="pod-without-runtimeclass-judged-on-taints",
    ),
    pytest.param(
        pod_json("runc"),
        ALL_NODES,
        PLAIN_NODES,
        dict.fromkeys(GVISOR_NODES, UNTOLERATED),
        id="class-without-scheduling-judged-on-own-tolerations",
    ),
    pytest.param(
        pod_json("runc", [SANDBOX_TAINT | {"operator": "Equal"}]),
        ALL_NODES,
        ALL_NODES,
        {},
        id="pod-own-toleration",
    ),
    pytest.param(
        pod_json("kata"),
        ["plain-1", "gvisor-1"],
        [],
        dict.fromkeys(["plain-1", "gvisor-1"], 'RuntimeClass "kata" not found'),
        id="missing-runtimeclass-fails-everywhere",
    ),
    pytest.param(pod_json("gvisor"), [], [], {}, id="no-candidates"),
]


@pytest.mark.parametrize(("pod", "names", "passing", "unresolvable"), NAMES_CASES)
async def test_names_mode(
    client: Client, pod: dict[str, Any], names: list[str], passing: list[str], unresolvable: dict[str, str]
) -> None:
    status, answer, _ = await post(client, names_request(pod, names))
    assert status == 200
    assert answer == {
        "Nodes": None,
        "NodeNames": passing,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }


async def test_empty_pass_sends_an_empty_list_never_null(client: Client) -> None:
    # Both lists null would make kube-scheduler reject every node without a reason.
    status, _, text = await post(client, names_request(pod_json("gvisor"), PLAIN_NODES))
    assert status == 200
    assert '"NodeNames":[]' in text.replace(" ", "")
    status, _, text = await post(client, nodes_request(pod_json("gvisor"), [node_json("plain-1")]))
    assert status == 200
    assert '"Nodes":{"metadata":{},"items":[]}' in text.replace(" ", "")


async def test_duplicate_names_answered_once(client: Client) -> None:
    names = ["plain-1", "gvisor-1", "plain-1", "gvisor-1", "plain-1"]
    status, answer, _ = await post(client, names_request(pod_json(None), names))
    assert status == 200
    assert answer["NodeNames"] == ["plain-1"]
    assert answer["FailedAndUnresolvableNodes"] == {"gvisor-1": UNTOLERATED}


async def test_unknown_node_name_goes_to_failed_nodes(client: Client) -> None:
    status, answer, _ = await post(
        client, names_request(pod_json("gvisor"), ["gvisor-1", "ghost", "plain-1"])
    )
    assert status == 200
    assert answer == {
        "Nodes": None,
        "NodeNames": ["gvisor-1"],
        # Not unresolvable: the node may appear once the cache catches up.
        "FailedNodes": {"ghost": UNKNOWN},
        "FailedAndUnresolvableNodes": {"plain-1": MISMATCH},
        "Error": "",
    }


# --- full-nodes mode ----------------------------------------------------------------


async def test_full_nodes_mode_echoes_the_passing_node_objects(client: Client) -> None:
    # Judged on the nodes in the request, not the cache: "fresh-1" is unknown to the
    # cluster file, and "plain-1" here carries the runtime label the cached one lacks.
    items = [
        node_json("gvisor-1", {"runtime/gvisor": "true"}, [SANDBOX_TAINT]),
        node_json("fresh-1", {"runtime/gvisor": "true"}),
        node_json(
            "plain-1", {"runtime/gvisor": "true"}, [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]
        ),
        node_json("plain-2"),
    ]
    sent = copy.deepcopy(items)
    status, answer, _ = await post(client, nodes_request(pod_json("gvisor"), items))
    assert status == 200
    assert answer == {
        "Nodes": {"metadata": {}, "items": [sent[0], sent[1]]},
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {"plain-1": UNTOLERATED, "plain-2": MISMATCH},
        "Error": "",
    }


async def test_full_nodes_mode_duplicates_answered_once(client: Client) -> None:
    plain = node_json("plain-1")
    status, answer, _ = await post(client, nodes_request(pod_json(None), [plain, plain, plain]))
    assert status == 200
    assert answer["Nodes"]["items"] == [plain]
    assert (answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]) == ({}, {})


@pytest.mark.parametrize("items", [[], None], ids=["empty-items", "null-items"])
async def test_full_nodes_mode_without_items(client: Client, items: list[Any] | None) -> None:
    body: dict[str, Any] = {
        "Pod": pod_json("gvisor"),
        "Nodes": {"metadata": {}, "items": items},
        "NodeNames": None,
    }
    status, answer, _ = await post(client, body)
    assert status == 200
    assert answer["Nodes"] == {"metadata": {}, "items": []}
    assert answer["NodeNames"] is None


# --- what kube-scheduler may send besides the basics ---------------------------------


async def test_lower_camel_case_keys_accepted(client: Client) -> None:
    body = {"pod": pod_json("gvisor"), "nodes": None, "nodeNames": ["gvisor-1", "plain-1"]}
    status, answer, _ = await post(client, body)
    assert status == 200
    assert answer["NodeNames"] == ["gvisor-1"]
    assert answer["FailedAndUnresolvableNodes"] == {"plain-1": MISMATCH}


async def test_unknown_fields_accepted(client: Client) -> None:
    pod = pod_json("gvisor")
    pod["spec"]["overhead"] = {"cpu": "250m"}
    pod["futureTopLevel"] = True
    body = names_request(pod, ["gvisor-1"]) | {"SomethingNew": {"a": [1, 2]}}
    status, answer, _ = await post(client, body)
    assert (status, answer["NodeNames"]) == (200, ["gvisor-1"])
    node = node_json(
        "gvisor-1", {"runtime/gvisor": "true"}, [SANDBOX_TAINT | {"timeAdded": "2026-01-01T00:00:00Z"}]
    )
    node["spec"]["futureSpec"] = "x"
    status, answer, _ = await post(client, nodes_request(pod_json("gvisor"), [node]))
    assert (status, answer["Nodes"]["items"]) == (200, [node])


async def test_content_type_with_charset_accepted(client: Client) -> None:
    headers = {"Content-Type": "application/json; charset=utf-8"}
    status, answer, _ = await post(client, names_request(pod_json(None), ["plain-1"]), headers)
    assert (status, answer["NodeNames"]) == (200, ["plain-1"])


# --- bad input ----------------------------------------------------------------------

GOOD = names_request(pod_json(None), ["plain-1"])


def _with(**changes: Any) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def _pod_spec(**changes: Any) -> bytes:
    pod = pod_json(None)
    pod["spec"].update(changes)
    return json.dumps({**GOOD, "Pod": pod}).encode()


BAD_BODIES = [
    pytest.param(b"{", None, id="truncated-json"),
    pytest.param(b"this is not json", None, id="not-json"),
    pytest.param(b"", None, id="empty-body"),
    pytest.param(b"null", None, id="json-null"),
    pytest.param(b"[]", None, id="json-array"),
    pytest.param(b"\xff\xfe{}", None, id="not-utf8"),
    pytest.param(json.dumps({"Nodes": None, "NodeNames": ["plain-1"]}).encode(), "Pod", id="pod-missing"),
    pytest.param(_with(Pod="p"), "Pod", id="pod-not-object"),
    pytest.param(_with(Pod={"metadata": {"name": "p"}}), "Pod.spec", id="pod-spec-missing"),
    pytest.param(_with(NodeNames="plain-1"), "NodeNames", id="nodenames-string"),
    pytest.param(_with(NodeNames=["plain-1", 7]), "NodeNames[1]", id="nodenames-item-not-string"),
    pytest.param(_with(NodeNames=None, Nodes=[]), "Nodes", id="nodes-list-not-object"),
    pytest.param(_with(NodeNames=None, Nodes={"items": {"a": 1}}), "Nodes.items", id="nodes-items-not-list"),
    pytest.param(
        _with(NodeNames=None, Nodes={"items": ["plain-1"]}), "Nodes.items[0]", id="nodes-item-not-object"
    ),
    pytest.param(
        _with(
            NodeNames=None, Nodes={"items": [{"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k"}]}}]}
        ),
        "items[0].spec.taints[0].effect",
        id="node-taint-without-effect",
    ),
    pytest.param(
        _with(NodeNames=None, Nodes={"items": [{"metadata": {"name": "n", "labels": {"a": 1}}}]}),
        "items[0].metadata.labels.a",
        id="node-label-not-string",
    ),
    pytest.param(
        _with(NodeNames=None, Nodes={"items": [{"metadata": {"labels": {}}}]}),
        "metadata.name",
        id="node-without-name",
    ),
    pytest.param(_with(Pod={"spec": None}), "Pod.spec", id="pod-spec-null"),
    pytest.param(
        _pod_spec(runtimeClassName=5), "Pod.spec.runtimeClassName", id="runtimeclassname-not-string"
    ),
    pytest.param(_pod_spec(tolerations={"key": "k"}), "Pod.spec.tolerations", id="tolerations-not-list"),
    pytest.param(
        _pod_spec(tolerations=[{"key": 1}]), "Pod.spec.tolerations[0].key", id="toleration-key-not-string"
    ),
    pytest.param(
        _with(Nodes={"metadata": {}, "items": []}),
        "exactly one of Nodes and NodeNames",
        id="both-nodes-and-names",
    ),
    pytest.param(_with(NodeNames=None), "exactly one of Nodes and NodeNames", id="neither-null"),
    pytest.param(
        json.dumps({"Pod": pod_json(None)}).encode(),
        "exactly one of Nodes and NodeNames",
        id="neither-absent",
    ),
]


@pytest.mark.parametrize(("body", "names"), BAD_BODIES)
async def test_bad_bodies_get_400_naming_the_problem(
    client: Client, caplog: pytest.LogCaptureFixture, body: bytes, names: str | None
) -> None:
    caplog.set_level(logging.DEBUG)
    response = await client.post("/filter", data=body, headers=JSON)
    text = await response.text()
    assert response.status == 400, text
    assert response.content_type == "application/json"
    answer = json.loads(text)
    assert answer["error"] == "malformed ExtenderArgs"
    assert isinstance(answer["detail"], str) and answer["detail"]
    if names is not None:
        assert names in answer["detail"]
    assert "Traceback" not in text
    # Bad client input is logged as one line, never with a stack trace.
    assert not [r for r in caplog.records if r.exc_info]
    await _still_serving(client)


async def _still_serving(client: Client) -> None:
    status, answer, _ = await post(client, GOOD)
    assert (status, answer["NodeNames"]) == (200, ["plain-1"])


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/filter", "POST"),
        ("PUT", "/filter", "POST"),
        ("DELETE", "/filter", "POST"),
        ("POST", "/healthz", "GET"),
        ("POST", "/readyz", "GET"),
    ],
)
async def test_wrong_method_gets_405(client: Client, method: str, path: str, allowed: str) -> None:
    response = await client.request(method, path, data=b"{}", headers=JSON)
    text = await response.text()
    assert response.status == 405
    assert response.content_type == "application/json"
    assert "error" in json.loads(text)
    assert allowed in response.headers["Allow"].split(",")
    assert "Traceback" not in text
    await _still_serving(client)


@pytest.mark.parametrize(
    ("headers", "got"),
    [
        pytest.param({"Content-Type": "text/plain"}, "got 'text/plain'", id="text-plain"),
        pytest.param(
            {"Content-Type": "application/x-www-form-urlencoded"},
            "got 'application/x-www-form-urlencoded'",
            id="form",
        ),
        pytest.param({"Content-Type": "application/jsonx"}, "got 'application/jsonx'", id="almost-json"),
        pytest.param({}, "got none", id="missing"),
    ],
)
async def test_non_json_content_type_gets_415(client: Client, headers: dict[str, str], got: str) -> None:
    # Post raw bytes so the client adds no Content-Type of its own.
    response = await client.post(
        "/filter", data=json.dumps(GOOD).encode(), headers=headers, skip_auto_headers=["Content-Type"]
    )
    text = await response.text()
    assert response.status == 415, text
    assert response.content_type == "application/json"
    assert json.loads(text) == {
        "error": "unsupported media type",
        "detail": f"Content-Type must be application/json, {got}",
    }
    assert "Traceback" not in text
    await _still_serving(client)


async def test_body_over_the_limit_gets_413_and_at_the_limit_is_accepted(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    at_limit = json.dumps(GOOD).encode()
    client = await aiohttp_client(make_app(max_body_bytes=len(at_limit)))
    response = await client.post("/filter", data=at_limit, headers=JSON)
    assert response.status == 200
    assert (await response.json())["NodeNames"] == ["plain-1"]

    over = json.dumps({**GOOD, "pad": "x"}).encode()
    response = await client.post("/filter", data=over, headers=JSON)
    text = await response.text()
    assert response.status == 413
    assert response.content_type == "application/json"
    assert "error" in json.loads(text)
    assert "Traceback" not in text

    response = await client.post("/filter", data=at_limit, headers=JSON)
    assert response.status == 200


async def test_default_limit_takes_a_large_full_nodes_request(client: Client) -> None:
    # Past aiohttp's own 1 MiB default (client_max_size), which would answer 413.
    items = [node_json(f"n-{i}", {"runtime/gvisor": "true"}) for i in range(2000)]
    body = json.dumps(nodes_request(pod_json("gvisor"), items)).encode()
    assert len(body) > 1024 * 1024
    response = await client.post("/filter", data=body, headers=JSON)
    assert response.status == 200
    assert len((await response.json())["Nodes"]["items"]) == 2000


@dataclass(frozen=True)
class Exploding:
    """A buggy plugin predicate."""

    name: str = "Exploding"

    def check(self, pod: PodView, runtime_class: RuntimeClassView | None, node: NodeView) -> Verdict:
        raise RuntimeError("plugin bug")


async def test_internal_error_is_500_json_without_traceback(
    aiohttp_client: AiohttpClient, make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    client = await aiohttp_client(make_app(policy=Policy((Exploding(),))))
    response = await client.post("/filter", json=GOOD)
    text = await response.text()
    assert response.status == 500
    assert json.loads(text) == {
        "error": "internal error",
        "detail": "the extender failed to answer; its log has the details",
    }
    assert "plugin bug" not in text and "Traceback" not in text
    # The trace is ours to read, in the log.
    assert any(r.exc_info and "plugin bug" in str(r.exc_info[1]) for r in caplog.records)
    response = await client.get("/healthz")
    assert response.status == 200


# --- sync state and probes -----------------------------------------------------------


async def test_not_synced_answers_error(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(state=ClusterState()))
    status, answer, _ = await post(client, names_request(pod_json("gvisor"), ["gvisor-1"]))
    assert status == 200
    assert answer["Error"] == "cluster state not synced"
    assert (answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]) == ({}, {})


async def test_full_nodes_mode_needs_only_runtimeclasses(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    state = ClusterState()
    state.runtime_classes.replace([RuntimeClassView("gvisor", "runsc", {"runtime/gvisor": "true"})])
    client = await aiohttp_client(make_app(state=state))
    items = [node_json("a", {"runtime/gvisor": "true"}), node_json("b")]
    status, answer, _ = await post(client, nodes_request(pod_json("gvisor"), items))
    assert status == 200
    assert answer["Error"] == ""
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["a"]
    # Names need the node cache, which has not synced.
    status, answer, _ = await post(client, names_request(pod_json("gvisor"), ["a"]))
    assert (status, answer["Error"]) == (200, "cluster state not synced")


async def test_readyz_follows_sync(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    state = ClusterState()
    client = await aiohttp_client(make_app(state=state))

    response = await client.get("/readyz")
    assert response.status == 503
    body = await response.json()
    assert body["unsynced"] == ["nodes", "runtimeclasses"]
    assert body["version"] == PROJECT_VERSION

    state.nodes.replace([NodeView("plain-1")])
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["unsynced"] == ["runtimeclasses"]

    state.runtime_classes.replace([])
    response = await client.get("/readyz")
    assert response.status == 200
    assert await response.json() == {"status": "ready", "warnings": [], "version": PROJECT_VERSION}

    status, answer, _ = await post(client, GOOD)
    assert (status, answer["NodeNames"], answer["Error"]) == (200, ["plain-1"], "")


async def test_healthz(client: Client) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_healthz_while_not_synced(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(state=ClusterState()))
    response = await client.get("/healthz")
    assert response.status == 200


async def test_reference_error_example_is_the_answer(client: Client) -> None:
    """docs/reference.md's error body example: a filter request without its Pod."""
    (shown,) = [
        json.loads(block)
        for block in fenced_blocks(section(page("reference.md"), "## HTTP endpoints"), "json")
        if '"error"' in block
    ]
    status, answer, _ = await post(client, {"Nodes": None, "NodeNames": ["plain-1"]})
    assert (status, answer) == (400, shown)
