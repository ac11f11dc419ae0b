"""Reflectors: keep one Store per kind equal to the API server's view, by LIST then WATCH.

This is client-go's Reflector (tools/cache/reflector.go, ``ListAndWatch``) in asyncio,
for the two kinds the predicates read: Nodes (``/api/v1/nodes``) and RuntimeClasses
(``/apis/node.k8s.io/v1/runtimeclasses``).

The loop, per kind::

    LIST (paginated: limit/continue)  -> Store.replace(all items), remember list RV
    WATCH from that RV (allowWatchBookmarks, timeoutSeconds)
        ADDED/MODIFIED -> Store.upsert     DELETED -> Store.delete
        BOOKMARK       -> remember RV      ERROR   -> 410: LIST again; else reconnect
    stream ends (server timeout)   -> WATCH again from the last RV
    410 Gone / RV too large        -> LIST again; the replace drops what vanished
    connection lost, 5xx, timeout  -> capped exponential backoff with jitter, then
                                      WATCH from the last RV (LIST if never listed)

Races and how they are closed:

- Nothing is lost between LIST and WATCH: the watch starts *at the list's
  resourceVersion*, so the server replays every change after the snapshot.
- Nothing is lost across reconnects: every applied event and bookmark advances the
  resourceVersion the next watch starts from (bookmarks exist so a quiet watch still
  advances, and a reconnect after an idle hour is not 410).
- A replayed or reordered event never rolls an object back: an event whose
  resourceVersion is older than the stored object's is ignored. resourceVersions are
  formally opaque (api-conventions.md), so the comparison is made only when both parse
  as integers, which is what every etcd-backed server hands out.
- A re-LIST replaces the whole store in one assignment (``Store.replace``), so readers
  see the old state or the new one, never a mix, and objects deleted while the watch
  was down disappear.
- While the API server is unreachable the last good state keeps serving; ``/healthz``
  reports the failure only after a configurable window (``SourceStats.failing_since``).
- A server restarted with a *lower* resourceVersion history answers the old RV with
  "too large resource version" (504, cause ResourceVersionTooLarge); like client-go
  (``isTooLargeResourceVersionError``) that means LIST again, and the new history wins.

Why not ``kubernetes_asyncio.watch.Watch``: it does not re-LIST on 410 (it raises, or
silently restarts from a resourceVersion the server has just said is gone), it has had
bugs in how it tracks resourceVersion across restarts and bookmarks, and it parses every
event into a full generated model object. Here the loop is ours, on the library's
``ApiClient`` (configuration, authentication, TLS), reading the chunked response line by
line with orjson and keeping only the slim views.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from extender.kube.api import ApiError, ListOptions, error_of, list_pages, request
from extender.kube.backoff import Backoff
from extender.kube.defaults import DEFAULT_PAGE_SIZE, DEFAULT_REQUEST_TIMEOUT
from extender.kube.health import SourceStats
from extender.kube.store import Named, ObjectError, Store

log = logging.getLogger("extender.watch")


@dataclass(frozen=True)
class WatchedResource:
    """A kind to reflect: its store name, collection path and API-JSON -> view converters."""

    kind: str
    path: str
    convert: Callable[[Any], Named]
    # Optional batch converter (one validator call for a whole LIST page).
    convert_many: Callable[[list[Any]], Sequence[Named]] | None = None
    # Optional server-side filter for LIST and WATCH, e.g. "spec.nodeName=" (the pod
    # requeuer watches unscheduled pods only). A watch reports an object that stops
    # matching as DELETED and one that starts matching as ADDED.
    field_selector: str = ""
    # The store key of a raw object (default: metadata.name). Must equal the converted
    # view's ``name``; namespaced kinds use "namespace/name".
    key: Callable[[Any], str] | None = None
    # What installs the resource, said when the API server does not serve it (a LIST
    # answered 404: a CustomResourceDefinition missing).
    missing_hint: str = ""


@dataclass(frozen=True)
class ReflectorOptions:
    page_size: int = DEFAULT_PAGE_SIZE
    # Server-side watch timeout; each watch asks for a random value in [t, 2t), as
    # client-go does with minWatchTimeout (5 min), so many clients do not reconnect in step.
    watch_timeout: float = 300.0
    # A watch that sends nothing (not even a bookmark, which the watch cache sends about
    # every minute: cacher.go defaultBookmarkFrequency) for this long is treated as dead.
    idle_timeout: float = 150.0
    # Connect timeout, and the whole-request timeout of one LIST page.
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    # Backoff between failed attempts: client-go's reflector uses
    # NewExponentialBackoffManager(800ms, 30s, 2min reset, factor 2.0, jitter 1.0).
    backoff_initial: float = 0.8
    backoff_max: float = 30.0
    backoff_reset_after: float = 120.0
    backoff_jitter: float = 1.0
    # Longest run of applying events before the loop is handed back: a burst of events
    # (every node relabelled, a class's pool drained) arrives in large chunks, and
    # /filter, the webhooks and the Lease renewals must not wait behind a whole chunk.
    slice_seconds: float = 0.002


class ShortWatch(Exception):
    """The watch ended cleanly at once without any event: treated as a failure."""


def parse_rv(rv: str) -> int | None:
    try:
        return int(rv)
    except ValueError:
        return None


def is_older(new_rv: str, stored_rv: str) -> bool:
    """True if ``new_rv`` is certainly older than ``stored_rv`` (both integers)."""
    new, stored = parse_rv(new_rv), parse_rv(stored_rv)
    return new is not None and stored is not None and new < stored


class Reflector:
    """Keeps ``store`` in step with one resource on the API server. Run with ``run()``."""

    def __init__(
        self,
        api: Any,
        resource: WatchedResource,
        store: Store[Any],
        stats: SourceStats,
        *,
        options: ReflectorOptions | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self.resource = resource
        self._store = store
        self.stats = stats
        self._options = options or ReflectorOptions()
        self._rng = rng or random.Random()
        self._clock = clock
        options = self._options
        self._backoff = Backoff(
            initial=options.backoff_initial,
            maximum=options.backoff_max,
            reset_after=options.backoff_reset_after,
            jitter=options.backoff_jitter,
            rng=self._rng,
            clock=clock,
        )
        # The resourceVersion the next watch starts from; None until a LIST succeeded.
        self.resource_version: str | None = None

    # ----- the loop -----------------------------------------------------------------

    async def run(self) -> None:
        """LIST and WATCH forever; returns only when cancelled."""
        relists_in_a_row = 0
        while True:
            delay = 0.0
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
                # A clean end is the server's timeoutSeconds: watch again at once.
                relists_in_a_row = 0
            except ApiError as exc:
                if exc.expired:
                    self.stats.relists += 1
                    self.resource_version = None
                    relists_in_a_row += 1
                    log.info(
                        "watch expired; listing again",
                        extra={"kind": self.resource.kind, "reason": exc.message or str(exc)},
                    )
                    # One re-LIST is normal; a run of them means something is off: back off.
                    if relists_in_a_row > 1:
                        delay = self._backoff.next()
                elif exc.status == 404 and self.resource_version is None:
                    delay = self._backoff.next()
                    self._missing(exc, delay)
                else:
                    delay = self._backoff.next()
                    if exc.retry_after is not None:
                        delay = max(delay, min(exc.retry_after, self._options.backoff_max))
                    self._failed(exc, delay)
            except asyncio.CancelledError:
                raise
            except (ShortWatch, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
                delay = self._backoff.next()
                self._failed(exc, delay)
            except Exception as exc:
                # A bug of ours, not the server's. Keep the loop alive (the last good state
                # keeps serving) and count it as failing, so /healthz eventually asks for
                # a restart if it persists.
                delay = self._backoff.next()
                log.exception("reflector error; retrying", extra={"kind": self.resource.kind})
                self._failed(exc, delay)
            self.stats.reconnects += 1
            if delay > 0:
                await asyncio.sleep(delay)

    def _failed(self, exc: BaseException, delay: float) -> None:
        stats = self.stats
        if stats.failing_since is None:
            stats.failing_since = self._clock()
        text = str(exc) or type(exc).__name__
        stats.last_error = f"{type(exc).__name__}: {text}" if not isinstance(exc, ApiError) else text
        log.warning(
            "cannot reach the API server; retrying",
            extra={"kind": self.resource.kind, "error": stats.last_error, "retryIn": round(delay, 3)},
        )

    def _missing(self, exc: ApiError, delay: float) -> None:
        """The LIST answered 404: the API server is there and does not serve the
        resource (a CustomResourceDefinition not installed), which no retry cures by
        itself. Said once, with what installs it; listed again with backoff, so that it
        is picked up once installed."""
        stats = self.stats
        stats.last_contact = self._clock()
        stats.failing_since = None
        stats.last_error = exc.message or str(exc)
        if not stats.missing:
            stats.missing = True
            stats.missing_hint = self.resource.missing_hint
            log.warning(
                "the API server does not serve this resource; the work that needs it waits for it",
                extra={
                    "kind": self.resource.kind,
                    "path": self.resource.path,
                    "error": stats.last_error,
                    "hint": self.resource.missing_hint,
                },
            )

    def _contact(self) -> None:
        """The API server answered: the source is healthy again."""
        now = self._clock()
        self.stats.last_contact = now
        if self.stats.failing_since is not None:
            log.info("API server reachable again", extra={"kind": self.resource.kind})
        if self.stats.missing:
            log.info("the API server serves this resource now", extra={"kind": self.resource.kind})
        self.stats.failing_since = None
        self.stats.last_error = ""
        self.stats.missing = False

    # ----- HTTP ---------------------------------------------------------------------

    async def _list(self) -> None:
        """A complete paginated LIST, then one atomic Store.replace.

        Each page is cut down to slim views as it arrives: raw Nodes are tens of KB each
        (images, managedFields), so holding a whole 15,000-node LIST raw would cost
        hundreds of MB at once.
        """
        options = self._options
        timeout = aiohttp.ClientTimeout(total=options.request_timeout, sock_connect=options.request_timeout)
        listing = ListOptions(
            page_size=options.page_size, field_selector=self.resource.field_selector, timeout=timeout
        )
        views: list[Named] = []
        rv = ""
        async for page in list_pages(self._api, self.resource.path, listing):
            self._contact()
            if page.restarted:
                views = []  # the continue token expired: an unpaged LIST started over
            views.extend(self._convert_all(page.items))
            rv = page.resource_version
        self._store.replace(views)
        now = self._clock()
        self.stats.synced = True
        self.stats.lists += 1
        self.stats.last_event = now
        self.resource_version = rv
        self._backoff.reset()
        log.info("listed", extra={"kind": self.resource.kind, "items": len(views), "resourceVersion": rv})

    def _convert_all(self, items: list[Any]) -> list[Named]:
        if self.resource.convert_many is not None:
            try:
                return list(self.resource.convert_many(items))
            except ObjectError:
                pass  # at least one bad item: convert one by one to skip only those
        views = []
        for item in items:
            try:
                views.append(self.resource.convert(item))
            except ObjectError as exc:
                self._skip(item, exc)
        return views

    def _skip(self, obj: Any, exc: ObjectError) -> None:
        # A malformed object is logged and left out; it must not poison the store.
        log.warning(
            "skipped malformed object",
            extra={"kind": self.resource.kind, "object": _name(obj), "error": str(exc)},
        )

    async def _watch(self) -> None:
        """One WATCH from ``resource_version`` until the stream ends or fails."""
        options = self._options
        assert self.resource_version is not None
        server_timeout = int(options.watch_timeout * (1.0 + self._rng.random()))
        query = [
            ("watch", "true"),
            ("resourceVersion", self.resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(max(1, server_timeout))),
        ]
        if self.resource.field_selector:
            query.append(("fieldSelector", self.resource.field_selector))
        # No total timeout: the server ends the stream. sock_read catches a stalled one.
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=options.request_timeout, sock_read=options.idle_timeout
        )
        async with await request(
            self._api, "GET", self.resource.path, query=query, timeout=timeout
        ) as response:
            if response.status != 200:
                raise await error_of(response)
            self._contact()
            self._backoff.reset()
            started = self._clock()
            received = 0
            buffer = bytearray()
            loop = asyncio.get_running_loop()
            async for chunk in response.content.iter_any():
                buffer += chunk
                start = 0
                slice_ends = loop.time() + options.slice_seconds
                while (end := buffer.find(b"\n", start)) >= 0:
                    line = bytes(buffer[start:end])
                    start = end + 1
                    if line.strip():
                        received += 1
                        self.handle_event(orjson.loads(line))
                        if loop.time() >= slice_ends:
                            await asyncio.sleep(0)
                            slice_ends = loop.time() + options.slice_seconds
                del buffer[:start]
            if buffer.strip():
                received += 1
                self.handle_event(orjson.loads(bytes(buffer)))
        if received == 0 and self._clock() - started < 1.0:
            # A stream that ends at once with nothing in it is not the server's timeout
            # (e.g. a proxy closing it): back off instead of reconnecting in a tight loop.
            # reflector.go's watchHandler treats it the same ("very short watch").
            raise ShortWatch("watch closed after less than a second without any event")

    # ----- events -------------------------------------------------------------------

    def handle_event(self, event: Any) -> None:
        """Apply one decoded watch event to the store (bookkeeping only, no I/O).

        Raises ``ValueError`` for a malformed event, and for an ERROR event either the
        ``ApiError`` (``expired`` for 410 / too large: LIST again).
        """
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ValueError("watch event is not {type, object}")
        event_type, obj = event.get("type"), event["object"]
        now = self._clock()
        self.stats.last_contact = now
        if event_type == "ERROR":
            raise ApiError.from_status(obj)
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        rv = str(metadata.get("resourceVersion") or "")
        if event_type == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning(
                "ignored watch event of unknown type", extra={"kind": self.resource.kind, "type": event_type}
            )
            return
        self._apply(event_type, obj, rv)
        if rv:
            self.resource_version = rv
        self.stats.events += 1
        self.stats.last_event = now

    def _apply(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        store = self._store
        name = (self.resource.key or _name)(obj)
        current = store.get(name) if name else None
        if current is not None and is_older(rv, getattr(current, "resource_version", "")):
            log.debug(
                "ignored stale event",
                extra={
                    "kind": self.resource.kind,
                    "object": name,
                    "resourceVersion": rv,
                    "stored": current.resource_version,
                },
            )
            return
        if event_type == "DELETED":
            if name:
                store.delete(name)
            return
        try:
            view = self.resource.convert(obj)
        except ObjectError as exc:
            self._skip(obj, exc)
            # The object's current state is unreadable: drop the previous version too, as
            # a re-LIST would, rather than keep deciding on rules that no longer hold (a
            # node's new taint, a class's new selector). It comes back with a good version.
            if name:
                store.delete(name)
            return
        store.upsert(view)


def _name(obj: Any) -> str:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else ""
