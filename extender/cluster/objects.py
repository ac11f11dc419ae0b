"""Kubernetes API JSON -> the slim views the predicates read.

The pydantic models below declare only the fields a decision needs; everything else in
a Node (managedFields, images, conditions, ...) is skipped by the validator without
being copied, so parsing stays cheap for large full-node requests and watch events.
Types are checked strictly: a label that is not a string is an error, not a coercion.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from extender.cluster.annotations import (
    NODE_SELECTOR_TERM_ANNOTATION,
    SelectorErrorLog,
    selector_from_annotations,
)
from extender.kube.store import ObjectError
from policies.objects import (
    EMPTY_LABELS,
    NodeView,
    RuntimeClassView,
    RuntimeHandler,
    Taint,
    Toleration,
)
from policies.quantity import QuantityError, parse_quantity

__all__ = [
    "STRICT",
    "ObjectError",
    "ValidationError",
    "node_from_api",
    "nodes_from_api",
    "resource_list",
    "runtime_class_from_api",
    "tolerations_from_models",
]

STRICT = ConfigDict(strict=True, extra="ignore", frozen=True)


class TolerationModel(BaseModel):
    model_config = STRICT
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    tolerationSeconds: int | None = None


class TaintModel(BaseModel):
    model_config = STRICT
    key: str
    value: str = ""
    effect: str


class ObjectMetaModel(BaseModel):
    model_config = STRICT
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class NodeSpecModel(BaseModel):
    model_config = STRICT
    taints: list[TaintModel] | None = None


class RuntimeHandlerFeaturesModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    recursiveReadOnlyMounts: bool | None = None
    userNamespaces: bool | None = None


class RuntimeHandlerModel(BaseModel):
    model_config = STRICT
    name: str = ""  # "" is the default handler
    features: RuntimeHandlerFeaturesModel | None = None


class NodeStatusModel(BaseModel):
    model_config = STRICT
    runtimeHandlers: list[RuntimeHandlerModel] | None = None


class NodeModel(BaseModel):
    model_config = STRICT
    metadata: ObjectMetaModel
    spec: NodeSpecModel | None = None
    status: NodeStatusModel | None = None


class SchedulingModel(BaseModel):
    model_config = STRICT
    nodeSelector: dict[str, str] | None = None
    tolerations: list[TolerationModel] | None = None


class OverheadModel(BaseModel):
    model_config = STRICT
    # ResourceList: quantities are strings on the wire; a hand-written cluster file may
    # say ``cpu: 1``, which Kubernetes reads as the quantity "1" too.
    podFixed: dict[str, str | int] | None = None


class RuntimeClassModel(BaseModel):
    model_config = STRICT
    metadata: ObjectMetaModel
    handler: str
    scheduling: SchedulingModel | None = None
    overhead: OverheadModel | None = None


_NODE_LIST = TypeAdapter(list[NodeModel])


def _labels(raw: dict[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(raw) if raw else EMPTY_LABELS


def _own(text: str) -> str:
    """A fresh, interned copy of a string cut out of a parsed document.

    A cached NodeView outlives the document it came from. Keeping the parser's own
    strings would pin the memory they lie in, among the whole document's garbage
    (a 5,000-node cluster file: 150 MB RSS instead of 60 MB). Interning also stores
    repeated values (zones, instance types, label keys) once.
    """
    return sys.intern(text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass"))


def _own_labels(raw: dict[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType({_own(k): _own(v) for k, v in raw.items()}) if raw else EMPTY_LABELS


def tolerations_from_models(models: list[TolerationModel] | None) -> tuple[Toleration, ...]:
    if not models:
        return ()
    return tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in models)


_FEATURE_FIELDS = tuple(RuntimeHandlerFeaturesModel.model_fields)


def _handler_features(model: RuntimeHandlerFeaturesModel | None) -> frozenset[str]:
    if model is None:
        return frozenset()
    # The declared fields and any extra ones, read directly: model_dump() was most of
    # the cost of a 5,000-node full-nodes request.
    on = {name for name in _FEATURE_FIELDS if getattr(model, name) is True}
    on.update(name for name, value in (model.model_extra or {}).items() if value is True)
    return frozenset(on)


def _node_view(model: NodeModel, *, own: bool = True) -> NodeView:
    """``own``: the view is cached beyond the parsed document (see ``_own``); the
    nodes of a full-nodes request are not, and skip the copies."""
    if not model.metadata.name:
        raise ObjectError("Node has no metadata.name")
    if not own:
        return NodeView(
            name=model.metadata.name,
            labels=_labels(model.metadata.labels),
            taints=tuple(Taint(t.key, t.effect, t.value) for t in (model.spec.taints or ()))
            if model.spec
            else (),
            runtime_handlers=_runtime_handlers(model.status),
            resource_version=model.metadata.resourceVersion,
        )
    taints = (
        tuple(Taint(_own(t.key), _own(t.effect), _own(t.value)) for t in (model.spec.taints or ()))
        if model.spec
        else ()
    )
    handlers = _runtime_handlers(model.status)
    if handlers is not None:
        handlers = tuple(RuntimeHandler(_own(h.name), h.features) for h in handlers)
    return NodeView(
        name=_own(model.metadata.name),
        labels=_own_labels(model.metadata.labels),
        taints=taints,
        runtime_handlers=handlers,
        resource_version=_own(model.metadata.resourceVersion),
    )


def _runtime_handlers(status: NodeStatusModel | None) -> tuple[RuntimeHandler, ...] | None:
    if status is None or status.runtimeHandlers is None:
        return None
    return tuple(RuntimeHandler(h.name, _handler_features(h.features)) for h in status.runtimeHandlers)


def node_from_api(obj: Any) -> NodeView:
    """One Node object (a dict as the API serves it) -> NodeView. Raises ObjectError."""
    try:
        return _node_view(NodeModel.model_validate(obj))
    except ValidationError as exc:
        raise ObjectError(describe_validation_error(exc, "Node")) from None


def nodes_from_api(items: list[Any], *, own: bool = True) -> list[NodeView]:
    """Many Node objects at once (one validator call: cheaper than one per node).

    ``own=False`` for nodes used once and dropped (a full-nodes filter request): no
    copies of their strings (see ``_own``)."""
    try:
        models = _NODE_LIST.validate_python(items)
    except ValidationError as exc:
        raise ObjectError(describe_validation_error(exc, "items")) from None
    return [_node_view(m, own=own) for m in models]


def runtime_class_from_api(obj: Any, *, selector_errors: SelectorErrorLog | None = None) -> RuntimeClassView:
    """One RuntimeClass object -> RuntimeClassView. Raises ObjectError.

    A malformed node-selector-term annotation is not an error of the object (the view
    carries it in ``selector_error``); it is reported to ``selector_errors``, which logs
    it once per revision, when one is given (the watch's and the cluster file's)."""
    try:
        model = RuntimeClassModel.model_validate(obj)
    except ValidationError as exc:
        raise ObjectError(describe_validation_error(exc, "RuntimeClass")) from None
    if not model.metadata.name:
        raise ObjectError("RuntimeClass has no metadata.name")
    scheduling = model.scheduling
    metadata = model.metadata
    # The expressive selector (KEP-585 alternative "NodeSelectorTerm"); a malformed one
    # fails the class closed in the predicate and is logged once per revision.
    term = selector_from_annotations(metadata.annotations)
    if term.error is not None and selector_errors is not None:
        selector_errors.report(
            name=metadata.name,
            resource_version=metadata.resourceVersion,
            annotation=(metadata.annotations or {}).get(NODE_SELECTOR_TERM_ANNOTATION, ""),
            error=term.error,
        )
    return RuntimeClassView(
        name=metadata.name,
        handler=model.handler,
        overhead=resource_list(model.overhead.podFixed, "RuntimeClass overhead.podFixed")
        if model.overhead is not None
        else None,
        node_selector=_labels(scheduling.nodeSelector if scheduling else None),
        tolerations=tolerations_from_models(scheduling.tolerations if scheduling else None),
        match_expressions=term.match_expressions,
        match_fields=term.match_fields,
        selector_error=term.error,
        resource_version=metadata.resourceVersion,
    )


def resource_list(raw: Mapping[str, str | int] | None, where: str) -> Mapping[str, str]:
    """A ResourceList with every quantity checked (``policies.quantity``), as strings.
    Raises ObjectError naming the entry."""
    if not raw:
        return EMPTY_LABELS
    for name, value in raw.items():
        try:
            parse_quantity(str(value))
        except QuantityError as exc:
            raise ObjectError(f"{where}.{name}: {exc}") from None
    return MappingProxyType({name: str(value) for name, value in raw.items()})


_MAX_KEY_SHOWN = 80


def describe_validation_error(exc: ValidationError, root: str, *, limit: int = 5) -> str:
    """A one-line summary of pydantic errors with JSON-path-like locations."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:limit]:
        loc = root
        for item in error["loc"]:
            # Map keys come from the input (label and annotation keys): shown, but a
            # hostile 1 MB key must not make a 1 MB log line or error body.
            key = str(item) if len(str(item)) <= _MAX_KEY_SHOWN else str(item)[: _MAX_KEY_SHOWN - 3] + "..."
            loc += f"[{item}]" if isinstance(item, int) else f".{key}"
        parts.append(f"{loc}: {error['msg']}")
    more = exc.error_count() - limit
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)
