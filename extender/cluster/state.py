"""The in-memory cluster state: a store of Nodes and one of RuntimeClasses, fed by a
source (the cluster file or the watch). Sources write; the filter handler reads; caches
of derived results and the pending-pod requeuer listen (``extender.kube.store``).
"""

from __future__ import annotations

from extender.kube.store import Store
from policies.objects import NodeView, RuntimeClassView

NODES = "nodes"
RUNTIME_CLASSES = "runtimeclasses"
KINDS = (NODES, RUNTIME_CLASSES)


class ClusterState:
    """Nodes and RuntimeClasses as the extender currently knows them."""

    def __init__(self) -> None:
        self.nodes: Store[NodeView] = Store(NODES)
        self.runtime_classes: Store[RuntimeClassView] = Store(RUNTIME_CLASSES)

    def store(self, kind: str) -> Store[NodeView] | Store[RuntimeClassView]:
        return self.nodes if kind == NODES else self.runtime_classes

    @property
    def synced(self) -> bool:
        return self.nodes.synced and self.runtime_classes.synced

    def unsynced_kinds(self) -> list[str]:
        return [kind for kind in KINDS if not self.store(kind).synced]
