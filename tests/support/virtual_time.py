"""An event loop whose clock moves only when nothing is ready to run: a simulated hour
of timers (backoffs, rate limits, coalescing delays) passes in the time its callbacks
take, and the order of events is the one real time would give.

For tests of machinery that sleeps and schedules on the loop's clock (the leader's
queue of keys); there is no real I/O on such a loop but its own wake-up pipe. Run a
test's coroutine with ``run``.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Never blocks: a wait of ``timeout`` seconds moves the loop's clock instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("nothing scheduled and nothing ready: the test would hang")
        self._loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_Selector(self))

    def time(self) -> float:
        return self.now


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
