"""Bounded waiting for tests of asynchronous machinery (watches, requeueing)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout: float = 10.0, what: str = "condition"
) -> None:
    """Wait (bounded) for ``condition`` (a plain or an async callable); never a fixed sleep."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcome = condition()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def stays(condition: Callable[[], bool], *, duration: float = 0.5, what: str = "condition") -> None:
    """Check that ``condition`` holds throughout ``duration`` seconds (bounded).

    For "exactly one" after ``eventually`` saw the first: a duplicate arrives later, if
    at all, so the count is watched for a while instead of read once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration
    while True:
        if not condition():
            raise AssertionError(f"no longer true: {what}")
        if loop.time() > deadline:
            return
        await asyncio.sleep(0.005)
