"""The slim views of Kubernetes objects that predicates read.

A predicate never sees API JSON: the extender turns Pods from filter requests, and
Nodes/RuntimeClasses from the cluster file or the watch, into these frozen records.
They hold only what a scheduling decision needs, which keeps 15,000 cached nodes
small and makes every predicate a pure function of plain values.

Field meanings follow the core/v1 and node.k8s.io/v1 API types they are cut from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Taint:
    """core/v1 Taint (timeAdded is irrelevant to scheduling and dropped)."""

    key: str
    effect: str
    value: str = ""

    def __str__(self) -> str:
        # Same shape kubectl and the scheduler's logs use: key=value:Effect.
        if self.value:
            return f"{self.key}={self.value}:{self.effect}"
        return f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """core/v1 Toleration. tolerationSeconds only matters to eviction, not placement."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        key = self.key or "*"
        op = self.operator or "Equal"
        text = key if op == "Exists" else f"{key} {op} {self.value}"
        return f"{text}:{self.effect}" if self.effect else text


@dataclass(frozen=True, slots=True)
class RuntimeHandler:
    """An entry of node.status.runtimeHandlers (Kubernetes >= 1.30)."""

    name: str
    features: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    taints: tuple[Taint, ...] = ()
    # None: the node does not report handlers at all (older kubelet); () reports none.
    runtime_handlers: tuple[RuntimeHandler, ...] | None = None
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """core/v1 NodeSelectorRequirement (one entry of matchExpressions)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RuntimeClassView:
    name: str
    handler: str
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)
    tolerations: tuple[Toleration, ...] = ()
    # The expressive selector from the RuntimeClass annotation (KEP-585 alternative
    # "NodeSelectorTerm"): None when the annotation is absent.
    match_expressions: tuple[SelectorRequirement, ...] | None = None
    # The same term's matchFields (only metadata.name In/NotIn); () when there are none.
    match_fields: tuple[SelectorRequirement, ...] = ()
    # Why the annotation could not be used; a class with an error fails closed.
    selector_error: str | None = None
    resource_version: str = ""
    # overhead.podFixed (resource name -> quantity, as written): None when the class has
    # no ``overhead``, empty when it has one without podFixed. Pod Overhead admission
    # (extender/admission/pod_review.py) copies it into pods; compare with
    # policies.quantity.resource_lists_equal, never as strings.
    overhead: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class PodView:
    name: str = ""
    namespace: str = ""
    uid: str = ""
    # None and "" both mean "no RuntimeClass" (the API server treats them alike).
    runtime_class_name: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    scheduler_name: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY_LABELS)

    @property
    def wants_runtime_class(self) -> bool:
        return bool(self.runtime_class_name)

    @property
    def key(self) -> str:
        """How logs and tools name the pod: "namespace/name" (just the name without one)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name
