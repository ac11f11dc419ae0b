"""Pods of a RuntimeClass as the tests on the real control plane create them, and where
they went: one way for every module (tests/real/)."""

from __future__ import annotations

from typing import Any

from tests.support.control_plane import Answer, ControlPlane

Json = dict[str, Any]
PAUSE = "registry.k8s.io/pause:3.10"


def class_pod(name: str, namespace: str, runtime_class: str, *, cpu: str = "100m") -> Json:
    """A pod of ``runtime_class`` as a workload's author writes it: the class, a
    container and its request, nothing of the class's scheduling."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runtimeClassName": runtime_class,
            "containers": [{"name": "c", "image": PAUSE, "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def dry_run(plane: ControlPlane, manifest: Json) -> Answer:
    """The pod as the API server would admit it, in its namespace (``dryRun=All``:
    through every admission, stored nowhere)."""
    namespace = manifest["metadata"]["namespace"]
    return plane.client.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods", manifest, query={"dryRun": "All"}
    )


def node_of(plane: ControlPlane, namespace: str, name: str) -> str:
    """The node the pod is bound to, "" while it pends."""
    return str(plane.client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("nodeName") or "")
