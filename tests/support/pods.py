"""Pods of a RuntimeClass as the tests on the real control plane create them, and where
they went, and the classes of a managed cluster they name: one way for every module
(tests/real/)."""

from __future__ import annotations

from typing import Any

from tests.support.control_plane import Answer, ControlPlane

Json = dict[str, Any]
PAUSE = "registry.k8s.io/pause:3.10"

# A managed cluster's classes: GKE Sandbox's gvisor (its rules are its
# scheduling.nodeSelector and toleration, which the RuntimeClass admission plugin merges;
# an overhead), and a Kata class whose pool the node-selector-term annotation selects
# (which the plugin cannot merge: pod admission gives its pods the derived label).
GVISOR_SELECTOR = {"sandbox.gke.io/runtime": "gvisor"}
GVISOR_TAINT = {"key": "sandbox.gke.io/runtime", "value": "gvisor", "effect": "NoSchedule"}
GVISOR_TOLERATION = {"operator": "Equal", **GVISOR_TAINT}
GVISOR: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "gvisor"},
    "handler": "runsc",
    "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
    "scheduling": {"nodeSelector": GVISOR_SELECTOR, "tolerations": [GVISOR_TOLERATION]},
}
KATA: Json = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {
        "name": "kata",
        "annotations": {
            "runtimeclass-extender.dev/node-selector-term": (
                '{"matchExpressions": [{"key": "katacontainers.io/kata-runtime", "operator": "In", "values": ["true"]}]}'
            )
        },
    },
    "handler": "kata",
}


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
