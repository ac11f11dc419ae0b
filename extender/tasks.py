"""Background tasks that live as long as the server: one way to start, stop and log them.

The watch, the requeuer, the capture writer, the certificate reloader and the node
lookup all run work beside the request handlers. Each hands ``background()`` a
coroutine function; the result is an aiohttp cleanup context (a callable taking the
app and yielding once), so the task starts after the app is set up and is stopped and
awaited on shutdown, in reverse order of registration. Nothing here imports aiohttp:
the components stay ignorant of the app, and ``extender.http.serve`` does the wiring.

Stopping: the task is cancelled. A component that should finish what it has queued
first (the capture writer writes its queue, the requeuer sends the nudges it planned)
passes ``drain``, awaited before the cancel; a drain bounds its own wait. A task that
ended with an error is logged once, with its name, and never re-raised into the
shutdown path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

log = logging.getLogger("extender.tasks")

# What aiohttp's ``app.cleanup_ctx`` takes (typed loosely: this module must not import
# aiohttp.web, and the argument is never used here).
CleanupContext = Callable[[Any], contextlib.AbstractAsyncContextManager[None]]


def background(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> CleanupContext:
    """A cleanup context running ``run()`` as the task ``name`` while the app runs."""

    @contextlib.asynccontextmanager
    async def context(_app: Any) -> AsyncIterator[None]:
        task = asyncio.create_task(_as_coroutine(run), name=name)
        try:
            yield
        finally:
            await stop(task, drain=drain)

    return context


def on_shutdown(close: Callable[[], Awaitable[None]]) -> CleanupContext:
    """A cleanup context that only awaits ``close()`` on shutdown (e.g. closing a client)."""

    @contextlib.asynccontextmanager
    async def context(_app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await close()

    return context


async def stop(task: asyncio.Task[None], *, drain: Callable[[], Awaitable[None]] | None = None) -> None:
    """Stop ``task`` (drained first, if it can be) and log how it ended, if badly."""
    if drain is not None and not task.done():
        await drain()
    task.cancel()
    # gather(return_exceptions=True) collects the task's own CancelledError but still
    # lets a cancellation of the caller propagate.
    (result,) = await asyncio.gather(task, return_exceptions=True)
    if isinstance(result, Exception):
        log.error(
            "background task ended with an error",
            extra={"task": task.get_name(), "error": f"{type(result).__name__}: {result}"},
        )


async def run_all(*jobs: Callable[[], Awaitable[None]]) -> None:
    """Run several loops as one task: cancelling it cancels them all; the first one
    to fail cancels the others and its error propagates."""
    async with asyncio.TaskGroup() as group:
        for job in jobs:
            group.create_task(_as_coroutine(job))


async def _as_coroutine(run: Callable[[], Awaitable[None]]) -> None:
    await run()
