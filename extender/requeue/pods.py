"""Pods as the requeuer sees them: the API JSON converter, the informer's resource, the patch.

The requeuer keeps a few fields of each unscheduled pod (``PendingPod``, in
``extender.requeue.planner``) and nudges a pod with one JSON merge patch of an
annotation, guarded by the pod's uid.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from extender.cluster.objects import ObjectError
from extender.cluster.pods import pod_key
from extender.kube.reflector import WatchedResource
from extender.requeue.planner import REQUEUE_ANNOTATION, REVISION_ANNOTATION, PendingPod

PODS = "pods"
DEFAULT_SCHEDULER = "default-scheduler"


def _text(mapping: Mapping[str, Any], key: str, what: str) -> str:
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ObjectError(f"Pod {what} is not a string")
    return value


def pending_pod_from_api(obj: Any) -> PendingPod:
    """A Pod (API JSON) -> the few fields the requeuer keeps. Raises ObjectError."""
    if not isinstance(obj, dict):
        raise ObjectError("Pod is not an object")
    metadata, spec = obj.get("metadata"), obj.get("spec") or {}
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        raise ObjectError("Pod has no metadata or a malformed spec")
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise ObjectError("Pod metadata.annotations is not an object")
    name = _text(metadata, "name", "metadata.name")
    namespace = _text(metadata, "namespace", "metadata.namespace")
    if not name or not namespace:
        raise ObjectError("Pod has no metadata.name or metadata.namespace")
    return PendingPod(
        namespace=namespace,
        pod_name=name,
        uid=_text(metadata, "uid", "metadata.uid"),
        runtime_class_name=_text(spec, "runtimeClassName", "spec.runtimeClassName"),
        # The API server defaults it; the fallback only matters for odd test objects.
        scheduler_name=_text(spec, "schedulerName", "spec.schedulerName") or DEFAULT_SCHEDULER,
        resource_version=_text(metadata, "resourceVersion", "metadata.resourceVersion"),
        # kube-scheduler skips pods being deleted and pods with scheduling gates.
        schedulable=metadata.get("deletionTimestamp") is None and not spec.get("schedulingGates"),
        requeued_for=_text(annotations, REVISION_ANNOTATION, "annotation " + REVISION_ANNOTATION),
    )


# Unscheduled pods only: spec.nodeName is empty until the pod is bound.
POD_RESOURCE = WatchedResource(
    PODS, "/api/v1/pods", pending_pod_from_api, field_selector="spec.nodeName=", key=pod_key
)


def requeued_at(now: datetime | None = None) -> str:
    """RFC 3339 UTC with microseconds, so two nudges never write the same value."""
    moment = now or datetime.now(UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
