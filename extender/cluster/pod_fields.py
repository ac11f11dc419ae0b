"""A Pod's fields that every pod view decodes: identity, RuntimeClass and scheduler.

Two informers keep pods, each as a slim view of its own: the running-pod audit
(``ScheduledPod``, ``extender.cluster.pod_views``) and the requeuer (``PendingPod``, built
in ``extender.requeue.nudge``). Both decode the fields they share here, one way:

- ``PodMetadataFields`` and ``PodSpecFields`` declare them; a view's own fields extend
  these TypedDicts, and a ``TypeAdapter`` of the view's pod validates the whole object
  in one strict pass (``decode_pod``: ObjectError with the JSON path of each problem).
- ``pod_identity`` reads them: name and namespace required, the scheduler defaulted
  as the API server defaults it, repeated strings interned.

TypedDicts, not models: the validator then builds plain dicts and no model instances
(a third less time for the audit's pod than its models took); the views, not these
dicts, are what the stores keep. The requeuer's hand-written reads were faster still
(a few microseconds a pod), a price paid once per pending pod's event for one
definition and the same error messages in both views.
``pod_key`` is the store key of a raw Pod, "namespace/name", which every view's
``name`` also returns.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config

# typing.TypedDict is not accepted by pydantic before Python 3.12.
from typing_extensions import TypedDict

from extender.cluster.objects import ObjectError, describe_validation_error
from extender.kube.defaults import DEFAULT_SCHEDULER

__all__ = [
    "STRICT_FIELDS",
    "PodIdentity",
    "PodMetadataFields",
    "PodSpecFields",
    "decode_pod",
    "pod_identity",
    "pod_key",
]


# The config of every pod TypedDict (each needs it: TypedDicts do not inherit it).
# As ``objects.STRICT``: a name that is not a string is an error, not a coercion.
STRICT_FIELDS = ConfigDict(strict=True, extra="ignore")


@with_config(STRICT_FIELDS)
class PodMetadataFields(TypedDict, total=False):
    # Not labels and annotations: a pod's (last-applied-configuration, ...) would be
    # validated and copied for nothing; a view that needs one declares it.
    name: str
    namespace: str
    uid: str
    resourceVersion: str


@with_config(STRICT_FIELDS)
class PodSpecFields(TypedDict, total=False):
    runtimeClassName: str | None
    schedulerName: str | None


_Pod = TypeVar("_Pod")


def decode_pod(adapter: TypeAdapter[_Pod], obj: Any) -> _Pod:
    """Validate a Pod (API JSON) with a view's adapter. Raises ObjectError."""
    try:
        return adapter.validate_python(obj)
    except ValidationError as exc:
        raise ObjectError(describe_validation_error(exc, "Pod")) from None


class PodIdentity(NamedTuple):
    """The shared fields of one pod, decoded; a view copies them into its own slots.

    A tuple: built once per pod on every LIST and watch event, and a frozen dataclass
    costs several times more to build."""

    namespace: str
    pod_name: str
    uid: str
    resource_version: str
    # "" means no RuntimeClass (null and "" are alike to the API server).
    runtime_class_name: str
    scheduler_name: str


def pod_identity(metadata: PodMetadataFields, spec: PodSpecFields | None) -> PodIdentity:
    """The shared fields of a decoded pod. Raises ObjectError without name or namespace."""
    name, namespace = metadata.get("name", ""), metadata.get("namespace", "")
    if not name or not namespace:
        raise ObjectError("Pod has no metadata.name or metadata.namespace")
    spec = spec or {}
    return PodIdentity(
        # Namespaces, classes and schedulers repeat across pods: store each string once.
        namespace=sys.intern(namespace),
        pod_name=name,
        uid=metadata.get("uid", ""),
        resource_version=metadata.get("resourceVersion", ""),
        runtime_class_name=sys.intern(spec.get("runtimeClassName") or ""),
        # The API server defaults it; the fallback only matters for hand-written objects.
        scheduler_name=sys.intern(spec.get("schedulerName") or DEFAULT_SCHEDULER),
    )


def pod_key(obj: Any) -> str:
    """The store key of a raw Pod object: "namespace/name" ("" when either is missing)."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(metadata, dict):
        return ""
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return ""
    return f"{namespace}/{name}"
