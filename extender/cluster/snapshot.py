"""A one-shot LIST of Nodes and RuntimeClasses from a live cluster, for the CLI tools.

``explain``, ``classes`` and ``audit`` need the cluster as it is right now, once; they do not need
the watch that ``serve`` keeps. Credentials are found exactly as ``serve`` finds them
(``extender.kube.connect``: ``--kubeconfig``, ``KUBECONFIG``, in-cluster, then
``~/.kube/config``); both kinds are LISTed page by page (``extender.kube.api``, the
same pager as the watch's) and parsed by the same code as the cluster file, so the
views are the ones ``serve`` would hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.objects import ObjectError, node_from_api, runtime_class_from_api
from extender.cluster.pod_views import (
    RUNNING_POD_SELECTOR,
    ScheduledPod,
    TolerationInterner,
    scheduled_pod_from_api,
)
from extender.cluster.state import ClusterState
from extender.kube.api import ApiError, ListOptions, list_pages
from extender.kube.defaults import DEFAULT_REQUEST_TIMEOUT

if TYPE_CHECKING:
    from extender.kube.connect import Connection


class ClusterUnavailable(Exception):
    """No way to reach a cluster, or the cluster refused; the message says which."""


# With no request timeout the connect is still bounded, as client-go's dialer bounds it
# (30 s) under kubectl --request-timeout 0.
CONNECT_TIMEOUT_SECONDS = 30.0


def client_timeout(request_timeout: float) -> aiohttp.ClientTimeout:
    """One request's limit, from kubectl-style --request-timeout seconds (0: none)."""
    if request_timeout > 0:
        return aiohttp.ClientTimeout(total=request_timeout)
    return aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_SECONDS)


async def connect_for_tool(
    kubeconfig: str | None, context: str | None, *, cluster_file_help: bool = True
) -> Connection:
    """The connection a command reads the live cluster by; a kubeconfig it cannot use is
    ``ClusterUnavailable``. ``cluster_file_help``: whether the error for no configuration
    at all suggests --cluster-file (the command takes one)."""
    # Imported here: kubernetes-asyncio takes about a second to import, and only the
    # live mode of the tools needs it (not --cluster-file, not serve).
    from extender.kube.connect import KubeConfigError, connect

    try:
        return await connect(kubeconfig=kubeconfig, context=context, cluster_file_help=cluster_file_help)
    except KubeConfigError as exc:
        raise ClusterUnavailable(str(exc)) from None


def describe_failure(exc: BaseException, request_timeout: float) -> str:
    """Why a request failed, never empty: a timeout's str() is "" (asyncio.TimeoutError),
    and so is that of some connection errors; then the exception's type says it."""
    if isinstance(exc, TimeoutError):
        limit = f"{request_timeout:g}s" if request_timeout > 0 else "the connect timeout"
        return f"no answer within {limit} (--request-timeout)"
    return str(exc).strip() or type(exc).__name__


async def _list_all(
    api: Any, path: str, field_selector: str = "", *, timeout: aiohttp.ClientTimeout | None = None
) -> list[dict[str, Any]]:
    """Every item of a collection."""
    items: list[dict[str, Any]] = []
    try:
        options = ListOptions(field_selector=field_selector, timeout=timeout)
        async for page in list_pages(api, path, options):
            if page.restarted:
                items = []
            items.extend(page.items)
    except ApiError as exc:
        raise ClusterUnavailable(f"GET {path}: {exc}") from None
    except ValueError as exc:
        raise ClusterUnavailable(str(exc)) from None
    return items


async def list_cluster(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    selector_errors: SelectorErrorLog | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> ClusterState:
    """Nodes and RuntimeClasses as the API server lists them now; bad node-selector-term
    annotations are reported to ``selector_errors`` (if given). Each request may take
    ``request_timeout`` seconds (0: no limit). Raises ClusterUnavailable."""
    state, _ = await _snapshot(
        kubeconfig=kubeconfig,
        context=context,
        pods_path=None,
        selector_errors=selector_errors,
        request_timeout=request_timeout,
    )
    return state


async def list_cluster_with_pods(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> tuple[ClusterState, list[ScheduledPod]]:
    """Nodes, RuntimeClasses and the running pods (bound, not terminated; of
    ``namespace``, or of every namespace) as the API server lists them now.

    The pods are listed first: a pod in that list was bound to a node that existed then,
    so the Nodes listed after it still hold that node unless it was deleted in between,
    which is a real ``node-not-found``. Listing nodes first would report every pod bound
    to a node that joined during the LISTs as bound to a missing node.
    Raises ClusterUnavailable.
    """
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    state, pods = await _snapshot(
        kubeconfig=kubeconfig,
        context=context,
        pods_path=path,
        selector_errors=None,
        request_timeout=request_timeout,
    )
    return state, pods


async def _snapshot(
    *,
    kubeconfig: str | None,
    context: str | None,
    pods_path: str | None,
    selector_errors: SelectorErrorLog | None,
    request_timeout: float,
) -> tuple[ClusterState, list[ScheduledPod]]:
    connection = await connect_for_tool(kubeconfig, context)
    timeout = client_timeout(request_timeout)
    try:
        async with connection.api as api:
            pod_items = (
                await _list_all(api, pods_path, RUNNING_POD_SELECTOR, timeout=timeout) if pods_path else []
            )
            node_items = await _list_all(api, "/api/v1/nodes", timeout=timeout)
            class_items = await _list_all(api, "/apis/node.k8s.io/v1/runtimeclasses", timeout=timeout)
    except ClusterUnavailable:
        raise
    except Exception as exc:  # connection refused, TLS, DNS, timeouts: say where we tried, and why
        raise ClusterUnavailable(
            f"cannot list from {connection.host}: {describe_failure(exc, request_timeout)}"
        ) from None
    state = ClusterState()
    try:
        state.nodes.replace(node_from_api(item) for item in node_items)
        state.runtime_classes.replace(
            runtime_class_from_api(item, selector_errors=selector_errors) for item in class_items
        )
        intern = TolerationInterner()
        pods = [scheduled_pod_from_api(item, intern=intern) for item in pod_items]
    except ObjectError as exc:
        raise ClusterUnavailable(f"unexpected object from {connection.host}: {exc}") from None
    return state, pods
