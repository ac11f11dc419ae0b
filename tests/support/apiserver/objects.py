"""Builders for the API objects tests put into the fake API server (plain dicts), and
for the ``Status`` objects it answers errors with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(
    code: int, message: str, *, reason: str | None = None, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A meta/v1 Status, as the API server sends for every error.

    Keys come in the order of the Go type's fields (apimachinery/pkg/apis/meta/v1/types.go
    ``Status``: kind, apiVersion, metadata, status, message, reason, details, code), so a
    body can be compared byte for byte with one a real server wrote. ``details`` should
    likewise list name, group, kind, uid, causes, retryAfterSeconds in that order.
    """
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else _REASONS.get(code, ""),
    }
    if details:
        status["details"] = dict(details)
    status["code"] = code
    return status


def resource_details(
    group: str, resource: str, name: str = "", *, uid: str | None = None, causes: Sequence[str] = ()
) -> dict[str, Any]:
    """A Status' details for an object, as apimachinery/pkg/api/errors/errors.go fills
    them (``NewForbidden``, ``NewConflict``, ...): the name and group where set (both
    ``omitempty``), the resource as the kind, then the uid and a cause per message."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    if uid is not None:
        details["uid"] = uid
    if causes:
        details["causes"] = [{"message": message} for message in causes]
    return details


def make_node(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    runtime_handlers: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A core/v1 Node as the API serves it (minus what the server stamps on)."""
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    if runtime_handlers is not None:
        node["status"]["runtimeHandlers"] = [{"name": h, "features": {}} for h in runtime_handlers]
    return node


def make_runtime_class(
    name: str,
    *,
    handler: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A node.k8s.io/v1 RuntimeClass."""
    rc: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": handler or name,
    }
    if node_selector is not None or tolerations:
        scheduling: dict[str, Any] = {}
        if node_selector is not None:
            scheduling["nodeSelector"] = dict(node_selector)
        if tolerations:
            scheduling["tolerations"] = [dict(t) for t in tolerations]
        rc["scheduling"] = scheduling
    return rc


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str | None = None,
    runtime_class: str | None = None,
    scheduler_name: str | None = "default-scheduler",
    phase: str = "Pending",
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A core/v1 Pod; ``node_name`` None means not yet scheduled; ``scheduler_name``
    None leaves ``spec.schedulerName`` out, as a manifest does (a create defaults it)."""
    spec: dict[str, Any] = {}
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    spec["containers"] = [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]
    if node_name is not None:
        spec["nodeName"] = node_name
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }
