"""Pods as the audit keeps them: bound pods, their RuntimeClass, own tolerations and overhead.

``ScheduledPod`` is the slim view (a few strings and the tolerations, shared between
pods by ``TolerationInterner``); ``RUNNING_POD_SELECTOR`` is the field selector that
asks the API server for running pods only (the audit's informer in
``extender.audit.auditor`` and the one-shot LIST in ``extender.cluster.snapshot``).
The fields every pod view shares (identity, RuntimeClass) are decoded in
``extender.cluster.pod_fields``; ``pod_key`` is re-exported from there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Required

from pydantic import TypeAdapter, with_config
from typing_extensions import TypedDict

from extender.cluster.objects import TolerationModel, resource_list, tolerations_from_models
from extender.cluster.pod_fields import (
    STRICT_FIELDS,
    PodMetadataFields,
    PodSpecFields,
    decode_pod,
    pod_identity,
    pod_key,
)
from policies.objects import Toleration

__all__ = [
    "RUNNING_POD_SELECTOR",
    "SCHEDULED_POD_FIELDS",
    "ScheduledPod",
    "TolerationInterner",
    "TolerationsIntern",
    "is_audited",
    "pod_key",
    "scheduled_pod_from_api",
]


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


@with_config(STRICT_FIELDS)
class _ScheduledPodSpec(PodSpecFields, total=False):
    nodeName: str | None
    tolerations: list[TolerationModel] | None
    overhead: dict[str, str | int] | None


@with_config(STRICT_FIELDS)
class _PodStatus(TypedDict, total=False):
    phase: str | None


@with_config(STRICT_FIELDS)
class _ScheduledPodFields(TypedDict, total=False):
    metadata: Required[PodMetadataFields]
    spec: _ScheduledPodSpec | None
    status: _PodStatus | None


# The fields of a Pod the audit reads, as one validator (``extender.cluster.validation``
# lists what it refuses in a cluster file, field by field).
SCHEDULED_POD_FIELDS = TypeAdapter(_ScheduledPodFields)


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
    pod = decode_pod(SCHEDULED_POD_FIELDS, obj)
    spec = pod.get("spec") or {}
    identity = pod_identity(pod["metadata"], spec)
    toleration_models = spec.get("tolerations")
    tolerations = tolerations_from_models(toleration_models)
    if intern is not None:
        tolerations = intern(tolerations)
    zero_seconds = tuple(
        i
        for i, t in enumerate(toleration_models or ())
        if t.tolerationSeconds is not None and t.tolerationSeconds <= 0
    )
    phase = (pod.get("status") or {}).get("phase")
    overhead = spec.get("overhead")
    return ScheduledPod(
        namespace=identity.namespace,
        pod_name=identity.pod_name,
        uid=identity.uid,
        runtime_class_name=identity.runtime_class_name,
        # Nodes repeat across pods as namespaces and classes do: store each once.
        node_name=sys.intern(spec.get("nodeName") or ""),
        tolerations=tolerations,
        zero_seconds=zero_seconds,
        resource_version=identity.resource_version,
        terminal=phase in _TERMINAL_PHASES,
        # Only pods with one pay for it; an empty one is none (Semantic.DeepEqual).
        overhead=resource_list(overhead, "Pod spec.overhead") if overhead else None,
    )
