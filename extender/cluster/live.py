"""Live cluster mode: the API-server-backed source of a ``ClusterState``.

``serve`` without a cluster file connects (``extender.kube.connect``) and builds one
``LiveCluster`` over the shared ``ClusterState``:

- ``watch``: the reflectors of Nodes and RuntimeClasses, one background job (``run``);
- ``lookup``: the direct GET of names-mode node names the store lacks;
- ``watch.stats``: each kind's ``SourceStats``, which ``/healthz`` reads against the
  ``unhealthy-after`` window and ``/metrics`` exports.

``extender.http.wiring`` attaches them to the app: the watch starts after the app is
set up and is cancelled and awaited on shutdown, before the API client it uses is
closed. Until the first LIST of both kinds completes, ``/filter`` answers
``Error: "cluster state not synced"`` and kube-scheduler retries the pod later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.node_lookup import LookupOptions, NodeLookup
from extender.cluster.state import ClusterState
from extender.cluster.watch import ClusterWatch
from extender.kube.health import SourceStats
from extender.kube.reflector import ReflectorOptions
from extender.settings import DEFAULT_UNHEALTHY_AFTER


@dataclass(frozen=True)
class LiveOptions:
    unhealthy_after: float = DEFAULT_UNHEALTHY_AFTER
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)
    lookup: LookupOptions = field(default_factory=LookupOptions)


class LiveCluster:
    """The watch and the node lookup of one API client, over one ``ClusterState``."""

    def __init__(
        self,
        api: Any,
        state: ClusterState,
        *,
        options: LiveOptions | None = None,
        selector_errors: SelectorErrorLog | None = None,
    ) -> None:
        self.api = api
        self.options = options or LiveOptions()
        self.watch = ClusterWatch(api, state, options=self.options.reflector, selector_errors=selector_errors)
        self.lookup = NodeLookup(api, options=self.options.lookup)

    def source_stats(self) -> list[SourceStats]:
        """For ``create_app(source_stats=...)`` (metrics read the watch health)."""
        return self.watch.stats
