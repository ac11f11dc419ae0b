"""``serve``'s one settling of memory, once every store is listed.

The first LISTs decode every node and pending pod, page by page, and drop the pages:
what they leave is free but still resident (the C heap keeps it). Once they are in,
``settle_memory_once_listed`` collects, hands the free pages back (glibc's
``malloc_trim``) and freezes what lives on, so the cyclic collector need not re-scan
the caches on every full collection (a pause some filter call would wait out).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
from collections.abc import Callable

from aiohttp import web

from extender.http.keys import INFORMERS, STATE

log = logging.getLogger("extender")


def listed(app: web.Application) -> bool:
    """Every store the app reads is listed: the cluster state and every informer."""
    informers = app.get(INFORMERS)
    return bool(app[STATE].synced and (informers is None or all(s.synced for s in informers())))


def release_freed_memory() -> bool:
    """Hand the C heap's free pages back to the operating system (glibc's malloc_trim;
    False where there is none, such as musl)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim(0)
    return True


async def settle_memory_once_listed(
    app: web.Application, *, poll: float = 1.0, release: Callable[[], bool] = release_freed_memory
) -> None:
    """Once, after the first LISTs: the pages of every node and pending pod were decoded
    and dropped, and what they left is free but still counted as resident (the C heap
    keeps it); collect, give it back, and freeze what lives on (the caches: the
    collector need not re-scan them on every full collection, a pause some filter call
    would wait out). At 15,000 nodes and 10,000 pending pods about 7 MB."""
    while not listed(app):
        await asyncio.sleep(poll)
    gc.collect()
    released = release()
    gc.freeze()
    log.debug("settled memory after the first LISTs", extra={"released": released})
