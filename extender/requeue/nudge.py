"""The requeuer's nudge: pending pods as the informer keeps them (the converter and the resource), and the patch.

The requeuer keeps a few fields of each unscheduled pod (``PendingPod``, in
``extender.requeue.planner``) and nudges a pod with one JSON merge patch of an
annotation, guarded by the pod's uid.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Required

from pydantic import TypeAdapter, with_config
from typing_extensions import TypedDict

from extender.cluster.pod_fields import (
    STRICT_FIELDS,
    PodMetadataFields,
    PodSpecFields,
    decode_pod,
    pod_identity,
    pod_key,
)
from extender.kube.reflector import WatchedResource
from extender.kube.times import format_micro_time
from extender.requeue.planner import REQUEUE_ANNOTATION, REVISION_ANNOTATION, PendingPod

PODS = "pods"


@with_config(STRICT_FIELDS)
class _PendingPodMetadata(PodMetadataFields, total=False):
    annotations: dict[str, str] | None
    # Presence is what counts (kube-scheduler skips a pod being deleted); any value.
    deletionTimestamp: Any


@with_config(STRICT_FIELDS)
class _PendingPodSpec(PodSpecFields, total=False):
    # Non-empty holds the pod back from scheduling; the entries are not read.
    schedulingGates: Any


@with_config(STRICT_FIELDS)
class _PendingPodFields(TypedDict, total=False):
    metadata: Required[_PendingPodMetadata]
    spec: _PendingPodSpec | None


_PENDING_POD = TypeAdapter(_PendingPodFields)


def pending_pod_from_api(obj: Any) -> PendingPod:
    """A Pod (API JSON) -> the few fields the requeuer keeps. Raises ObjectError."""
    pod = decode_pod(_PENDING_POD, obj)
    metadata, spec = pod["metadata"], pod.get("spec") or {}
    identity = pod_identity(metadata, spec)
    return PendingPod(
        namespace=identity.namespace,
        pod_name=identity.pod_name,
        uid=identity.uid,
        runtime_class_name=identity.runtime_class_name,
        scheduler_name=identity.scheduler_name,
        resource_version=identity.resource_version,
        # kube-scheduler skips pods being deleted and pods with scheduling gates.
        schedulable=metadata.get("deletionTimestamp") is None and not spec.get("schedulingGates"),
        requeued_for=(metadata.get("annotations") or {}).get(REVISION_ANNOTATION, ""),
    )


# Unscheduled pods only: spec.nodeName is empty until the pod is bound.
POD_RESOURCE = WatchedResource(
    PODS, "/api/v1/pods", pending_pod_from_api, field_selector="spec.nodeName=", key=pod_key
)


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
