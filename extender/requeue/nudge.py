"""The requeuer's nudge: one JSON merge patch of an annotation, guarded by the pod's uid.

The pods themselves come from the informer of pending pods every actor shares
(``extender.cluster.pending_pods``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from extender.cluster.pending_pods import REQUEUE_ANNOTATION, REVISION_ANNOTATION, PendingPod
from extender.kube.times import format_micro_time


def requeued_at(now: datetime | None = None) -> str:
    """MicroTime text (RFC 3339 UTC with microseconds), so two nudges never write the same value."""
    return format_micro_time(now)


def merge_patch(pod: PendingPod, stamp: str, revision: str | None = None) -> dict[str, Any]:
    """The JSON merge patch of one nudge: the annotation, guarded by the pod's uid.

    With ``revision`` (leader election) the patch also names the digest of the class
    revision it is for, and is guarded by the pod's resourceVersion as well: a patch
    that reaches the API server late (sent by a leader just cut off, delivered after
    its successor nudged the pod) then fails with 409 instead of nudging twice."""
    annotations = {REQUEUE_ANNOTATION: stamp}
    metadata: dict[str, Any] = {"uid": pod.uid, "annotations": annotations}
    if revision is not None:
        annotations[REVISION_ANNOTATION] = revision
        metadata["resourceVersion"] = pod.resource_version
    return {"metadata": metadata}
