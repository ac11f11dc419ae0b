"""Bounded waiting for tests of asynchronous machinery (watches, requeueing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(
    condition: Callable[[], bool], *, timeout: float = 10.0, what: str = "condition"
) -> None:
    """Wait (bounded) for ``condition``; never a fixed sleep."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)
