"""Node autoscalers that cannot see the RuntimeClasses' rules: who is found, which classes
they miss, and what serve says of it (extender/autoscaling/autoscalers.py, autoscaler_check.py)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from extender.autoscaling.autoscalers import CLUSTER_AUTOSCALER, KARPENTER, Found, karpenter, unseen, warning
from extender.autoscaling.finder import AutoscalerCheck
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import runtime_class_from_api
from extender.cluster.state import ClusterState
from extender.http.wiring import build_app
from extender.kube import connect as kube
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX, default_serve_settings
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import NodeView, RuntimeClassView
from tests.support.apiserver import (
    CONFIGMAPS,
    NODES,
    RUNTIME_CLASSES,
    FakeApiServer,
    make_node,
    make_runtime_class,
)
from tests.support.apps import ClientFactory
from tests.support.autoscaler import status_configmap as cluster_autoscaler_status
from tests.support.docs import page
from tests.support.waiting import eventually

RULES = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy())
GAUGE = "runtimeclass_extender_autoscaler_unseen_runtimeclasses"


def rc(name: str, selector: dict[str, str] | None = None, term: str | None = None) -> RuntimeClassView:
    obj: dict[str, object] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "runsc"}
    obj["metadata"] = (
        {"name": name, "annotations": {NODE_SELECTOR_TERM_ANNOTATION: term}} if term else {"name": name}
    )
    if selector is not None:
        obj["scheduling"] = {"nodeSelector": selector}
    return runtime_class_from_api(obj)


GVISOR = rc("gvisor", {"runtime/gvisor": "true"})
GPU = rc("gpu", term='{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}')
RUNC = rc("runc")
CLASSES = [RUNC, GVISOR, GPU]


def test_which_classes_an_autoscaler_cannot_see() -> None:
    # Predicate mode: every class with node rules.
    assert unseen(CLASSES, RULES, label_nodes=False, admission_plugin=False) == [GPU, GVISOR]
    # Alongside admission: the plugin merged gvisor's selector into its pods.
    assert unseen(CLASSES, RULES, label_nodes=False, admission_plugin=True) == [GPU]
    # Large-cluster mode: every class's label is in its pods.
    assert unseen(CLASSES, RULES, label_nodes=True, admission_plugin=False) == []


def test_karpenter_is_found_by_the_labels_it_puts_on_its_nodes() -> None:
    assert karpenter([NodeView("a"), NodeView("b", labels={"karpenter.sh/nodepool": "default"})]) == Found(
        KARPENTER, "node b has the label karpenter.sh/nodepool"
    )
    assert karpenter([NodeView("a", labels={"karpenter.sh/provisioner-name": "p"})]) is not None
    assert karpenter([NodeView("a", labels={"kubernetes.io/os": "linux"})]) is None


def test_the_warning_names_who_runs_how_it_was_found_and_the_classes() -> None:
    found = [Found(CLUSTER_AUTOSCALER, "ConfigMap kube-system/cluster-autoscaler-status")]
    text = warning(found, [GPU, GVISOR], more=3)
    assert text is not None
    assert text.startswith(
        "cluster-autoscaler (ConfigMap kube-system/cluster-autoscaler-status) runs in this cluster and "
        "cannot see the node rules of RuntimeClass gpu, gvisor and 3 more: it will add no node"
    )
    assert "label-nodes" in text and "docs/autoscaling.md" in text
    two = warning([*found, Found(KARPENTER, "node b has the label karpenter.sh/nodepool")], [GVISOR])
    assert two is not None and " run in this cluster" in two
    assert warning([], [GVISOR]) is None
    assert warning(found, []) is None


# --- serve's check, against the test API server -------------------------------------------


@pytest.fixture
async def api(fake_apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[object]:
    conn = await kube.connect(kubeconfig=str(fake_apiserver.write_kubeconfig(tmp_path / "kubeconfig")))
    async with conn.api as client:
        yield client


def state_of(*classes: RuntimeClassView, nodes: tuple[NodeView, ...] = ()) -> ClusterState:
    state = ClusterState()
    state.nodes.replace(nodes)
    state.runtime_classes.replace(classes)
    return state


def status_configmap(server: FakeApiServer) -> None:
    server.add(CONFIGMAPS, cluster_autoscaler_status())


async def test_the_check_warns_once_while_cluster_autoscaler_runs_and_says_when_it_is_over(
    fake_apiserver: FakeApiServer, api: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.autoscalers")
    state = state_of(*CLASSES)
    check = AutoscalerCheck(
        api,
        state,
        RULES,
        status_configmap=("kube-system", "cluster-autoscaler-status"),
        admission_plugin=lambda: False,
    )
    registry = CollectorRegistry()
    check.register_metrics(registry)
    await check.check()
    assert (
        check.messages() == [] and registry.get_sample_value(GAUGE, {"autoscaler": CLUSTER_AUTOSCALER}) == 0
    )

    status_configmap(fake_apiserver)
    await check.check()
    await check.check()
    (message,) = check.messages()
    assert "cluster-autoscaler (ConfigMap kube-system/cluster-autoscaler-status)" in message
    assert "RuntimeClass gpu, gvisor:" in message
    assert registry.get_sample_value(GAUGE, {"autoscaler": CLUSTER_AUTOSCALER}) == 2
    assert registry.get_sample_value(GAUGE, {"autoscaler": KARPENTER}) == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [message]  # once, not per look

    # The classes' rules move into their pods (predicate mode with the node labels, or the classes lose
    # their rules): over, said once.
    state.runtime_classes.replace([RUNC])
    await check.check()
    assert (
        check.messages() == [] and registry.get_sample_value(GAUGE, {"autoscaler": CLUSTER_AUTOSCALER}) == 0
    )
    assert caplog.records[-1].getMessage().startswith("no node autoscaler that cannot see")


async def test_without_the_right_to_read_the_configmap_serve_says_so_once_and_still_finds_karpenter(
    fake_apiserver: FakeApiServer, api: object, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="extender.autoscalers")
    status_configmap(fake_apiserver)
    fake_apiserver.fail_next(10, 403, resource=CONFIGMAPS, message="forbidden")
    nodes = (NodeView("karp-1", labels={"karpenter.sh/nodepool": "default"}),)
    check = AutoscalerCheck(
        api,
        state_of(*CLASSES, nodes=nodes),
        RULES,
        status_configmap=("kube-system", "cluster-autoscaler-status"),
        admission_plugin=lambda: True,
    )
    await check.check()
    await check.check()
    (message,) = check.messages()
    assert message.startswith("karpenter (node karp-1 has the label karpenter.sh/nodepool) runs")
    assert "RuntimeClass gpu:" in message  # alongside admission: gvisor's selector is in its pods
    refused = [
        r
        for r in caplog.records
        if "cannot read ConfigMap kube-system/cluster-autoscaler-status" in r.getMessage()
    ]
    assert len(refused) == 1
    gets = [r for r in fake_apiserver.requests if r.verb == "get" and "configmaps" in r.path]
    assert len(gets) == 1  # not asked again


def test_the_warning_docs_autoscaling_md_shows_is_the_one_serve_logs() -> None:
    found = [Found(CLUSTER_AUTOSCALER, "ConfigMap kube-system/cluster-autoscaler-status")]
    text = warning(found, [GVISOR])
    assert text is not None
    shown = [
        line.strip()
        for line in page("autoscaling.md").splitlines()
        if line.startswith("      cluster-autoscaler (")
    ]
    assert shown == [text]


async def test_serve_says_it_in_its_log_readyz_and_metric_while_cluster_autoscaler_runs(
    fake_apiserver: FakeApiServer,
    fake_kubeconfig: Path,
    aiohttp_client: ClientFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """serve as wired (build_app, live mode, predicate mode without label-nodes): the
    check runs once the caches are listed, and its warning reaches the log once, the
    ``warnings`` of /readyz and the gauge on /metrics."""
    caplog.set_level(logging.INFO, logger="extender.autoscalers")
    fake_apiserver.add(NODES, make_node("n1", labels={"pool": "gvisor"}))
    fake_apiserver.add(RUNTIME_CLASSES, make_runtime_class("gvisor", node_selector={"pool": "gvisor"}))
    status_configmap(fake_apiserver)
    app, _ = await build_app(default_serve_settings(kubeconfig=str(fake_kubeconfig)))
    client = await aiohttp_client(app)

    async def warned() -> list[str]:
        body = await (await client.get("/readyz")).json()
        return [w for w in body["warnings"] if w.startswith("cluster-autoscaler (ConfigMap kube-system/")]

    await eventually(warned, what="the warning in /readyz")
    (message,) = await warned()
    assert "cannot see the node rules of RuntimeClass gvisor" in message
    metrics = await (await client.get("/metrics")).text()
    assert f'{GAUGE}{{autoscaler="{CLUSTER_AUTOSCALER}"}} 1.0' in metrics
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [message]
