"""Live cluster mode: wiring the reflectors, the node lookup and liveness into the app.

``serve`` without a cluster file connects (``extender.cluster.kube``), builds one
``LiveCluster`` over the shared ``ClusterState`` and attaches it to the aiohttp app:

- the reflectors run as one background job started and stopped by the app's
  ``cleanup_ctx`` (started after the app is set up, cancelled and awaited on shutdown,
  before the API client they use is closed: cleanup contexts unwind in reverse);
- ``/readyz`` follows the stores' ``synced`` flags (set by each kind's first LIST);
- ``/healthz`` reads the reflectors' ``SourceStats`` and the ``unhealthy-after`` window;
- ``/filter`` resolves names-mode node names the store lacks through ``NodeLookup``.

Until the first LIST of both kinds completes, ``/filter`` answers
``Error: "cluster state not synced"`` and kube-scheduler retries the pod later.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from extender.app import METRICS, NODE_LOOKUP, SOURCES, UNHEALTHY_AFTER
from extender.cluster.health import SourceStats
from extender.cluster.kube import api_client_ctx
from extender.cluster.node_lookup import LookupOptions, NodeLookup
from extender.cluster.reflector import ClusterWatch, ReflectorOptions
from extender.cluster.state import ClusterState
from extender.metrics import NODE_LOOKUP_COUNTERS

DEFAULT_UNHEALTHY_AFTER = 180.0


@dataclass(frozen=True)
class LiveOptions:
    unhealthy_after: float = DEFAULT_UNHEALTHY_AFTER
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)
    lookup: LookupOptions = field(default_factory=LookupOptions)


class LiveCluster:
    """The API-server-backed source of a ``ClusterState``, ready to attach to an app."""

    def __init__(self, api: Any, state: ClusterState, *, options: LiveOptions | None = None) -> None:
        self.api = api
        self.options = options or LiveOptions()
        self.watch = ClusterWatch(api, state, options=self.options.reflector)
        self.lookup = NodeLookup(api, options=self.options.lookup)

    def source_stats(self) -> list[SourceStats]:
        """For ``create_app(source_stats=...)`` (metrics read the watch health)."""
        return self.watch.stats

    def attach(self, app: web.Application) -> None:
        """Register the app keys and the background job on ``app`` (before it starts)."""
        app[SOURCES] = self.watch.stats
        app[UNHEALTHY_AFTER] = self.options.unhealthy_after
        app[NODE_LOOKUP] = self.lookup
        app[METRICS].add_stats(self.lookup.stats, NODE_LOOKUP_COUNTERS)
        app.cleanup_ctx.append(api_client_ctx(self.api))  # closed last
        app.cleanup_ctx.append(self._lookup_ctx)
        app.cleanup_ctx.append(self.watch.cleanup_ctx)

    async def _lookup_ctx(self, _app: web.Application) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.lookup.close()
