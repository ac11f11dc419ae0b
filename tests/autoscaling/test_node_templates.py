"""extender.autoscaling.node_templates: a node group's template against the RuntimeClasses."""

from __future__ import annotations

import pytest

from extender.autoscaling.node_templates import judge, kubelet_refuses, placement_taints, snippets
from extender.cluster.class_labels import ClassLabels
from extender.cluster.objects import runtime_class_from_api
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from policies.objects import NodeView, Taint

RULES = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy())
GVISOR = runtime_class_from_api(
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "gvisor"},
        "handler": "runsc",
        "scheduling": {"nodeSelector": {"runtime/gvisor": "true"}},
    }
)
PLAIN = runtime_class_from_api(
    {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "plain"}, "handler": "runc"}
)
LABEL = f"{DEFAULT_NODE_LABEL_PREFIX}/gvisor"


def test_a_class_without_node_rules_runs_everywhere_and_needs_no_label() -> None:
    verdict = judge(NodeView("t", labels={"runtime/gvisor": "true"}), [PLAIN, GVISOR], RULES)
    assert [(v.name, v.runs, v.label) for v in verdict.classes] == [
        ("gvisor", True, LABEL),
        ("plain", True, None),
    ]
    assert verdict.labels == verdict.missing == {LABEL: "true"}


def test_a_template_that_already_carries_the_label_misses_nothing() -> None:
    verdict = judge(NodeView("t", labels={"runtime/gvisor": "true", LABEL: "true"}), [GVISOR], RULES)
    assert verdict.missing == {} and verdict.stray == []


def test_taints_an_autoscaler_ignores_in_a_template_are_not_the_pods_business() -> None:
    node = NodeView(
        "t",
        taints=(
            Taint("startup-taint.cluster-autoscaler.kubernetes.io/runtimeclass-labels", "NoSchedule"),
            Taint("node.kubernetes.io/not-ready", "NoSchedule"),
            Taint("sandbox", "NoSchedule", "gvisor"),
            Taint("soft", "PreferNoSchedule"),
        ),
    )
    assert [str(t) for t in placement_taints(node)] == ["sandbox=gvisor:NoSchedule"]


def test_no_labels_no_snippets_and_no_startup_taint_when_off() -> None:
    assert snippets({}, "x") == {}
    found = snippets({LABEL: "true"}, "")
    assert "register-with-taints" not in found["aws"] and "startupTaints" not in found["karpenter"]


def test_pods_must_tolerate_what_their_class_does_not_give_them() -> None:
    tolerant = runtime_class_from_api(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "tolerant"},
            "handler": "runsc",
            "scheduling": {"tolerations": [{"key": "sandbox", "operator": "Exists"}]},
        }
    )
    node = NodeView(
        "t", taints=(Taint("sandbox", "NoSchedule", "gvisor"), Taint("sandbox", "NoExecute", "gvisor"))
    )
    by_name = {v.name: v for v in judge(node, [tolerant, PLAIN], RULES).classes}
    # A NoExecute taint always needs the pod's own toleration.
    assert by_name["tolerant"].taints == ("sandbox=gvisor:NoExecute",)
    assert by_name["plain"].taints == ("sandbox=gvisor:NoSchedule", "sandbox=gvisor:NoExecute")


@pytest.mark.parametrize(
    ("prefix", "refused"),
    [
        (DEFAULT_NODE_LABEL_PREFIX, True),
        ("node-restriction.kubernetes.io", True),
        ("k8s.io", True),
        ("example.k8s.io", True),
        ("node.kubernetes.io", False),
        ("rc.kubelet.kubernetes.io", False),
        ("example.com", False),
        ("notkubernetes.io", False),
    ],
)
def test_the_kubelet_refuses_labels_of_the_kubernetes_domains_but_its_own(prefix: str, refused: bool) -> None:
    assert kubelet_refuses(prefix) is refused


def test_gke_and_aks_node_pools_take_a_prefix_of_ones_own_domain() -> None:
    found = snippets({"example.com/gvisor": "true", "example.com/runc": "true"}, "example.com/starting")
    assert found["gke-aks"].splitlines() == [
        "# GKE (POOL, CLUSTER: yours)",
        "gcloud container node-pools create POOL --cluster=CLUSTER "
        "--node-labels=example.com/gvisor=true,example.com/runc=true --node-taints=example.com/starting=true:NoSchedule",
        "# AKS (GROUP, CLUSTER, POOL: yours)",
        "az aks nodepool add --resource-group GROUP --cluster-name CLUSTER --name POOL "
        "--labels example.com/gvisor=true example.com/runc=true --node-taints example.com/starting=true:NoSchedule",
    ]
    without_taint = snippets({"example.com/gvisor": "true"}, "")["gke-aks"]
    assert "--node-taints" not in without_taint and "--node-labels=example.com/gvisor=true" in without_taint


def test_gke_and_aks_node_pools_cannot_take_the_default_prefix() -> None:
    text = snippets({LABEL: "true"}, "example.com/starting")["gke-aks"]
    assert text.startswith(
        f"# A node pool label under {DEFAULT_NODE_LABEL_PREFIX}/ cannot be set: the kubelet refuses it\n"
    )
    # No command that would fail: only comments, the startup taint among them.
    assert all(line.startswith("# ") for line in text.splitlines())
    assert "--node-labels=" not in text and "--node-taints=example.com/starting=true:NoSchedule" in text
