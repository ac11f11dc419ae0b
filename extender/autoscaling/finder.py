"""``serve``'s check for node autoscalers that cannot see the RuntimeClasses' rules.

What is checked and why is ``extender.autoscaling.autoscalers`` (pure). This module looks,
on every replica (it is a warning, not an action: no Lease needed), once the Nodes and
RuntimeClasses are listed and then every ``interval`` seconds:

- for cluster-autoscaler, one GET of its status ConfigMap (``cluster-autoscaler-status``
  setting, ``kube-system/cluster-autoscaler-status`` by default). It needs ``get`` on
  that one ConfigMap, which components/autoscaler-status grants; without the right (403)
  it says so once and looks no further there;
- for Karpenter, the labels of the nodes the watch already holds.

A verdict that changes is logged once (a WARNING naming the autoscaler, how it was
found and the classes it cannot see; an INFO when that is over), is listed in
``/readyz``'s warnings while it lasts, and is the gauge
``runtimeclass_extender_autoscaler_unseen_runtimeclasses{autoscaler}``. Not run with
``label-nodes``: every class is then seen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Gauge

from extender import METRIC_PREFIX
from extender.autoscaling.autoscalers import (
    AUTOSCALERS,
    CLUSTER_AUTOSCALER,
    Found,
    karpenter,
    unseen,
    warning,
)
from extender.cluster.class_labels import ClassLabels
from extender.cluster.state import ClusterState
from extender.kube.api import ApiError, request_json

log = logging.getLogger("extender.autoscalers")

CONFIGMAP = "/api/v1/namespaces/{namespace}/configmaps/{name}"
# Classes named in the warning; the rest are counted.
NAMED = 5


class Forbidden(Exception):
    """The status ConfigMap may not be read (403): the RBAC is missing."""


async def find_cluster_autoscaler(
    api: Any, namespace: str, name: str, *, timeout: aiohttp.ClientTimeout | None = None
) -> Found | None:
    """cluster-autoscaler, if its status ConfigMap exists. Raises ``Forbidden`` on a 403,
    ``ApiError`` and connection errors otherwise."""
    try:
        await request_json(
            api, "GET", CONFIGMAP, path_params={"namespace": namespace, "name": name}, timeout=timeout
        )
    except ApiError as exc:
        if exc.status == 404:
            return None
        if exc.status in (401, 403):
            raise Forbidden(exc.message) from None
        raise
    return Found(CLUSTER_AUTOSCALER, f"ConfigMap {namespace}/{name}")


class AutoscalerCheck:
    def __init__(
        self,
        api: Any,
        state: ClusterState,
        rules: ClassLabels,
        *,
        status_configmap: tuple[str, str] | None,
        admission_plugin: Callable[[], bool | None] = lambda: None,
        interval: float = 60.0,
    ) -> None:
        self._api = api
        self.state = state
        self.rules = rules
        self.status_configmap = status_configmap
        self.admission_plugin = admission_plugin
        self.interval = interval
        self.found: list[Found] = []
        self.unseen: list[str] = []
        self._message: str | None = None
        self._forbidden = False

    def register_metrics(self, registry: CollectorRegistry) -> None:
        gauge = Gauge(
            METRIC_PREFIX + "autoscaler_unseen_runtimeclasses",
            "RuntimeClasses with node rules that a node autoscaler found running in the cluster cannot "
            "see in their pods (0: none, or the autoscaler was not found); docs/autoscaling.md.",
            ["autoscaler"],
            registry=registry,
        )
        for name in AUTOSCALERS:
            gauge.labels(name).set_function(partial(self._count, name))

    def _count(self, autoscaler: str) -> float:
        return float(len(self.unseen)) if any(f.name == autoscaler for f in self.found) else 0.0

    def messages(self) -> list[str]:
        """The warning while it lasts (``/readyz``)."""
        return [self._message] if self._message else []

    async def run(self) -> None:
        while not self.state.synced:
            await asyncio.sleep(0.5)
        while True:
            await self.check()
            await asyncio.sleep(self.interval)

    async def check(self) -> None:
        found = [f for f in (await self._cluster_autoscaler(), karpenter(self.state.nodes.values())) if f]
        classes = unseen(
            self.state.runtime_classes.values(),
            self.rules,
            label_nodes=False,
            # Not known yet: as without the plugin (every class with node rules unseen).
            admission_plugin=bool(self.admission_plugin()),
        )
        self.found, self.unseen = found, [rc.name for rc in classes]
        message = warning(found, classes[:NAMED], more=max(0, len(classes) - NAMED))
        if message != self._message:
            if message is not None:
                log.warning(
                    message,
                    extra={"autoscalers": ",".join(f.name for f in found), "runtimeClasses": len(classes)},
                )
            elif self._message is not None:
                log.info("no node autoscaler that cannot see the RuntimeClasses' node rules any more")
            self._message = message

    async def _cluster_autoscaler(self) -> Found | None:
        if self.status_configmap is None or self._forbidden:
            return None
        namespace, name = self.status_configmap
        try:
            return await find_cluster_autoscaler(
                self._api, namespace, name, timeout=aiohttp.ClientTimeout(total=10)
            )
        except Forbidden as exc:
            self._forbidden = True
            log.info(
                "cannot read ConfigMap %s/%s to find cluster-autoscaler: grant get on it "
                "(components/autoscaler-status, docs/permissions.md), or set cluster-autoscaler-status "
                "to empty",
                namespace,
                name,
                extra={"error": str(exc)},
            )
            return None
        except (ApiError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            # Not now: the last verdict stands until the next look.
            log.debug("cannot look for cluster-autoscaler now", extra={"error": str(exc)})
            return next((f for f in self.found if f.name == CLUSTER_AUTOSCALER), None)
