"""What the pod admission table says of each RuntimeClass (extender/admission/pod_table.py)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.admission.pod_table import entry, table
from extender.cluster.class_labels import ClassLabels, label_key
from extender.cluster.objects import runtime_class_from_api
from extender.policy_file import load_policy
from extender.settings import DEFAULT_NODE_LABEL_PREFIX
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import RuntimeClassView
from policies.registry import build_policy

LONG = "sandboxed-runtime-for-untrusted-workloads-with-a-rather-long-class-name"
LABELS = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, load_policy())


def view(name: str, annotations: dict[str, str] | None = None, **fields: object) -> RuntimeClassView:
    metadata: dict[str, object] = {"name": name}
    if annotations:
        metadata["annotations"] = annotations
    return runtime_class_from_api(
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": metadata,
            "handler": "runsc",
            **fields,
        }
    )


OVERHEAD = {"cpu": "250m", "memory": "64Mi"}
# Without label-nodes, a class with node rules marks its pods for the autoscalers.
MARKED = {
    "podAnnotations": {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "karpenter.sh/do-not-disrupt": "true",
    }
}
CASES: list[tuple[RuntimeClassView, dict[str, Any], dict[str, Any]]] = [
    # (class, without label-nodes, with label-nodes)
    (
        view("gvisor", overhead={"podFixed": OVERHEAD}, scheduling={"nodeSelector": {"a": "b"}}),
        # ...unless the pod's nodeSelector shows the class's selector, all its rules.
        {"overhead": OVERHEAD, **MARKED, "unlessNodeSelector": {"a": "b"}},
        {"overhead": OVERHEAD, "nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/gvisor", "unlessNodeSelector": {"a": "b"}},
    ),
    # A term no nodeSelector can show: marked whatever the pod asks for.
    (
        view(
            "gpu",
            {NODE_SELECTOR_TERM_ANNOTATION: '{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}'},
            scheduling={"nodeSelector": {"a": "b"}},
        ),
        MARKED,
        {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/gpu"},
    ),
    (view("plain"), {}, {}),
    # overhead without podFixed: not the same as no overhead (a pod's own overhead is
    # refused with another message).
    (view("empty-overhead", overhead={}), {"overhead": {}}, {"overhead": {}}),
    (view("empty-selector", scheduling={"nodeSelector": {}}), {}, {}),
    # A malformed annotation fails closed: node rules all the same.
    (
        view("term", {NODE_SELECTOR_TERM_ANNOTATION: "not: [valid"}),
        MARKED,
        {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/term"},
    ),
    # Past 63 characters the label is hashed, as the labeller names it.
    (
        view(LONG, overhead={"podFixed": {"cpu": "1"}}, scheduling={"nodeSelector": {"a": "b"}}),
        {"overhead": {"cpu": "1"}, **MARKED, "unlessNodeSelector": {"a": "b"}},
        {"overhead": {"cpu": "1"}, "nodeLabel": label_key(DEFAULT_NODE_LABEL_PREFIX, LONG), "unlessNodeSelector": {"a": "b"}},
    ),
]


@pytest.mark.parametrize(("runtime_class", "plain", "labelled"), CASES, ids=[c[0].name[:20] for c in CASES])
def test_each_class_entry(
    runtime_class: RuntimeClassView, plain: dict[str, Any], labelled: dict[str, Any]
) -> None:
    assert entry(runtime_class, None, LABELS) == plain
    assert entry(runtime_class, LABELS, LABELS) == labelled
    # The label is exactly the one the labeller keeps, where it keeps one; without it,
    # the same classes are marked.
    assert ("nodeLabel" in labelled) == LABELS.has_node_rules(runtime_class) == ("podAnnotations" in plain)


def test_a_policy_rule_beyond_the_selector_marks_every_class_whatever_its_pods_ask() -> None:
    handler_policy = build_policy(
        {
            "apiVersion": "runtimeclass-extender.dev/v1alpha1",
            "kind": "Policy",
            "predicates": [{"name": "RuntimeClassNodeSelector"}, {"name": "RuntimeHandler"}],
        }
    )
    rules = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, handler_policy)
    assert entry(view("plain"), None, rules) == MARKED
    assert entry(view("gvisor", scheduling={"nodeSelector": {"a": "b"}}), None, rules) == MARKED


def test_the_table_has_one_entry_per_class() -> None:
    classes = [c[0] for c in CASES]
    assert table(classes, None, LABELS) == {c.name: plain for c, plain, _ in CASES}
    assert table([], LABELS, LABELS) == {}


def test_with_label_nodes_a_class_gives_its_pods_the_tolerations_the_extender_honours() -> None:
    """NoSchedule ones, one without an effect made one for NoSchedule, NoExecute and
    PreferNoSchedule ones left out (the extender counts a class's for NoSchedule taints
    alone): what an autoscaler must read in the pod to pick a tainted group."""
    tolerant = view(
        "tolerant",
        scheduling={
            "tolerations": [
                {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"},
                {"key": "any", "operator": "Exists"},
                {"key": "evict", "operator": "Exists", "effect": "NoExecute"},
                {"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"},
                {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"},
            ]
        },
    )
    assert entry(tolerant, LABELS, LABELS) == {
        "tolerations": [
            {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"},
            {"key": "any", "operator": "Exists", "effect": "NoSchedule"},
        ]
    }
    # Predicate mode: the extender judges taints; nothing is copied into pods.
    assert entry(tolerant, None, LABELS) == {}
