"""Builders for the API objects tests put into the fake API server (plain dicts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


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
    scheduler_name: str = "default-scheduler",
    phase: str = "Pending",
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A core/v1 Pod; ``node_name`` None means not yet scheduled."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
    }
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
