"""What the pod admission table says of each RuntimeClass (extender/admission/pod_table.py)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.admission.pod_table import admitted_by_plugin, entry, table, table_spec
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
GVISOR_LABEL = {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/gvisor"}
CASES: list[tuple[RuntimeClassView, dict[str, Any], bool]] = [
    # (class, its entry in every mode, whether the RuntimeClass admission plugin constrains
    # its pods fully where it runs)
    (
        view("gvisor", overhead={"podFixed": OVERHEAD}, scheduling={"nodeSelector": {"a": "b"}}),
        # ...unless the pod's nodeSelector shows the class's selector, all its rules.
        {"overhead": OVERHEAD, **GVISOR_LABEL, "unlessNodeSelector": {"a": "b"}},
        True,
    ),
    # A term no nodeSelector can show: the label whatever the pod asks for.
    (
        view(
            "gpu",
            {NODE_SELECTOR_TERM_ANNOTATION: '{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}'},
            scheduling={"nodeSelector": {"a": "b"}},
        ),
        {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/gpu"},
        False,
    ),
    (view("plain"), {}, True),
    # overhead without podFixed: not the same as no overhead (a pod's own overhead is
    # refused with another message).
    (view("empty-overhead", overhead={}), {"overhead": {}}, True),
    (view("empty-selector", scheduling={"nodeSelector": {}}), {}, True),
    # A malformed annotation fails closed: node rules all the same.
    (
        view("term", {NODE_SELECTOR_TERM_ANNOTATION: "not: [valid"}),
        {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/term"},
        False,
    ),
    # Past 63 characters the label is hashed, as the labeller names it.
    (
        view(LONG, overhead={"podFixed": {"cpu": "1"}}, scheduling={"nodeSelector": {"a": "b"}}),
        {
            "overhead": {"cpu": "1"},
            "nodeLabel": label_key(DEFAULT_NODE_LABEL_PREFIX, LONG),
            "unlessNodeSelector": {"a": "b"},
        },
        True,
    ),
]


@pytest.mark.parametrize(
    ("runtime_class", "wanted", "constrained"), CASES, ids=[c[0].name[:20] for c in CASES]
)
def test_each_class_entry(runtime_class: RuntimeClassView, wanted: dict[str, Any], constrained: bool) -> None:
    assert entry(runtime_class, LABELS) == wanted
    # The label is exactly the one the labeller keeps, where it keeps one.
    assert ("nodeLabel" in wanted) == LABELS.has_node_rules(runtime_class)
    assert admitted_by_plugin({runtime_class.name: wanted}) == ([runtime_class.name] if constrained else [])


def test_a_policy_rule_beyond_the_selector_gives_every_class_a_label_whatever_its_pods_ask() -> None:
    handler_policy = build_policy(
        {
            "apiVersion": "runtimeclass-extender.dev/v1alpha1",
            "kind": "Policy",
            "predicates": [{"name": "RuntimeClassNodeSelector"}, {"name": "RuntimeHandler"}],
        }
    )
    rules = ClassLabels(DEFAULT_NODE_LABEL_PREFIX, handler_policy)
    assert entry(view("plain"), rules) == {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/plain"}
    gvisor = entry(view("gvisor", scheduling={"nodeSelector": {"a": "b"}}), rules)
    assert gvisor == GVISOR_LABEL
    # The plugin cannot check the handler: nothing is constrained by it alone.
    assert admitted_by_plugin({"gvisor": gvisor}) == []


def test_the_table_has_one_entry_per_class_and_says_what_else_holds() -> None:
    classes = [c[0] for c in CASES]
    entries = table(classes, LABELS)
    assert entries == {c.name: wanted for c, wanted, _ in CASES}
    assert table([], LABELS) == {}
    assert table_spec(entries) == {"runtimeClasses": entries}
    assert table_spec(entries, label_nodes=True, admission_plugin=True) == {
        "runtimeClasses": entries,
        "labelNodes": True,
        "runtimeClassAdmissionPlugin": True,
    }


def test_a_class_gives_its_pods_the_tolerations_the_extender_honours() -> None:
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
    assert entry(tolerant, LABELS) == {
        "tolerations": [
            {"key": "sandbox", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"},
            {"key": "any", "operator": "Exists", "effect": "NoSchedule"},
        ]
    }
