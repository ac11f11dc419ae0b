"""The store every informer fills: listeners hear each change, and one listener's bug
stays its own (the reflector that feeds the store serves everyone else)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from extender.kube.store import Named, Store


@dataclass(frozen=True)
class Item:
    name: str
    value: int = 0


def test_a_listener_that_raises_is_logged_and_the_others_still_hear(caplog: pytest.LogCaptureFixture) -> None:
    store: Store[Item] = Store("items")
    heard: list[tuple[str | None, str | None]] = []

    def buggy(_kind: str, _old: Named | None, _new: Named | None) -> None:
        raise KeyError("bug")

    def keeps_count(_kind: str, old: Named | None, new: Named | None) -> None:
        heard.append((old.name if old else None, new.name if new else None))

    store.add_listener(buggy)
    store.add_listener(keeps_count)
    with caplog.at_level(logging.ERROR, logger="extender.kube.store"):
        store.replace([Item("a")])
        store.upsert(Item("a", 1))
        store.delete("a")
    assert heard == [(None, "a"), ("a", "a"), ("a", None)]
    assert store.synced and len(store) == 0
    failures = [r for r in caplog.records if r.getMessage() == "a store listener failed"]
    assert len(failures) == 3 and all(r.exc_info is not None for r in failures)
