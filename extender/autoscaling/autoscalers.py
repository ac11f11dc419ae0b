"""Which node autoscalers run in the cluster, and which RuntimeClasses they cannot see.

cluster-autoscaler decides by simulating kube-scheduler's in-tree filters on existing
nodes and on each node group's template, never by calling extenders
(kubernetes/autoscaler#506; #5708 took a custom scheduler configuration "without
extenders"); Karpenter provisions from a pod's own scheduling requirements. Either sees a
RuntimeClass's node rules only where they are in the pod's spec:

- with ``label-nodes`` (the default-scheduler mode, or predicate mode with the node
  labels), the class's derived label, which pod admission requires of its pods: every
  class is seen;
- with the API server's RuntimeClass admission plugin on, the class's
  ``scheduling.nodeSelector``, which the plugin merges into its pods: a class whose
  rules are only that selector is seen (``ClassLabels.visible_selector``);
- otherwise (predicate mode without the labels) no class with node rules is seen.

For a class that is not seen, an autoscaler adds no node for a pending pod that fits an
existing node by the in-tree filters (one the extender then rejects), and would move a
running pod to any node with room when it scales down (pod admission marks such pods not
to be moved: ``extender.admission.pod_table``). ``serve`` warns at start, and whenever it
changes, when an autoscaler runs and some class is not seen; ``check`` says the same of a
live cluster (docs/autoscaling.md).

How an autoscaler is recognised: cluster-autoscaler by its status ConfigMap
(``cluster-autoscaler-status`` in its namespace, ``kube-system`` by default: its
``--status-config-map-name`` and ``--namespace``), which it writes while it runs;
Karpenter by the label it puts on every node it launches (``karpenter.sh/nodepool``;
``karpenter.sh/provisioner-name`` before v1).

Pure: views and settings in, names and sentences out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from extender.cluster.class_labels import ClassLabels
from policies.objects import NodeView, RuntimeClassView

CLUSTER_AUTOSCALER: Final = "cluster-autoscaler"
KARPENTER: Final = "karpenter"
AUTOSCALERS: Final = (CLUSTER_AUTOSCALER, KARPENTER)
KARPENTER_NODE_LABELS: Final = ("karpenter.sh/nodepool", "karpenter.sh/provisioner-name")


@dataclass(frozen=True)
class Found:
    """An autoscaler seen in the cluster, and by what (for the message)."""

    name: str
    evidence: str


def karpenter(nodes: Iterable[NodeView]) -> Found | None:
    """Karpenter, if some node carries a label it puts on the nodes it launches."""
    for node in nodes:
        for label in KARPENTER_NODE_LABELS:
            if label in node.labels:
                return Found(KARPENTER, f"node {node.name} has the label {label}")
    return None


def unseen(
    classes: Iterable[RuntimeClassView], rules: ClassLabels, *, label_nodes: bool, admission_plugin: bool
) -> list[RuntimeClassView]:
    """The classes with node rules that an autoscaler cannot see in their pods (see
    the module doc), by name."""
    if label_nodes:
        return []
    found = [
        rc
        for rc in classes
        if rules.has_node_rules(rc) and not (admission_plugin and rules.visible_selector(rc) is not None)
    ]
    return sorted(found, key=lambda rc: rc.name)


def warning(
    autoscalers: Sequence[Found], classes: Sequence[RuntimeClassView], *, more: int = 0
) -> str | None:
    """One sentence for the operator, or None when nothing is wrong. ``classes`` are the
    unseen ones (the first few, ``more`` others)."""
    if not autoscalers or not classes:
        return None
    names = ", ".join(rc.name for rc in classes) + (f" and {more} more" if more else "")
    return (
        f"{_who_runs(autoscalers)} in this cluster and cannot see the node rules of RuntimeClass {names}: it will add no "
        "node for their pending pods when an existing node fits them by kube-scheduler's own filters, and "
        "it would move their running pods to any node with room (pod admission marks those pods not to "
        "be moved). Turn on the node labels: predicate mode with labelNodes.enabled=true, or "
        "components/label-nodes (docs/autoscaling.md)"
    )


def class_warning(autoscalers: Sequence[Found], runtime_class: RuntimeClassView, rules: ClassLabels) -> str:
    """``check``'s warning for one class an autoscaler found in the cluster cannot see."""
    return (
        f"{_who_runs(autoscalers)} in this cluster and cannot see the node rules of RuntimeClass {runtime_class.name} "
        f"({rules.describe(runtime_class)}) in its pods: it will add no node for a pending pod of the class "
        "when an existing node fits the pod by kube-scheduler's own filters; turn on the node labels "
        "(labelNodes.enabled=true, or components/label-nodes; docs/autoscaling.md)"
    )


def _who_runs(autoscalers: Sequence[Found]) -> str:
    """"cluster-autoscaler (its status ConfigMap ...) runs", or "... and ... run"."""
    who = " and ".join(f"{a.name} ({a.evidence})" for a in autoscalers)
    return f"{who} {'runs' if len(autoscalers) == 1 else 'run'}"
