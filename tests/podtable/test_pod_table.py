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
CASES: list[tuple[RuntimeClassView, dict[str, Any], dict[str, Any]]] = [
    # (class, without label-nodes, with label-nodes)
    (
        view("gvisor", overhead={"podFixed": OVERHEAD}, scheduling={"nodeSelector": {"a": "b"}}),
        {"overhead": OVERHEAD},
        {"overhead": OVERHEAD, "nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/gvisor"},
    ),
    (view("plain"), {}, {}),
    # overhead without podFixed: not the same as no overhead (a pod's own overhead is
    # refused with another message).
    (view("empty-overhead", overhead={}), {"overhead": {}}, {"overhead": {}}),
    (view("empty-selector", scheduling={"nodeSelector": {}}), {}, {}),
    # A malformed annotation fails closed: node rules all the same.
    (
        view("term", {NODE_SELECTOR_TERM_ANNOTATION: "not: [valid"}),
        {},
        {"nodeLabel": f"{DEFAULT_NODE_LABEL_PREFIX}/term"},
    ),
    # Past 63 characters the label is hashed, as the labeller names it.
    (
        view(LONG, overhead={"podFixed": {"cpu": "1"}}, scheduling={"nodeSelector": {"a": "b"}}),
        {"overhead": {"cpu": "1"}},
        {"overhead": {"cpu": "1"}, "nodeLabel": label_key(DEFAULT_NODE_LABEL_PREFIX, LONG)},
    ),
]


@pytest.mark.parametrize(("runtime_class", "plain", "labelled"), CASES, ids=[c[0].name[:20] for c in CASES])
def test_each_class_entry(
    runtime_class: RuntimeClassView, plain: dict[str, Any], labelled: dict[str, Any]
) -> None:
    assert entry(runtime_class, None) == plain
    assert entry(runtime_class, LABELS) == labelled
    # The label is exactly the one the labeller keeps, where it keeps one.
    assert ("nodeLabel" in labelled) == LABELS.has_node_rules(runtime_class)


def test_the_table_has_one_entry_per_class() -> None:
    classes = [c[0] for c in CASES]
    assert table(classes, None) == {c.name: plain for c, plain, _ in CASES}
    assert table([], LABELS) == {}
