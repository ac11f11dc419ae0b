"""Bounded waiting for tests of asynchronous machinery (watches, requeueing) and, in
the real tier, of processes (wait_for)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


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


def wait_for(
    condition: Callable[[], Any], *, timeout: float = 60.0, what: str, last: Callable[[], object] | None = None
) -> Any:
    """Poll ``condition`` until it returns something true (returned), or fail saying what
    was awaited and, with ``last``, what was seen last. For the real tier, whose state
    lives in other processes."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f} s waiting for {what}" + (f": {last()}" if last else "")
            )
        time.sleep(0.1)
