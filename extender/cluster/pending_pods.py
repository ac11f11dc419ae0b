"""Unscheduled pods that name a RuntimeClass: one informer for every leader actor that reads them.

The requeuer (which pods to nudge after a class change), the node labeller's events
(which pods to tell that their class fits no node) and the labeller itself (which
derived labels a pending pod requires) all read the same pods: those not yet bound
(``fieldSelector=spec.nodeName=``: a pod that gets bound leaves the watch as DELETED)
that name a RuntimeClass. One informer serves them all, so each pod event is received
and decoded once, into one slim view holding what any of them reads (``PendingPod``),
however many actors are on.

Pods that name no RuntimeClass are not kept (the field is immutable): in a busy
cluster most pending pods are of no interest to any actor. A pod is decoded strictly
(``extender.cluster.pod_fields``); its ``nodeSelector`` is read only for the keys under
the derived-label prefix (``required``), and its annotations only for the requeuer's.

``PendingPods`` counts, for each derived label key, the pending pods whose
``nodeSelector`` requires it (the labeller keeps a requirement once given out
satisfiable).

Alike pods share one ``nodeSelector`` set and one set of required keys (``Shared``):
each lives as long as a pending pod that names a class holds it, and no longer, so
pods with selectors of their own (a node's name, a one-off pool) leave nothing behind
once bound or deleted.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Required, TypeVar

from pydantic import TypeAdapter, with_config
from typing_extensions import TypedDict

from extender.cluster.pod_fields import (
    STRICT_FIELDS,
    PodMetadataFields,
    PodSpecFields,
    decode_pod,
    pod_identity,
)
from extender.kube.store import Store
from policies.objects import Toleration

# The informer's kind (in /healthz, /readyz and the watch metrics' kind label), as the
# requeuer's informer always named it.
PENDING_PODS = "pods"

# The requeuer's two annotations (extender.requeue): a nudge's time, and the digest of
# the class revision it was for. Only the second is read back.
REQUEUE_ANNOTATION = "runtimeclass-extender.dev/requeued-at"
REVISION_ANNOTATION = "runtimeclass-extender.dev/requeued-for"

_NONE: frozenset[str] = frozenset()
_NO_PAIRS: frozenset[tuple[str, str]] = frozenset()


@with_config(STRICT_FIELDS)
class _Metadata(PodMetadataFields, total=False):
    annotations: dict[str, str] | None
    # Presence is what counts (kube-scheduler skips a pod being deleted); any value.
    deletionTimestamp: Any


@with_config(STRICT_FIELDS)
class _Toleration(TypedDict, total=False):
    key: str | None
    operator: str | None
    value: str | None
    effect: str | None


@with_config(STRICT_FIELDS)
class _Spec(PodSpecFields, total=False):
    nodeSelector: dict[str, str] | None
    # Non-empty holds the pod back from scheduling; the entries are not read.
    schedulingGates: Any
    tolerations: list[_Toleration] | None


@with_config(STRICT_FIELDS)
class _Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str | None
    message: str | None


@with_config(STRICT_FIELDS)
class _Status(TypedDict, total=False):
    conditions: list[_Condition] | None


@with_config(STRICT_FIELDS)
class _PendingPodFields(TypedDict, total=False):
    metadata: Required[_Metadata]
    spec: _Spec | None
    status: _Status | None


_ADAPTER = TypeAdapter(_PendingPodFields)


@dataclass(frozen=True, slots=True)
class PendingPod:
    """An unscheduled pod that names a RuntimeClass, with what any leader actor reads of it."""

    namespace: str
    pod_name: str
    uid: str
    runtime_class_name: str
    scheduler_name: str
    resource_version: str = ""
    # False for a pod being deleted or held by scheduling gates: kube-scheduler does not
    # try it, so nothing is failing to schedule and a nudge would change nothing.
    schedulable: bool = True
    # REVISION_ANNOTATION's value: the class revision it was last nudged for.
    requeued_for: str = ""
    # Its nodeSelector keys under the derived-label prefix (label-nodes), and its whole
    # nodeSelector (shared between alike pods).
    required: frozenset[str] = _NONE
    node_selector: frozenset[tuple[str, str]] = frozenset()
    # Why kube-scheduler last found it unschedulable (its PodScheduled condition's
    # message while the reason is Unschedulable; "" before a try, or for another reason).
    unschedulable: str = ""
    # Its own tolerations (tolerationSeconds left out: it matters to eviction only).
    tolerations: tuple[Toleration, ...] = ()
    # "namespace/name": stores key objects by ``name``, and pods are unique per
    # namespace. Made once, when the pod is decoded.
    name: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.namespace}/{self.pod_name}")


T = TypeVar("T", bound=Hashable)


class Shared(Generic[T]):
    """One frozenset for alike ones, kept only while something else holds it.

    Thousands of pending pods of one workload have one selector: sharing it was half
    of what a pending pod cost. The table holds each set weakly, as its key and (by a
    weak reference to itself) its value, so a set no pod holds any more leaves the
    table with the last pod: interning every selector ever decoded kept them all for
    good (5,000 selectors, 1.9 MiB, after five rounds of 1,000 pods with selectors of
    their own, and growing: bench/pending_selectors_bench.py)."""

    def __init__(self) -> None:
        self._table: weakref.WeakKeyDictionary[frozenset[T], weakref.ref[frozenset[T]]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, items: frozenset[T]) -> frozenset[T]:
        """The set alike to ``items`` held now, or ``items``, held from now on."""
        held = self._table.get(items)
        found = held() if held is not None else None
        if found is None:
            self._table[items] = weakref.ref(items)
            return items
        return found

    def __len__(self) -> int:
        return len(self._table)


class PendingPodConverter:
    """Pod (API JSON) -> ``PendingPod``, reading the nodeSelector keys under
    ``label_prefix`` ("<prefix>/"; None: none). Raises ObjectError."""

    def __init__(self, label_prefix: str | None) -> None:
        self.owned = None if label_prefix is None else label_prefix.rstrip("/") + "/"
        # Every pod of a class requires the same keys, and alike pods have alike
        # selectors: one set each, shared (see ``Shared``).
        self.required = Shared[str]()
        self.selectors = Shared[tuple[str, str]]()

    def __call__(self, obj: Any) -> PendingPod:
        pod = decode_pod(_ADAPTER, obj)
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        identity = pod_identity(metadata, spec)
        selector = spec.get("nodeSelector") or {}
        # A pod that names no class is never kept (PendingPods drops it): nothing of
        # its is shared, or it would be looked up and dropped again on every event.
        share = bool(identity.runtime_class_name)
        required = _NONE
        if self.owned is not None and selector:
            keys = [key for key in selector if key.startswith(self.owned)]
            if keys:
                required = self.required(frozenset(keys)) if share else frozenset(keys)
        node_selector = _NO_PAIRS
        if selector:
            pairs = frozenset(selector.items())
            node_selector = self.selectors(pairs) if share else pairs
        return PendingPod(
            namespace=identity.namespace,
            pod_name=identity.pod_name,
            uid=identity.uid,
            runtime_class_name=identity.runtime_class_name,
            scheduler_name=identity.scheduler_name,
            resource_version=identity.resource_version,
            schedulable=metadata.get("deletionTimestamp") is None and not spec.get("schedulingGates"),
            # A handful of revisions across thousands of pods: one string each.
            requeued_for=sys.intern((metadata.get("annotations") or {}).get(REVISION_ANNOTATION, "")),
            required=required,
            node_selector=node_selector,
            unschedulable=_unschedulable(pod.get("status")),
            tolerations=_tolerations(spec.get("tolerations")),
        )


def pending_pod_converter(label_prefix: str | None) -> PendingPodConverter:
    """Pod (API JSON) -> ``PendingPod`` (see ``PendingPodConverter``)."""
    return PendingPodConverter(label_prefix)


def _unschedulable(status: _Status | None) -> str:
    """kube-scheduler's words for why it could not place the pod (pkg/scheduler/
    schedule_one.go sets PodScheduled False, reason Unschedulable, with the FitError's
    message): shared, since a burst of alike pods gets alike words."""
    for condition in (status or {}).get("conditions") or ():
        scheduled = condition.get("type") == "PodScheduled" and condition.get("status") == "False"
        if scheduled and condition.get("reason") == "Unschedulable":
            return sys.intern(condition.get("message") or "")
    return ""


def _tolerations(items: list[_Toleration] | None) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(t.get("key") or "", t.get("operator") or "", t.get("value") or "", t.get("effect") or "")
        for t in items or ()
    )


# Without a label prefix (the requeuer's informer, when it runs alone).
pending_pod_from_api = pending_pod_converter(None)


class PendingPods(Store[PendingPod]):
    """The pending pods that name a RuntimeClass, counted by required label."""

    def __init__(self) -> None:
        super().__init__(PENDING_PODS)
        self._required: Counter[str] = Counter()
        self.add_listener(self._index)

    def upsert(self, item: PendingPod) -> None:
        if item.runtime_class_name:
            super().upsert(item)
        else:
            self.delete(item.name)  # its class cannot change: it was never ours

    def replace(self, items: Iterable[PendingPod]) -> None:
        super().replace(pod for pod in items if pod.runtime_class_name)

    def requiring(self, key: str) -> int:
        """How many pending pods require the derived label ``key``."""
        return self._required.get(key, 0)

    def required_keys(self) -> frozenset[str]:
        return frozenset(self._required)

    def _index(self, _kind: str, old: Any, new: Any) -> None:
        if isinstance(old, PendingPod):
            self._required.subtract(old.required)
            for key in old.required:
                if self._required[key] <= 0:
                    del self._required[key]
        if isinstance(new, PendingPod):
            self._required.update(new.required)
