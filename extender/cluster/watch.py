"""The watch of every kind the extender decides on: Nodes and RuntimeClasses.

One ``Reflector`` per kind (``extender.kube.reflector``), run together as one
background job. The RuntimeClass conversion is the same one the cluster file uses, so
the watch and the file hold identical views of identical objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.objects import node_from_api, nodes_from_api, runtime_class_from_api
from extender.cluster.state import NODES, RUNTIME_CLASSES, ClusterState
from extender.kube.health import SourceStats
from extender.kube.reflector import Reflector, ReflectorOptions, WatchedResource
from extender.tasks import run_all

NODE_RESOURCE = WatchedResource(NODES, "/api/v1/nodes", node_from_api, nodes_from_api)
RUNTIME_CLASSES_PATH = "/apis/node.k8s.io/v1/runtimeclasses"


def runtime_class_resource(selector_errors: SelectorErrorLog | None = None) -> WatchedResource:
    """RuntimeClasses, their bad node-selector-term annotations reported to ``selector_errors``."""
    return WatchedResource(
        RUNTIME_CLASSES,
        RUNTIME_CLASSES_PATH,
        partial(runtime_class_from_api, selector_errors=selector_errors),
    )


class ClusterWatch:
    """The reflectors of every kind the extender needs, as one background job."""

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        *,
        options: ReflectorOptions | None = None,
        selector_errors: SelectorErrorLog | None = None,
        resources: Sequence[WatchedResource] | None = None,
    ) -> None:
        if resources is None:
            resources = (NODE_RESOURCE, runtime_class_resource(selector_errors))
        self.stats = [SourceStats(kind=r.kind) for r in resources]
        self.reflectors = [
            Reflector(api, resource, state.store(resource.kind), stats, options=options)
            for resource, stats in zip(resources, self.stats, strict=True)
        ]

    async def run(self) -> None:
        """Every reflector at once, until cancelled (``extender.tasks.background``)."""
        await run_all(*(reflector.run for reflector in self.reflectors))
