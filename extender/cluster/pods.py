"""Pods as the audit keeps them: bound pods, their RuntimeClass, own tolerations and overhead.

``ScheduledPod`` is the slim view (a few strings and the tolerations, shared between
pods by ``TolerationInterner``); ``RUNNING_POD_SELECTOR`` is the field selector that
asks the API server for running pods only (the audit's informer in
``extender.audit.auditor`` and the one-shot LIST in ``extender.cluster.snapshot``).
``pod_key`` is the store key of a raw Pod, "namespace/name", which every pod view's
``name`` also returns.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from extender.cluster.objects import (
    STRICT,
    ObjectError,
    TolerationModel,
    describe_validation_error,
    resource_list,
    tolerations_from_models,
)
from policies.objects import Toleration

__all__ = [
    "RUNNING_POD_SELECTOR",
    "ScheduledPod",
    "TolerationInterner",
    "TolerationsIntern",
    "is_audited",
    "pod_key",
    "scheduled_pod_from_api",
]


def pod_key(obj: Any) -> str:
    """The store key of a raw Pod object: "namespace/name" ("" when either is missing)."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(metadata, dict):
        return ""
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return ""
    return f"{namespace}/{name}"


# Pod phases after which nothing runs (isPodTerminated in pkg/controller/podgc).
_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# Bound to a node and not terminated, as a field selector for LIST and WATCH. No field
# selector can ask for "has a runtimeClassName" (pods' field labels are in
# kubernetes/kubernetes pkg/registry/core/pod/strategy.go, ToSelectableFields), so
# pods without one are filtered after reading. A watch with it reports a pod that
# terminates as DELETED.
RUNNING_POD_SELECTOR = "spec.nodeName!=," + ",".join(f"status.phase!={p}" for p in sorted(_TERMINAL_PHASES))


@dataclass(frozen=True, slots=True)
class ScheduledPod:
    """What the audit keeps of a pod: identity, placement, and the pod's own tolerations."""

    namespace: str
    pod_name: str
    uid: str = ""
    # "" means no RuntimeClass (null and "" are alike to the API server).
    runtime_class_name: str = ""
    # "" until the pod is bound.
    node_name: str = ""
    tolerations: tuple[Toleration, ...] = ()
    # Indexes into ``tolerations`` of those with tolerationSeconds <= 0, which the taint
    # manager treats as "evict at once". Positive seconds are not kept: they tolerate.
    zero_seconds: tuple[int, ...] = ()
    resource_version: str = ""
    # Phase Succeeded or Failed: the pod runs nothing and is not audited.
    terminal: bool = False
    # spec.overhead (resource name -> quantity); None without one. Immutable in the API.
    overhead: Mapping[str, str] | None = None

    @property
    def name(self) -> str:
        # Stores key objects by ``name``; pods are unique per namespace.
        return f"{self.namespace}/{self.pod_name}"


def is_audited(pod: ScheduledPod) -> bool:
    """Bound, naming a RuntimeClass, and not terminated: the pods the audit judges."""
    return bool(pod.node_name and pod.runtime_class_name and not pod.terminal)


class _PodMetaModel(BaseModel):
    # Not ObjectMetaModel: a pod's labels and annotations (last-applied-configuration,
    # ...) would be validated and copied for nothing.
    model_config = STRICT
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""


class _PodSpecModel(BaseModel):
    model_config = STRICT
    nodeName: str | None = None
    runtimeClassName: str | None = None
    tolerations: list[TolerationModel] | None = None
    overhead: dict[str, str | int] | None = None


class _PodStatusModel(BaseModel):
    model_config = STRICT
    phase: str | None = None


class _PodModel(BaseModel):
    model_config = STRICT
    metadata: _PodMetaModel
    spec: _PodSpecModel | None = None
    status: _PodStatusModel | None = None


TolerationsIntern = Callable[[tuple[Toleration, ...]], tuple[Toleration, ...]]


class TolerationInterner:
    """Shares equal toleration tuples between pods.

    Almost every pod carries the same tolerations (the ``not-ready``/``unreachable``
    pair that DefaultTolerationSeconds admission adds), and they are most of what a
    ScheduledPod weighs. Bounded: once ``max_entries`` distinct sets are held, new ones
    are returned as they are, unshared.
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._seen: dict[tuple[Toleration, ...], tuple[Toleration, ...]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def __call__(self, tolerations: tuple[Toleration, ...]) -> tuple[Toleration, ...]:
        if not tolerations:
            return ()
        shared = self._seen.get(tolerations)
        if shared is not None:
            return shared
        if len(self._seen) < self.max_entries:
            self._seen[tolerations] = tolerations
        return tolerations


def scheduled_pod_from_api(obj: Any, *, intern: TolerationsIntern | None = None) -> ScheduledPod:
    """A Pod (API JSON) -> ScheduledPod. Raises ObjectError for a malformed pod.

    Types are checked strictly (a ``nodeName`` that is not a string is an error, not a
    coercion). A pod that is not bound, names no class or has terminated parses fine;
    ``is_audited`` tells the audit to skip it. ``intern`` (e.g. a TolerationInterner)
    shares equal toleration tuples between pods.
    """
    try:
        model = _PodModel.model_validate(obj)
    except ValidationError as exc:
        raise ObjectError(describe_validation_error(exc, "Pod")) from None
    meta = model.metadata
    if not meta.name or not meta.namespace:
        raise ObjectError("Pod has no metadata.name or metadata.namespace")
    spec = model.spec
    toleration_models = spec.tolerations if spec is not None else None
    tolerations = tolerations_from_models(toleration_models)
    if intern is not None:
        tolerations = intern(tolerations)
    zero_seconds = tuple(
        i
        for i, t in enumerate(toleration_models or ())
        if t.tolerationSeconds is not None and t.tolerationSeconds <= 0
    )
    phase = model.status.phase if model.status is not None else None
    overhead = spec.overhead if spec is not None else None
    return ScheduledPod(
        # Namespaces, classes and nodes repeat across pods: store each string once.
        namespace=sys.intern(meta.namespace),
        pod_name=meta.name,
        uid=meta.uid,
        runtime_class_name=sys.intern(spec.runtimeClassName or "") if spec is not None else "",
        node_name=sys.intern(spec.nodeName or "") if spec is not None else "",
        tolerations=tolerations,
        zero_seconds=zero_seconds,
        resource_version=meta.resourceVersion,
        terminal=phase in _TERMINAL_PHASES,
        # Only pods with one pay for it; an empty one is none (Semantic.DeepEqual).
        overhead=resource_list(overhead, "Pod spec.overhead") if overhead else None,
    )
