"""The one informer of unscheduled pods that every leader actor reading them shares.

What it keeps, and why one for all, is ``extender.cluster.pending_pods``.
"""

from __future__ import annotations

from typing import Any

from extender.cluster.pending_pods import PENDING_PODS, PendingPod, PendingPods, pending_pod_converter
from extender.cluster.pod_fields import pod_key
from extender.kube.informer import Informer
from extender.kube.reflector import ReflectorOptions, WatchedResource


def pending_pod_resource(label_prefix: str | None = None) -> WatchedResource:
    # Unscheduled pods only: spec.nodeName is empty until the pod is bound.
    return WatchedResource(
        PENDING_PODS,
        "/api/v1/pods",
        pending_pod_converter(label_prefix),
        field_selector="spec.nodeName=",
        key=pod_key,
    )


class PendingPodInformer(Informer[PendingPod]):
    """The one informer of pending pods that every actor reading them shares (``pods``:
    its store, with the indexes)."""

    def __init__(
        self, api: Any, *, label_prefix: str | None = None, options: ReflectorOptions | None = None
    ) -> None:
        self.pods = PendingPods()
        super().__init__(api, pending_pod_resource(label_prefix), self.pods, options=options)
