"""extender.autoscaling.startup_taint: when a node's startup taint goes, and the write that removes it."""

from __future__ import annotations

from extender.autoscaling.startup_taint import carries, untainting_patch
from extender.settings import DEFAULT_STARTUP_TAINT
from policies.objects import NodeView, Taint

KEY = DEFAULT_STARTUP_TAINT
STARTUP = {"key": KEY, "effect": "NoSchedule"}
OTHER = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-25T10:00:00Z"}
LABEL = "runtimeclass.node-restriction.kubernetes.io/gvisor"


def node(*taints: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "metadata": {"name": "n", "resourceVersion": "42", "labels": labels or {}},
        "spec": {"taints": list(taints)} if taints else {},
    }


def test_a_node_carries_the_taint_by_its_key_alone() -> None:
    view = NodeView("n", taints=(Taint(KEY, "NoSchedule"), Taint("x", "NoSchedule")))
    assert carries(view, KEY)
    assert not carries(view, "startup-taint.cluster-autoscaler.kubernetes.io/other")
    assert not carries(view, "")  # off
    assert not carries(NodeView("n"), KEY)


def test_the_write_sends_every_other_taint_back_as_it_is_on_the_read_version() -> None:
    patch = untainting_patch(node(OTHER, STARTUP), {LABEL: "true"}, KEY)
    assert patch == {
        "metadata": {"labels": {LABEL: "true"}, "resourceVersion": "42"},
        "spec": {"taints": [OTHER]},
    }


def test_the_last_taint_removed_leaves_none() -> None:
    assert untainting_patch(node(STARTUP), {}, KEY) == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"taints": None},
    }


def test_a_taint_already_gone_leaves_the_labels_alone_or_nothing() -> None:
    assert untainting_patch(node(OTHER), {LABEL: "true"}, KEY) == {"metadata": {"labels": {LABEL: "true"}}}
    assert untainting_patch(node(OTHER), {}, KEY) is None
