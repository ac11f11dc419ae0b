"""A cluster where kube-scheduler's node sampling hides a RuntimeClass's few nodes.

2,000 nodes, the gVisor pool (3 nodes) at the end of the node list, as a node pool
added last is. With the adaptive default kube-scheduler offers the extender the first
680 that pass its in-tree filters (pkg/scheduler/schedule_one.go,
numFeasibleNodesToFind: 2000 * (50 - 2000/125) / 100), none of them gVisor nodes.
"""

from __future__ import annotations

from extender.cluster.state import ClusterState
from policies.objects import NodeView, RuntimeClassView, Taint, Toleration

CLUSTER = 2000
# numFeasibleNodesToFind at 2,000 nodes with the adaptive default: 2000 * (50 - 16) / 100.
SAMPLE = 680

RUNC = [f"runc-{i:04d}" for i in range(CLUSTER - 106)]
GVISOR = ["gvisor-1", "gvisor-2", "gvisor-3"]
# Match the kata class's selector, but carry a taint the class does not tolerate.
KATA = ["kata-1", "kata-2"]
# Plain nodes with a taint nobody tolerates: rejected for taints.
TAINTED = [f"tainted-{i:03d}" for i in range(100)]
# In the gVisor pool by its label, but with that taint too: the class fails it for taints.
GVISOR_DEDICATED = "gvisor-dedicated"

SANDBOX_TAINT = Taint(key="sandbox", value="gvisor", effect="NoSchedule")
KATA_TAINT = Taint(key="kata", value="true", effect="NoSchedule")
DEDICATED_TAINT = Taint(key="dedicated", value="infra", effect="NoSchedule")


def sampled_cluster() -> ClusterState:
    """2,000 nodes: the runc ones first, the gVisor pool (3 nodes) at the end."""
    state = ClusterState()
    nodes = [NodeView(name) for name in RUNC]
    nodes += [NodeView(name, {"sandbox": "gvisor"}, (SANDBOX_TAINT,)) for name in GVISOR]
    nodes += [NodeView(name, {"sandbox": "kata"}, (KATA_TAINT,)) for name in KATA]
    nodes += [NodeView(name, {}, (DEDICATED_TAINT,)) for name in TAINTED]
    nodes.append(NodeView(GVISOR_DEDICATED, {"sandbox": "gvisor"}, (SANDBOX_TAINT, DEDICATED_TAINT)))
    assert len(nodes) == CLUSTER
    state.nodes.replace(nodes)
    state.runtime_classes.replace(
        [
            RuntimeClassView(
                "gvisor",
                "runsc",
                {"sandbox": "gvisor"},
                (Toleration(key="sandbox", operator="Equal", value="gvisor", effect="NoSchedule"),),
            ),
            # Its nodes carry a taint it does not tolerate: they fit only pods that do.
            RuntimeClassView("kata", "kata", {"sandbox": "kata"}),
            # No node has this label: nothing fits anywhere.
            RuntimeClassView("ghost", "ghost", {"pool": "ghost"}),
        ]
    )
    return state
