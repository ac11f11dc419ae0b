"""A one-shot LIST of Nodes and RuntimeClasses from a live cluster, for the CLI tools.

``explain`` and ``classes`` need the cluster as it is right now, once; they do not need
the watch that ``serve`` keeps. Credentials are found exactly as ``serve`` finds them
(``extender.cluster.kube``: ``--kubeconfig``, ``KUBECONFIG``, in-cluster, then
``~/.kube/config``); both kinds are LISTed page by page (``extender.cluster.api``, the
same pager as the watch's) and parsed by the same code as the cluster file, so the
views are the ones ``serve`` would hold.
"""

from __future__ import annotations

from typing import Any

from extender.cluster.api import ApiError, list_pages
from extender.cluster.objects import ObjectError, node_from_api, runtime_class_from_api
from extender.cluster.state import ClusterState


class ClusterUnavailable(Exception):
    """No way to reach a cluster, or the cluster refused; the message says which."""


async def _list_all(api: Any, path: str) -> list[dict[str, Any]]:
    """Every item of a cluster-scoped collection."""
    items: list[dict[str, Any]] = []
    try:
        async for page in list_pages(api, path):
            if page.restarted:
                items = []
            items.extend(page.items)
    except ApiError as exc:
        raise ClusterUnavailable(f"GET {path}: {exc}") from None
    except ValueError as exc:
        raise ClusterUnavailable(str(exc)) from None
    return items


async def list_cluster(*, kubeconfig: str | None = None, context: str | None = None) -> ClusterState:
    """Nodes and RuntimeClasses as the API server lists them now. Raises ClusterUnavailable."""
    # Imported here: kubernetes-asyncio takes about a second to import, and only the
    # live mode of the tools needs it (not --cluster-file, not serve).
    from extender.cluster.kube import KubeConfigError, connect

    try:
        connection = await connect(kubeconfig=kubeconfig, context=context)
    except KubeConfigError as exc:
        raise ClusterUnavailable(f"{exc} (e.g. --cluster-file deploy/examples/cluster.yaml)") from None
    try:
        async with connection.api as api:
            node_items = await _list_all(api, "/api/v1/nodes")
            class_items = await _list_all(api, "/apis/node.k8s.io/v1/runtimeclasses")
    except ClusterUnavailable:
        raise
    except Exception as exc:  # connection refused, TLS, DNS: say where we tried
        raise ClusterUnavailable(f"cannot list from {connection.host}: {exc}") from None
    state = ClusterState()
    try:
        state.nodes.replace(node_from_api(item) for item in node_items)
        state.runtime_classes.replace(runtime_class_from_api(item) for item in class_items)
    except ObjectError as exc:
        raise ClusterUnavailable(f"unexpected object from {connection.host}: {exc}") from None
    return state
