"""An informer: one resource kept in a ``Store`` by a ``Reflector``, with its health.

What client-go calls a shared informer, cut to what this project uses: the store (read
by whoever needs the objects, listened to by whoever must react), the reflector that
keeps it equal to the API server, and the ``SourceStats`` it reports. Every part that
watches something of its own (the leader actors' pods, the webhook certificate's
Secret) builds one of these, so "listed", health, ``/healthz`` and ``/metrics`` mean
the same thing for all of them.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from extender.kube.health import SourceStats, waiting_report
from extender.kube.reflector import Reflector, ReflectorOptions, WatchedResource
from extender.kube.store import Named, Store

V = TypeVar("V", bound=Named)


class Informer(Generic[V]):
    """LIST then WATCH of ``resource`` into ``store``; run it with ``run``."""

    def __init__(
        self,
        api: Any,
        resource: WatchedResource,
        store: Store[V] | None = None,
        *,
        options: ReflectorOptions | None = None,
    ) -> None:
        self.store: Store[V] = store if store is not None else Store(resource.kind)
        self.stats = SourceStats(kind=resource.kind)
        self.reflector = Reflector(api, resource, self.store, self.stats, options=options)

    @property
    def kind(self) -> str:
        return self.stats.kind

    @property
    def synced(self) -> bool:
        """The first LIST is in."""
        return self.store.synced

    async def wait_synced(self) -> None:
        await self.store.wait_synced()

    def waiting(self) -> str | None:
        """None once listed; else what is awaited, with the last error."""
        return waiting_report(self.stats)

    async def run(self) -> None:
        await self.reflector.run()
