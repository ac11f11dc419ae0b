"""How many nodes each RuntimeClass selects, and how many it fits: the two counts the
metrics (``extender.cluster.metrics``) and the ``classes`` table both show.

They answer different questions, so both are named for what they count:

- **selected**: nodes that satisfy the class's node selector (``scheduling.nodeSelector``
  and the node-selector-term annotation), taints aside: where the class *could* run;
- **fitting**: nodes that pass the whole policy for a pod that names the class and has
  no tolerations of its own (the class's tolerations still count): where such a pod
  *would* be scheduled, which excludes tainted nodes the class does not tolerate.

Pure: views and a policy in, counts out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.objects import NodeView, PodView, RuntimeClassView
from policies.predicates import RuntimeClassNodeSelector
from policies.registry import Policy

_NO_POD = PodView()
_SELECTOR = RuntimeClassNodeSelector()


@dataclass(frozen=True, slots=True)
class ClassNodeCounts:
    selected: int
    fitting: int


def selects(runtime_class: RuntimeClassView, node: NodeView) -> bool:
    """The node satisfies the class's node selector (taints aside)."""
    return _SELECTOR.check(_NO_POD, runtime_class, node).fits


def class_node_counts(
    runtime_classes: Iterable[RuntimeClassView], nodes: Iterable[NodeView], policy: Policy
) -> dict[str, ClassNodeCounts]:
    """Selected and fitting node counts by class name."""
    return node_selection(runtime_classes, nodes, policy)[0]


def node_selection(
    runtime_classes: Iterable[RuntimeClassView], nodes: Iterable[NodeView], policy: Policy
) -> tuple[dict[str, ClassNodeCounts], list[int]]:
    """``class_node_counts``, and for each node (in order) how many classes select it,
    from one selector check per class and node."""
    node_list = list(nodes)
    per_node = [0] * len(node_list)
    counts: dict[str, ClassNodeCounts] = {}
    for rc in runtime_classes:
        pod = PodView(runtime_class_name=rc.name)
        selected = 0
        for i, node in enumerate(node_list):
            if selects(rc, node):
                selected += 1
                per_node[i] += 1
        counts[rc.name] = ClassNodeCounts(
            selected=selected,
            fitting=sum(1 for node in node_list if policy.evaluate(pod, rc, node).fits),
        )
    return counts, per_node
