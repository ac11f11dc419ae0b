"""The kube-scheduler extender v1 wire types used by the filter verb.

Mirrors staging/src/k8s.io/kube-scheduler/extender/v1/types.go. The Go structs have
no json tags, so keys are the Go field names (``Pod``, ``NodeNames``, ...); Go decodes
them case-insensitively, so lowerCamelCase keys are accepted too. The embedded Pod and
Node objects are ordinary camelCase API JSON.

Only what a decision reads is modelled: the Pod's RuntimeClass, tolerations and
identity. Node items stay raw dicts here: in full-nodes mode the passing ones are sent
back as they came, and ``extender.cluster.objects`` cuts the slim view out of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from extender.cluster.objects import (
    STRICT,
    ObjectError,
    ObjectMetaModel,
    TolerationModel,
    tolerations_from_models,
)
from policies.objects import EMPTY_LABELS, PodView


def _go_key(name: str) -> Any:
    return Field(default=None, validation_alias=AliasChoices(name, name[0].lower() + name[1:]))


class PodSpecModel(BaseModel):
    model_config = STRICT
    runtimeClassName: str | None = None
    tolerations: list[TolerationModel] | None = None
    schedulerName: str = ""


class PodModel(BaseModel):
    model_config = STRICT
    metadata: ObjectMetaModel | None = None
    spec: PodSpecModel

    def view(self) -> PodView:
        meta = self.metadata or ObjectMetaModel()
        return PodView(
            name=meta.name,
            namespace=meta.namespace,
            uid=meta.uid,
            runtime_class_name=self.spec.runtimeClassName or None,
            tolerations=tolerations_from_models(self.spec.tolerations),
            scheduler_name=self.spec.schedulerName,
            labels=meta.labels or EMPTY_LABELS,
        )


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return "null" if value is None else type(value).__name__


def check_pod_document(document: Any) -> None:
    """Refuse a decoded document that is not a Pod, saying what it is instead.

    A Pod may come without ``kind`` (``{"spec": {...}}``, or the Pod of an ExtenderArgs
    as kube-scheduler embeds it). An ExtenderArgs body is the likely mix-up between
    ``/filter`` and ``/explain``, so it gets a hint of its own. Raises ObjectError.
    """
    if isinstance(document, dict) and "spec" not in document and any(key in document for key in ("Pod", "pod")):
        raise ObjectError(
            "expected a Pod, got an ExtenderArgs (a filter request: it has a Pod key); "
            "explain takes the Pod itself, and ExtenderArgs go to POST /filter"
        )
    check_kind(document, "Pod", absent="Pod")


def check_kind(document: Any, kind: str, *, absent: str | None = None) -> None:
    """Refuse a decoded document that is not an object of ``kind``, in the words every
    file of one object is refused in (``--pod``, ``--node``, ``POST /explain``):
    ``expected kind Pod, got List``. A document without ``kind`` is taken for ``absent``.
    Raises ObjectError."""
    if not isinstance(document, dict):
        raise ObjectError(f"expected a {kind} object, got {_type_name(document)}")
    got = document.get("kind", absent)
    if got != kind:
        raise ObjectError(f"expected kind {kind}, got {'no kind' if got is None else got}")


def pod_instead_of_extender_args(body: bytes) -> str | None:
    """For a refused filter body that is a Pod, an error saying where a Pod goes; else None.

    The mirror of ``check_pod_document``: a Pod posted to ``/filter`` (or given to the
    ``filter`` command) is the likely mix-up with ``/explain``, and the validation error
    alone ("request.Pod: field required") does not say so. For the error path only: it
    decodes the body a second time.
    """
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict) or any(key in document for key in ("Pod", "pod")):
        return None
    kind = document.get("kind")
    if kind == "Pod" or (kind is None and "spec" in document):
        return (
            "expected an ExtenderArgs (a filter request: the Pod under a Pod key, with NodeNames or "
            "Nodes), got a Pod; filter takes kube-scheduler's request, and a Pod alone goes to "
            "POST /explain"
        )
    return None


class NodeListModel(BaseModel):
    model_config = STRICT
    items: list[dict[str, Any]] | None = None


class ExtenderArgs(BaseModel):
    """The filter request body."""

    # cache_strings="none": every string is made fresh. pydantic's default keeps one
    # string object per distinct short string in a process-wide table of 16,384 slots;
    # looking a name up there costs two reads at random places in memory per name (the
    # slot, then the cached string to compare), which miss the CPU caches between two
    # calls, and at 15,000 nodes the names also evict one another. Making the string
    # and hashing it where it was just written is cheaper: over HTTP, call for call,
    # every call shape got faster without the cache (BENCHMARKS.md, "Every call shape").
    model_config = ConfigDict(
        strict=True, extra="ignore", frozen=True, populate_by_name=True, cache_strings="none"
    )
    Pod: PodModel = Field(validation_alias=AliasChoices("Pod", "pod"))
    Nodes: NodeListModel | None = _go_key("Nodes")
    NodeNames: list[str] | None = _go_key("NodeNames")

    @model_validator(mode="after")
    def _one_node_form(self) -> ExtenderArgs:
        # kube-scheduler sends exactly one of the two (extender.go: names when the
        # extender is nodeCacheCapable, full nodes otherwise). Anything else is a
        # request we could only answer by guessing.
        if (self.Nodes is None) == (self.NodeNames is None):
            raise ValueError("exactly one of Nodes and NodeNames must be set (the other null)")
        return self

    @property
    def names_mode(self) -> bool:
        return self.NodeNames is not None


@dataclass(frozen=True, slots=True)
class ExtenderFilterResult:
    """The filter response body. Both node-list keys are always present, the unused
    one null, as Go's encoding/json writes a nil pointer.

    Written, never parsed: a plain dataclass (a pydantic model's construction was a
    measurable share of a small call).
    """

    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = field(default_factory=dict)
    Error: str = ""

    def to_json(self) -> bytes:
        """The body sent to kube-scheduler: the fields as they are (node objects echoed
        back in full-nodes mode are not re-validated). A dict, not the dataclass itself:
        orjson writes a dict in under half the time."""
        return orjson.dumps(
            {
                "Nodes": self.Nodes,
                "NodeNames": self.NodeNames,
                "FailedNodes": self.FailedNodes,
                "FailedAndUnresolvableNodes": self.FailedAndUnresolvableNodes,
                "Error": self.Error,
            }
        )
