"""A one-shot LIST of Nodes and RuntimeClasses from a live cluster, for the CLI tools.

``explain`` and ``classes`` need the cluster as it is right now, once; they do not need
the watch that ``serve`` keeps. This module finds credentials the way kubectl does (the
``--kubeconfig`` flag, then ``KUBECONFIG``, then ``~/.kube/config``, then the in-cluster
service account), LISTs both kinds page by page with kubernetes-asyncio, and fills a
``ClusterState`` through the same parsers as the cluster file, so the views are the
ones ``serve`` would hold.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from extender.cluster.objects import ObjectError, node_from_api, runtime_class_from_api
from extender.cluster.state import ClusterState

PAGE_SIZE = 500
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class ClusterUnavailable(Exception):
    """No way to reach a cluster, or the cluster refused; the message says which."""


def find_kubeconfig(explicit: str | None = None, environ: dict[str, str] | None = None) -> str | None:
    """The kubeconfig path kubectl would use, or None (then in-cluster may still work)."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit
    for candidate in (env.get("KUBECONFIG") or "").split(os.pathsep):
        if candidate and Path(candidate).is_file():
            return candidate
    home = env.get("HOME")
    default = Path(home, ".kube", "config") if home else Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


def in_cluster(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST")) and SERVICE_ACCOUNT_TOKEN.is_file()


async def _list_all(api: Any, path: str) -> list[dict[str, Any]]:
    """Every item of a cluster-scoped collection, following ``continue`` tokens."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query: list[tuple[str, Any]] = [("limit", PAGE_SIZE)]
        if token:
            query.append(("continue", token))
        response = await api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        try:
            body = await response.read()
        finally:
            response.release()
        if response.status != 200:
            text = body.decode("utf-8", "replace")[:300]
            raise ClusterUnavailable(f"GET {path}: HTTP {response.status}: {text}")
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ClusterUnavailable(f"GET {path}: not JSON: {exc}") from None
        items.extend(document.get("items") or [])
        token = (document.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def list_cluster(*, kubeconfig: str | None = None, context: str | None = None) -> ClusterState:
    """Nodes and RuntimeClasses as the API server lists them now. Raises ClusterUnavailable."""
    from kubernetes_asyncio import client, config  # imported here: slow, and only live use needs it

    path = find_kubeconfig(kubeconfig)
    configuration = client.Configuration()
    try:
        if path is not None:
            await config.load_kube_config(
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
        elif in_cluster():
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            raise ClusterUnavailable(
                "no cluster to read: pass --cluster-file PATH (e.g. deploy/examples/cluster.yaml), "
                "or --kubeconfig PATH, or set KUBECONFIG, or create ~/.kube/config"
            )
    except ClusterUnavailable:
        raise
    except Exception as exc:  # the config loaders raise assorted types for bad files
        raise ClusterUnavailable(f"cannot load kubeconfig {path}: {exc}") from None

    state = ClusterState()
    try:
        async with client.ApiClient(configuration) as api:
            node_items = await _list_all(api, "/api/v1/nodes")
            class_items = await _list_all(api, "/apis/node.k8s.io/v1/runtimeclasses")
    except ClusterUnavailable:
        raise
    except Exception as exc:  # connection refused, TLS, DNS: say where we tried
        raise ClusterUnavailable(f"cannot list from {configuration.host}: {exc}") from None
    try:
        state.nodes.replace(node_from_api(item) for item in node_items)
        state.runtime_classes.replace(runtime_class_from_api(item) for item in class_items)
    except ObjectError as exc:
        raise ClusterUnavailable(f"unexpected object from {configuration.host}: {exc}") from None
    return state
