"""Explain: every failing predicate with its detail, the filter's reason, and the summary
in kube-scheduler's FitError wording (pure, and over HTTP)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from pytest_aiohttp import AiohttpClient

from extender.cluster.file_source import load_cluster_file
from extender.cluster.state import ClusterState
from extender.explain import availability_message, explain, explain_nodes, runtime_class_pod
from extender.policy_file import load_policy
from extender.view_json import from_json, to_json
from policies.objects import (
    NodeView,
    PodView,
    RuntimeClassView,
    RuntimeHandler,
    SelectorRequirement,
    Taint,
    Toleration,
)
from policies.registry import BUILTIN_FACTORIES, Policy, build_policy
from tests.support.apps import AppFactory
from tests.support.paths import EXAMPLE_CLUSTER

SANDBOX_TAINT = Taint("sandbox.gke.io/runtime", "NoSchedule", "gvisor")
SANDBOX_TOLERATION = Toleration("sandbox.gke.io/runtime", "Equal", "gvisor", "NoSchedule")


def labels(**kv: str) -> MappingProxyType[str, str]:
    return MappingProxyType({k.replace("_", "/"): v for k, v in kv.items()})


GVISOR = RuntimeClassView(
    name="gvisor",
    handler="runsc",
    node_selector=labels(sandbox="gvisor"),
    tolerations=(SANDBOX_TOLERATION,),
)


def every_builtin_policy() -> Policy:
    """All built-in predicates, the runtime-handler check strict."""
    entries: list[dict[str, Any]] = [{"name": name} for name in BUILTIN_FACTORIES]
    for entry in entries:
        if entry["name"] == "RuntimeHandler":
            entry["options"] = {"nodesWithoutReport": "fail"}
    return build_policy(
        {"apiVersion": "runtimeclass-extender.dev/v1alpha1", "kind": "Policy", "predicates": entries}
    )


GOOD_NODE = NodeView(
    "good",
    labels=labels(sandbox="gvisor"),
    taints=(SANDBOX_TAINT,),
    runtime_handlers=(RuntimeHandler("runsc"),),
)

# (predicate, pod, runtime class, node, expected reason, expected detail substring)
PREDICATE_CASES: list[tuple[str, PodView, RuntimeClassView | None, NodeView, str, str]] = [
    (
        "RuntimeClassExists",
        PodView(runtime_class_name="missing"),
        None,
        NodeView("n", runtime_handlers=(RuntimeHandler("runsc"),)),
        'RuntimeClass "missing" not found',
        "no RuntimeClass named 'missing'",
    ),
    (
        "RuntimeClassNodeSelector",
        PodView(runtime_class_name="gvisor"),
        GVISOR,
        NodeView("n", labels=labels(sandbox="kata"), runtime_handlers=(RuntimeHandler("runsc"),)),
        "node(s) didn't match RuntimeClass",
        "label sandbox is 'kata', not 'gvisor'",
    ),
    (
        "TaintToleration",
        PodView(runtime_class_name="gvisor"),
        GVISOR,
        NodeView(
            "n",
            labels=labels(sandbox="gvisor"),
            taints=(Taint("dedicated", "NoSchedule", "ml"),),
            runtime_handlers=(RuntimeHandler("runsc"),),
        ),
        "node(s) had untolerated taint(s)",
        "untolerated taint dedicated=ml:NoSchedule",
    ),
    (
        "RuntimeHandler",
        PodView(runtime_class_name="gvisor"),
        GVISOR,
        NodeView(
            "n",
            labels=labels(sandbox="gvisor"),
            taints=(SANDBOX_TAINT,),
            runtime_handlers=(RuntimeHandler("runc"),),
        ),
        'node(s) don\'t support runtime handler "runsc"',
        "'runsc' not in the node's runtimeHandlers",
    ),
]


def test_cases_cover_every_builtin_predicate() -> None:
    assert {case[0] for case in PREDICATE_CASES} == set(BUILTIN_FACTORIES)


@pytest.mark.parametrize(
    ("predicate", "pod", "rc", "node", "reason", "detail"),
    PREDICATE_CASES,
    ids=[c[0] for c in PREDICATE_CASES],
)
def test_explain_names_each_builtin_predicate(
    predicate: str, pod: PodView, rc: RuntimeClassView | None, node: NodeView, reason: str, detail: str
) -> None:
    explanation = explain_nodes(pod, rc, [node], every_builtin_policy())
    (only,) = explanation.nodes
    assert not only.fits
    assert [(f.predicate, f.reason) for f in only.failures] == [(predicate, reason)]
    assert detail in only.failures[0].detail
    assert only.reason == reason
    assert only.unresolvable
    assert explanation.summary == f"0/1 nodes are available: 1 {reason}."


def test_good_node_fits_every_builtin_predicate() -> None:
    explanation = explain_nodes(
        PodView(runtime_class_name="gvisor"), GVISOR, [GOOD_NODE], every_builtin_policy()
    )
    assert explanation.nodes[0].fits
    assert explanation.nodes[0].reason == ""
    assert explanation.summary == "1/1 nodes are available."


def test_all_failing_predicates_in_policy_order_reason_is_the_first() -> None:
    node = NodeView(
        "bad", labels=labels(), taints=(Taint("os", "NoSchedule", "windows"),), runtime_handlers=()
    )
    (only,) = explain_nodes(
        PodView(runtime_class_name="gvisor"), GVISOR, [node], every_builtin_policy()
    ).nodes
    policy_order = [n for n in every_builtin_policy().names if n != "RuntimeClassExists"]
    assert [f.predicate for f in only.failures] == policy_order
    assert only.reason == "node(s) didn't match RuntimeClass"
    details = {f.predicate: f.detail for f in only.failures}
    assert details["RuntimeClassNodeSelector"] == "missing label sandbox=gvisor"
    assert details["TaintToleration"] == "untolerated taint os=windows:NoSchedule"
    assert "no status.runtimeHandlers" in details["RuntimeHandler"]


def test_expressive_selector_and_invalid_annotation_are_explained() -> None:
    term_class = RuntimeClassView(
        name="gpu",
        handler="runsc",
        match_expressions=(SelectorRequirement("gpu.count", "Gt", ("0",)),),
    )
    node = NodeView("n", labels=MappingProxyType({"gpu.count": "0"}))
    (only,) = explain_nodes(PodView(runtime_class_name="gpu"), term_class, [node], load_policy()).nodes
    assert only.reason == "node(s) didn't match RuntimeClass"
    assert "gpu.count" in only.failures[0].detail

    broken = RuntimeClassView(name="broken", handler="runsc", selector_error="annotation x: not JSON")
    (only,) = explain_nodes(PodView(runtime_class_name="broken"), broken, [node], load_policy()).nodes
    assert only.reason == 'RuntimeClass "broken" has an invalid node selector annotation'
    assert only.failures[0].detail == "annotation x: not JSON"


def test_pod_tolerations_count() -> None:
    tainted = NodeView("t", labels=labels(sandbox="gvisor"), taints=(Taint("dedicated", "NoExecute", "ml"),))
    policy = load_policy()
    without = explain_nodes(PodView(runtime_class_name="gvisor"), GVISOR, [tainted], policy)
    assert without.nodes[0].reason == "node(s) had untolerated taint(s)"
    pod = PodView(runtime_class_name="gvisor", tolerations=(Toleration("dedicated", "Exists"),))
    assert explain_nodes(pod, GVISOR, [tainted], policy).nodes[0].fits


def test_noexecute_needs_the_pods_own_toleration() -> None:
    rc = RuntimeClassView(name="x", handler="h", tolerations=(Toleration("k", "Exists"),))
    node = NodeView("n", taints=(Taint("k", "NoExecute"),))
    (only,) = explain_nodes(PodView(runtime_class_name="x"), rc, [node], load_policy()).nodes
    assert "NoExecute needs the pod's own toleration" in only.failures[0].detail


# kube-scheduler's FitError.Error: "<count> <reason>" sorted as strings, ", "-joined.
@pytest.mark.parametrize(
    ("total", "available", "reasons", "message"),
    [
        (
            6,
            0,
            {"node(s) didn't match RuntimeClass": 4, "node(s) had untolerated taint(s)": 2},
            "0/6 nodes are available: 2 node(s) had untolerated taint(s), 4 node(s) didn't match RuntimeClass.",
        ),
        (
            # Verbatim from a kube-scheduler 1.36 FailedScheduling event (filter part).
            6,
            0,
            {
                "node(s) didn't match RuntimeClass": 1,
                "node(s) had untolerated RuntimeClass taint (unresolvable)": 1,
                "node(s) didn't match Pod's node affinity/selector": 4,
            },
            "0/6 nodes are available: 1 node(s) didn't match RuntimeClass, 1 node(s) had untolerated "
            "RuntimeClass taint (unresolvable), 4 node(s) didn't match Pod's node affinity/selector.",
        ),
        # Byte order, as Go's sort.Strings: "10 ..." before "2 ...".
        (12, 0, {"b": 10, "a": 2}, "0/12 nodes are available: 10 b, 2 a."),
        (7, 2, {"x": 5}, "2/7 nodes are available: 5 x."),
        (3, 3, {}, "3/3 nodes are available."),
        (0, 0, {}, "no nodes available to schedule pods"),
    ],
)
def test_availability_message(total: int, available: int, reasons: dict[str, int], message: str) -> None:
    assert availability_message(total, available, reasons) == message


def test_example_cluster_summary_matches_the_filter(example_state: ClusterState) -> None:
    explanation = explain(runtime_class_pod("gvisor"), example_state, load_policy())
    counts = explanation.reason_counts()
    assert explanation.fitting == sum(1 for n in explanation.nodes if n.fits) > 0
    assert sum(counts.values()) + explanation.fitting == len(example_state.nodes)
    # Each node counted once, by its first failing predicate (win-1 fails two).
    win = next(n for n in explanation.nodes if n.node == "win-1")
    assert len(win.failures) == 2
    assert win.reason == "node(s) didn't match RuntimeClass"


def test_view_codec_round_trips_every_field() -> None:
    rc = RuntimeClassView(
        name="gpu",
        handler="runsc",
        node_selector=labels(a="b"),
        tolerations=(SANDBOX_TOLERATION,),
        match_expressions=(SelectorRequirement("k", "In", ("x", "y")),),
        selector_error=None,
        resource_version="7",
    )
    node = NodeView(
        "n",
        labels=labels(a="b"),
        taints=(SANDBOX_TAINT,),
        runtime_handlers=(RuntimeHandler("runsc", frozenset({"userNamespaces"})),),
        resource_version="9",
    )
    assert from_json(RuntimeClassView, to_json(rc)) == rc
    assert from_json(NodeView, to_json(node)) == node
    assert to_json(node)["runtimeHandlers"] == [{"name": "runsc", "features": ["userNamespaces"]}]


# ----- HTTP ---------------------------------------------------------------------------


@pytest.fixture
def example_state() -> ClusterState:
    return load_cluster_file(EXAMPLE_CLUSTER)


async def test_get_explain_runtime_class(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    response = await client.get("/explain/runtimeclasses/gvisor")
    assert response.status == 200
    body = await response.json()
    assert body["pod"]["runtimeClassName"] == "gvisor"
    assert body["pod"]["tolerations"] == []
    assert body["runtimeClass"]["handler"] == "runsc"
    nodes = {n["name"]: n for n in body["nodes"]}
    assert nodes["gvisor-1"]["fits"] and nodes["gvisor-1"]["failures"] == []
    assert nodes["runc-1"]["reason"] == "node(s) didn't match RuntimeClass"
    assert nodes["runc-1"]["failures"][0]["detail"] == "missing label sandbox.gke.io/runtime=gvisor"
    win = nodes["win-1"]["failures"]
    assert [f["predicate"] for f in win] == ["RuntimeClassNodeSelector", "TaintToleration"]
    assert win[1]["detail"] == "untolerated taint os=windows:NoSchedule"
    assert body["fitting"] == 2 and body["nodeCount"] == len(nodes)
    rejected = sum(r["count"] for r in body["reasons"])
    assert rejected == len(nodes) - 2
    assert body["summary"].startswith(f"2/{len(nodes)} nodes are available: ")


async def test_get_unknown_runtime_class_is_404(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    response = await client.get("/explain/runtimeclasses/nope")
    assert response.status == 404
    assert await response.json() == {
        "error": "RuntimeClass not found",
        "detail": 'RuntimeClass "nope" not found',
    }


async def test_post_pod_with_own_tolerations(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "runtimeClassName": "runc",
            "containers": [{"name": "c", "image": "x"}],
            "tolerations": [{"key": "sandbox.gke.io/runtime", "operator": "Exists"}],
        },
    }
    body = await (await client.post("/explain", json=pod)).json()
    nodes = {n["name"]: n for n in body["nodes"]}
    # runc's selector is os=linux: the sandbox nodes fit only with the pod's toleration.
    assert nodes["gvisor-1"]["fits"]
    assert body["pod"]["tolerations"][0]["key"] == "sandbox.gke.io/runtime"
    without = await (await client.get("/explain/runtimeclasses/runc")).json()
    assert {n["name"]: n["fits"] for n in without["nodes"]}["gvisor-1"] is False


async def test_post_pod_naming_unknown_class_explains_everywhere(
    aiohttp_client: AiohttpClient, make_app: AppFactory
) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    response = await client.post("/explain", json={"spec": {"runtimeClassName": "nope"}})
    assert response.status == 200
    body = await response.json()
    assert body["runtimeClass"] is None
    assert {n["reason"] for n in body["nodes"]} == {'RuntimeClass "nope" not found'}
    n = body["nodeCount"]
    assert body["summary"] == f'0/{n} nodes are available: {n} RuntimeClass "nope" not found.'


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"not json", "pod: Invalid JSON"),
        (b"[]", "pod: Input should be an object"),
        (b'{"spec": {"tolerations": "x"}}', "pod.spec.tolerations"),
        (b'{"metadata": {}}', "pod.spec: Field required"),
    ],
)
async def test_post_malformed_pod_is_400(
    aiohttp_client: AiohttpClient, make_app: AppFactory, data: bytes, detail: str
) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    response = await client.post("/explain", data=data, headers={"Content-Type": "application/json"})
    assert response.status == 400
    body = await response.json()
    assert body["error"] == "malformed Pod"
    assert body["detail"].startswith(detail)


async def test_post_wrong_content_type_is_415(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(cluster_file=EXAMPLE_CLUSTER))
    response = await client.post("/explain", data=b"{}", headers={"Content-Type": "text/plain"})
    assert response.status == 415
    assert "error" in await response.json()


async def test_unsynced_state_is_503(aiohttp_client: AiohttpClient, make_app: AppFactory) -> None:
    client = await aiohttp_client(make_app(state=ClusterState()))
    for response in (
        await client.get("/explain/runtimeclasses/gvisor"),
        await client.post("/explain", json={"spec": {}}),
    ):
        assert response.status == 503
        assert (await response.json())["error"] == "cluster state not synced"
