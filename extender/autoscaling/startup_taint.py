"""The startup taint (``serve --startup-taint``): a new node waits for its derived labels.

Why: a node a cloud node group adds registers through its kubelet, which cannot set
labels under ``node-restriction.kubernetes.io/`` (NodeRestriction, plugin/pkg/admission/
noderestriction/admission.go), so it arrives without its RuntimeClass labels, and the
labeller adds them after (``extender.labeller``). In that gap the node is Ready and
cannot take the pending pod it was made for (the pod requires the label), while the
group's template, which carries the label, could: cluster-autoscaler adds another node,
and another, for as long as the gap lasts (measured on a real cluster-autoscaler with
the kwok provider: bench/autoscaler_gap_bench.py, docs/autoscaling.md).

A node registered with a taint whose key starts with
``startup-taint.cluster-autoscaler.kubernetes.io/`` is not counted as ready by
cluster-autoscaler but as starting (``IsStartupTaint``, cluster-autoscaler/utils/
taints/taints.go: "Overriding status of node ..., which seems to have startup taint"),
so the pod waits for it and asks for nothing more; the taint is also dropped from the
templates it copies from live nodes. Karpenter has the same idea (a NodePool's
``startupTaints``). The operator puts the taint on the node group (kubelet
``--register-with-taints``, the template's taints); the labeller removes exactly that
taint once the node's derived labels are right, in the same write.

Pure: a node view or its API taints in, a decision out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from policies.objects import NodeView

# cluster-autoscaler treats every key under this prefix as a startup taint.
AUTOSCALER_STARTUP_PREFIX: Final = "startup-taint.cluster-autoscaler.kubernetes.io/"


def carries(node: NodeView, key: str | None) -> bool:
    """The node still has the startup taint (``key`` None: the behaviour is off)."""
    return bool(key) and any(taint.key == key for taint in node.taints)


def without(taints: Iterable[Mapping[str, Any]], key: str) -> list[Mapping[str, Any]]:
    """The node's taints as the API server has them (every field kept: ``timeAdded``
    of a NoExecute taint counts for eviction), minus every taint with ``key``."""
    return [taint for taint in taints if taint.get("key") != key]


def untainting_patch(
    node: Mapping[str, Any], labels: Mapping[str, str | None], key: str
) -> dict[str, Any] | None:
    """The JSON merge patch that sets ``labels`` (a merge patch of ``metadata.labels``)
    and removes the taint ``key`` from ``node`` (as just read): every other taint sent
    back as it is, on condition of the node's resourceVersion (a taint added since the
    read makes it a 409, never a loss). None: nothing to write (no labels to change,
    and the taint is gone already)."""
    taints = (node.get("spec") or {}).get("taints") or []
    kept = without(taints, key)
    metadata: dict[str, Any] = {"labels": dict(labels)} if labels else {}
    if len(kept) == len(taints):
        return {"metadata": metadata} if labels else None
    metadata["resourceVersion"] = (node.get("metadata") or {}).get("resourceVersion", "")
    return {"metadata": metadata, "spec": {"taints": kept or None}}
