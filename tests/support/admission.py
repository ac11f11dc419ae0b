"""AdmissionReview requests as the API server sends them, for the webhook's tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION

RUNTIME_CLASS_KIND = {"group": "node.k8s.io", "version": "v1", "kind": "RuntimeClass"}
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


def runtime_class(
    name: str = "sandbox",
    *,
    handler: str = "runsc",
    node_selector: Mapping[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    annotation: str | None = None,
) -> dict[str, Any]:
    """A RuntimeClass as the API server puts it into ``request.object``."""
    metadata: dict[str, Any] = {"name": name, "uid": "a6e0c7d2-0000-4000-8000-000000000001"}
    if annotation is not None:
        metadata["annotations"] = {NODE_SELECTOR_TERM_ANNOTATION: annotation}
    obj: dict[str, Any] = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": metadata,
        "handler": handler,
    }
    scheduling: dict[str, Any] = {}
    if node_selector is not None:
        scheduling["nodeSelector"] = dict(node_selector)
    if tolerations is not None:
        scheduling["tolerations"] = tolerations
    if scheduling:
        obj["scheduling"] = scheduling
    return obj


def request(
    obj: Any = None,
    *,
    operation: str = "CREATE",
    uid: str = UID,
    kind: Mapping[str, str] = RUNTIME_CLASS_KIND,
    **extra: Any,
) -> dict[str, Any]:
    """An AdmissionRequest with the fields the API server always sets."""
    req: dict[str, Any] = {
        "uid": uid,
        "kind": dict(kind),
        "resource": {"group": "node.k8s.io", "version": "v1", "resource": "runtimeclasses"},
        "requestKind": dict(kind),
        "requestResource": {"group": "node.k8s.io", "version": "v1", "resource": "runtimeclasses"},
        "name": obj.get("metadata", {}).get("name", "") if isinstance(obj, dict) else "",
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj,
        "oldObject": obj if operation == "UPDATE" else None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    req.update(extra)
    return req


def body(req: Any, **top: Any) -> bytes:
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req, **top}
    )


def review(req: Any) -> dict[str, Any]:
    """The AdmissionReview around ``req``, as a dict (for clients that encode it)."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}
