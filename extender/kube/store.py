"""A store of watched objects, by name: what a reflector keeps equal to the API server.

Sources write; readers (the filter handler, the leader's actors) read. Everything runs
on one asyncio loop, so a store is never read half-updated: ``replace`` swaps the whole
dict in one assignment, which is what a re-LIST after ``410 Gone`` needs (objects
deleted while disconnected disappear, and readers see either the old or the new state,
never a mix).

Listeners hear about every change (kind, old, new) after it is applied; caches of
derived results and the leader's actors hang off them. A listener that raises is
logged with its traceback and the others still hear the change: its bug must not stop
the reflector that feeds everyone (the cluster state's watch serves ``/filter``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any, Protocol, TypeVar

log = logging.getLogger("extender.kube.store")


class ObjectError(ValueError):
    """An API object is not shaped as Kubernetes defines it (a decoder refuses it; the
    reflector skips it and logs why)."""


class Named(Protocol):
    @property
    def name(self) -> str: ...


V = TypeVar("V", bound=Named)

# listener(kind, old, new): old None = added, new None = deleted.
Listener = Callable[[str, Named | None, Named | None], None]


class Store(Mapping[str, V]):
    """The objects of one kind, by name: a read-only mapping, changed only by
    ``upsert``/``delete``/``replace`` so that listeners hear every change."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, V] = {}
        self.synced = False
        self._listed: asyncio.Event | None = None  # made by the first wait_synced
        # Bumped on every change: a cheap way for caches to notice staleness.
        self.generation = 0
        self._listeners: list[Listener] = []

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __getitem__(self, name: str) -> V:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    # The dict's own methods and views, not the Mapping mixins: they run in C, and the
    # filter's hot path reads them.
    def get(self, name: str, default: Any = None) -> Any:
        return self._items.get(name, default)

    def keys(self) -> KeysView[str]:
        return self._items.keys()

    def values(self) -> ValuesView[V]:
        return self._items.values()

    def items(self) -> ItemsView[str, V]:
        return self._items.items()

    def live_dict(self) -> Mapping[str, V]:
        """The store's own dict (read-only by type) for hot loops: its ``get`` and ``in``
        run in C, where the Mapping's would add a Python call per node name."""
        return self._items

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, old: V | None, new: V | None) -> None:
        self.generation += 1
        for listener in self._listeners:
            try:
                listener(self.kind, old, new)
            except Exception:
                log.exception(
                    "a store listener failed", extra={"kind": self.kind, "listener": repr(listener)}
                )

    def upsert(self, item: V) -> None:
        old = self._items.get(item.name)
        self._items[item.name] = item
        self._notify(old, item)

    def delete(self, name: str) -> None:
        old = self._items.pop(name, None)
        if old is not None:
            self._notify(old, None)

    def replace(self, items: Iterable[V]) -> None:
        """Swap in a complete new set (a LIST) and mark the kind synced."""
        new = {item.name: item for item in items}
        old = self._items
        self._items = new
        # Listeners hear the difference, so derived state stays exact.
        for name, item in old.items():
            if name not in new:
                self._notify(item, None)
        for name, item in new.items():
            if old.get(name) != item:
                self._notify(old.get(name), item)
        self.generation += 1
        # Set after the notifications: a listener that sees ``synced`` still False is
        # hearing the first LIST (a baseline), not changes (the requeuer relies on it).
        self.synced = True
        if self._listed is not None:
            self._listed.set()

    async def wait_synced(self) -> None:
        """Until the first LIST is in (``synced``)."""
        if self.synced:
            return
        if self._listed is None:
            self._listed = asyncio.Event()
        await self._listed.wait()
