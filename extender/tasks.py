"""Background tasks that live as long as the server: one way to start, stop and watch them.

The watch, the leader election, the leader actors, the capture writer, the certificate
reloaders and the node lookup all run work beside the request handlers. Each hands
``BackgroundTasks.job()`` a coroutine function; the result is an aiohttp cleanup
context (a callable taking the app and yielding once), so the task starts after the
app is set up and is stopped and awaited on shutdown, in reverse order of
registration. Nothing here imports aiohttp: the components stay ignorant of the app,
and ``extender.http.wiring`` does the wiring.

Stopping: the task is cancelled. A component that should finish what it has queued
first (the capture writer writes its queue, the requeuer sends the nudges it planned)
passes ``drain``, awaited before the cancel; a drain bounds its own wait.

A task that ends on its own while the app runs (an error, or a loop that returned) is
a broken process: it is logged at once, with its name and error, and ``ended`` lists
it, which turns ``/healthz`` unhealthy so the kubelet restarts the container. Only a
cancellation (shutdown) is a normal end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("extender.tasks")

# What aiohttp's ``app.cleanup_ctx`` takes (typed loosely: this module must not import
# aiohttp.web, and the argument is never used here).
CleanupContext = Callable[[Any], contextlib.AbstractAsyncContextManager[None]]


@dataclass(frozen=True)
class EndedTask:
    name: str
    error: str


class BackgroundTasks:
    """The app's background tasks, and those that ended while it ran."""

    def __init__(self) -> None:
        self.ended: list[EndedTask] = []

    def job(
        self,
        name: str,
        run: Callable[[], Awaitable[None]],
        *,
        drain: Callable[[], Awaitable[None]] | None = None,
    ) -> CleanupContext:
        """A cleanup context running ``run()`` as the task ``name`` while the app runs."""

        @contextlib.asynccontextmanager
        async def context(_app: Any) -> AsyncIterator[None]:
            task = asyncio.create_task(_as_coroutine(run), name=name)
            task.add_done_callback(self._ended_early)
            try:
                yield
            finally:
                ended_early = task.done()  # then its callback logs it
                if not ended_early:
                    task.remove_done_callback(self._ended_early)
                await stop(task, drain=drain, log_error=not ended_early)

        return context

    def _ended_early(self, task: asyncio.Task[None]) -> None:
        """The task ended while the app runs (the callback is removed before shutdown)."""
        if task.cancelled():
            error = "cancelled"
        else:
            exception = task.exception()
            error = f"{type(exception).__name__}: {exception}" if exception else "returned"
        ended = EndedTask(task.get_name(), error)
        self.ended.append(ended)
        log.error("background task ended", extra={"task": ended.name, "error": ended.error})


def on_shutdown(close: Callable[[], Awaitable[None]]) -> CleanupContext:
    """A cleanup context that only awaits ``close()`` on shutdown (e.g. closing a client)."""

    @contextlib.asynccontextmanager
    async def context(_app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await close()

    return context


async def stop(
    task: asyncio.Task[None],
    *,
    drain: Callable[[], Awaitable[None]] | None = None,
    log_error: bool = True,
) -> None:
    """Stop ``task`` (drained first, if it can be); an error it ended with is logged
    unless the caller logs it itself, and never re-raised into the shutdown path."""
    if drain is not None and not task.done():
        await drain()
    task.cancel()
    # gather(return_exceptions=True) collects the task's own CancelledError but still
    # lets a cancellation of the caller propagate.
    (result,) = await asyncio.gather(task, return_exceptions=True)
    if isinstance(result, Exception) and log_error:
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
