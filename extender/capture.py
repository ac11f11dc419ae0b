"""Capture: every filter request, its answer and the state it was decided against.

``serve --capture-dir DIR`` writes one JSON file per answered filter call, so that
``replay`` can re-decide them later (after a RuntimeClass edit or an upgrade) and show
what would change. The file format is documented in the README ("Capture file format")
and versioned by ``apiVersion``/``kind``.

Capturing must never slow or fail a filter call, so the work is split:

- In the handler, ``CaptureWriter.submit`` only takes references: the raw request and
  response bytes, the (frozen) RuntimeClass view, and a snapshot of the node map. The
  snapshot is a shallow dict copy taken only when the store's generation changed since
  the last capture, so a steady cluster costs nothing per call. The pending capture
  goes to a bounded queue with ``put_nowait``; when the queue is full the capture is
  dropped and counted, never waited for.
- A background task (started and stopped through the app's ``cleanup_ctx``) takes
  pending captures one by one and builds and writes each file in a worker thread.
  Node views are immutable, so reading them off the loop thread is safe. Their JSON
  and digests are cached by identity, which keeps the per-capture CPU work (and so the
  GIL time taken from the loop) to a join of cached fragments.
- Files are written to a temporary name and renamed, so a reader never sees half a
  file. Past ``max_files`` or ``max_bytes`` the oldest files (by name, which starts
  with the UTC time) are removed. Write errors are logged and counted, never raised.

The state fingerprint covers the whole state (every Node and RuntimeClass view), not
only the referenced objects: replay uses it to tell whether it runs against the state
the capture saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from aiohttp import web

from extender import __version__
from extender.cluster.state import ClusterState
from extender.filtering import Decision
from extender.protocol import ExtenderArgs
from extender.settings import SettingsError
from extender.viewcodec import to_json
from policies.objects import NodeView, RuntimeClassView
from policies.registry import Policy

log = logging.getLogger("extender.capture")

CAPTURE_API_VERSION = "runtimeclass-extender.dev/v1alpha1"
CAPTURE_KIND = "FilterCapture"
FILE_PREFIX = "capture-"
FILE_SUFFIX = ".json"

DEFAULT_MAX_FILES = 1000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
# Pending captures waiting for the writer; beyond this they are dropped (and counted).
# Each may hold its own shallow copy of the node map (when the state changed between
# calls: ~650 KB at 15,000 nodes) plus the request bytes, so the queue stays short.
DEFAULT_QUEUE_SIZE = 64


class Pending(NamedTuple):
    """What the handler hands over: references only, no copying of request data."""

    sequence: int
    unix_time: float
    request: bytes
    response: bytes
    names: Sequence[str] | None  # names mode: the nodes asked about (the request's own list)
    runtime_class_name: str | None
    runtime_class: RuntimeClassView | None
    nodes: Mapping[str, NodeView]  # snapshot, never mutated after it was taken
    # Nodes the handler looked up directly because the state did not hold them yet.
    extra_nodes: Mapping[str, NodeView] | None
    classes: Mapping[str, RuntimeClassView]
    snapshot_key: tuple[int, int, int]
    predicates: tuple[str, ...]


@dataclass
class CaptureStats:
    written: int = 0
    dropped: int = 0  # queue full
    too_large: int = 0  # a single capture larger than max_bytes
    failed: int = 0  # write errors
    removed: int = 0  # old files removed to stay within the bounds


def _object_json(view: NodeView | RuntimeClassView) -> bytes:
    return orjson.dumps(to_json(view), option=orjson.OPT_SORT_KEYS)


class ViewCache:
    """JSON bytes and digest of each view, recomputed only when the view object changes."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[object, bytes, str]] = {}

    def get(self, kind: str, view: NodeView | RuntimeClassView) -> tuple[bytes, str]:
        key = (kind, view.name)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is view:
            return entry[1], entry[2]
        data = _object_json(view)
        digest = hashlib.sha256(data).hexdigest()
        self._entries[key] = (view, data, digest)
        return data, digest

    def prune(self, live: set[tuple[str, str]]) -> None:
        for key in [k for k in self._entries if k not in live]:
            del self._entries[key]


def state_fingerprint(
    nodes: Mapping[str, NodeView], classes: Mapping[str, RuntimeClassView], cache: ViewCache | None = None
) -> str:
    """A digest of every Node and RuntimeClass view; equal states give equal fingerprints.

    The digest is over the views (what decisions read), not resourceVersions, so the same
    objects loaded from a cluster file or a watch fingerprint alike.
    """
    cache = cache or ViewCache()
    lines = [f"node/{name} {cache.get('node', view)[1]}" for name, view in nodes.items()]
    lines += [f"runtimeclass/{name} {cache.get('rc', view)[1]}" for name, view in classes.items()]
    lines.sort()
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def iso_time(unix_time: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(unix_time))
    return f"{seconds}.{int((unix_time % 1) * 1_000_000):06d}Z"


def file_name(unix_time: float, sequence: int) -> str:
    """Names sort oldest first: UTC time, then a per-process sequence number."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(unix_time))
    return f"{FILE_PREFIX}{stamp}.{int((unix_time % 1) * 1_000_000):06d}Z-{sequence:08d}{FILE_SUFFIX}"


class RecordBuilder:
    """Builds capture files; keeps the view cache and the last fingerprint between calls."""

    def __init__(self) -> None:
        self.cache = ViewCache()
        self._fingerprint: tuple[tuple[int, int, int], str] | None = None

    def fingerprint(self, pending: Pending) -> str:
        if self._fingerprint is not None and self._fingerprint[0] == pending.snapshot_key:
            return self._fingerprint[1]
        value = state_fingerprint(pending.nodes, pending.classes, self.cache)
        live = {("node", n) for n in pending.nodes} | {("rc", n) for n in pending.classes}
        self.cache.prune(live)
        self._fingerprint = (pending.snapshot_key, value)
        return value

    def build(self, pending: Pending) -> bytes:
        nodes: dict[str, Any] = {}
        for name in pending.names or ():
            view = pending.nodes.get(name) or (pending.extra_nodes or {}).get(name)
            nodes[name] = orjson.Fragment(self.cache.get("node", view)[0]) if view is not None else None
        rc = pending.runtime_class
        record = {
            "apiVersion": CAPTURE_API_VERSION,
            "kind": CAPTURE_KIND,
            "time": iso_time(pending.unix_time),
            "sequence": pending.sequence,
            "extender": {"version": __version__, "predicates": list(pending.predicates)},
            "request": orjson.Fragment(pending.request),
            "response": orjson.Fragment(pending.response),
            "state": {
                "fingerprint": self.fingerprint(pending),
                "nodeCount": len(pending.nodes),
                "runtimeClassCount": len(pending.classes),
                "runtimeClassName": pending.runtime_class_name,
                "runtimeClass": orjson.Fragment(self.cache.get("rc", rc)[0]) if rc is not None else None,
                "nodes": nodes if pending.names is not None else None,
            },
        }
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)


@dataclass
class CaptureDir:
    """The files of a capture directory, oldest first, kept within count and size bounds."""

    directory: Path
    max_files: int
    max_bytes: int
    files: deque[tuple[str, int]] = field(default_factory=deque)
    total_bytes: int = 0

    def scan(self) -> None:
        """Pick up files left by an earlier run, so the bounds hold across restarts."""
        self.directory.mkdir(parents=True, exist_ok=True)
        found = []
        for entry in os.scandir(self.directory):
            if entry.name.startswith(FILE_PREFIX) and entry.name.endswith(FILE_SUFFIX) and entry.is_file():
                found.append((entry.name, entry.stat().st_size))
        found.sort()
        self.files = deque(found)
        self.total_bytes = sum(size for _, size in found)

    def write(self, name: str, data: bytes) -> int:
        """Write one file atomically, then remove the oldest past the bounds. Returns removals."""
        temp = self.directory / f".{name}.tmp"
        try:
            temp.write_bytes(data)
            os.replace(temp, self.directory / name)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        self.files.append((name, len(data)))
        self.total_bytes += len(data)
        return self.enforce()

    def enforce(self) -> int:
        removed = 0
        while self.files and (len(self.files) > self.max_files or self.total_bytes > self.max_bytes):
            name, size = self.files.popleft()
            self.total_bytes -= size
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()
            removed += 1
        return removed


class CaptureWriter:
    """Queue of pending captures plus the background task that writes them."""

    def __init__(
        self,
        directory: str | Path,
        *,
        max_files: int = DEFAULT_MAX_FILES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        self.dir = CaptureDir(Path(directory), max_files, max_bytes)
        self.stats = CaptureStats()
        self._queue: asyncio.Queue[Pending | None] = asyncio.Queue(maxsize=queue_size)
        self._builder = RecordBuilder()
        self._sequence = 0
        self._snapshot: tuple[tuple[int, int, int], dict[str, NodeView], dict[str, RuntimeClassView]] | None
        self._snapshot = None

    # -- the handler side: cheap, never blocks, never raises --------------------------

    def submit(
        self,
        *,
        request: bytes,
        response: bytes,
        names: Sequence[str] | None,
        runtime_class_name: str | None,
        runtime_class: RuntimeClassView | None,
        state: ClusterState,
        policy: Policy,
        extra_nodes: Mapping[str, NodeView] | None = None,
    ) -> None:
        try:
            key = (id(state), state.nodes.generation, state.runtime_classes.generation)
            if self._snapshot is None or self._snapshot[0] != key:
                self._snapshot = (key, dict(state.nodes.items()), dict(state.runtime_classes.items()))
            self._sequence += 1
            pending = Pending(
                sequence=self._sequence,
                unix_time=time.time(),
                request=request,
                response=response,
                names=names,
                runtime_class_name=runtime_class_name,
                runtime_class=runtime_class,
                nodes=self._snapshot[1],
                extra_nodes=extra_nodes,
                classes=self._snapshot[2],
                snapshot_key=key,
                predicates=policy.names,
            )
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self.stats.dropped += 1
            if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                log.warning("capture queue full, dropping captures", extra={"dropped": self.stats.dropped})
        except Exception:  # capturing must never fail a filter call
            log.exception("capture failed")

    def submit_decision(
        self,
        request: bytes,
        response: bytes,
        args: ExtenderArgs,
        decision: Decision,
        state: ClusterState,
        policy: Policy,
        extra_nodes: Mapping[str, NodeView] | None = None,
    ) -> None:
        """Queue the capture of one answered filter call (the hook in the filter handler).

        ``extra_nodes`` are the nodes the handler fetched directly for this call; they
        are captured like the others, so replay decides against what was decided on."""
        self.submit(
            request=request,
            response=response,
            names=args.NodeNames,
            runtime_class_name=decision.pod.runtime_class_name,
            runtime_class=decision.runtime_class,
            state=state,
            policy=policy,
            extra_nodes=extra_nodes,
        )

    # -- the background side -----------------------------------------------------------

    def _write(self, pending: Pending) -> None:
        data = self._builder.build(pending)
        if len(data) > self.dir.max_bytes:
            self.stats.too_large += 1
            log.warning(
                "capture larger than capture-max-bytes, not written",
                extra={"bytes": len(data), "max": self.dir.max_bytes},
            )
            return
        name = file_name(pending.unix_time, pending.sequence)
        self.stats.removed += self.dir.write(name, data)
        self.stats.written += 1

    async def run(self) -> None:
        """Write pending captures until ``close`` (a None in the queue) is seen."""
        try:
            await asyncio.to_thread(self.dir.scan)
        except OSError as exc:
            log.warning(
                "cannot read capture directory", extra={"dir": str(self.dir.directory), "error": str(exc)}
            )
        while True:
            pending = await self._queue.get()
            if pending is None:
                return
            try:
                await asyncio.to_thread(self._write, pending)
            except OSError as exc:
                self.stats.failed += 1
                log.warning("cannot write capture", extra={"dir": str(self.dir.directory), "error": str(exc)})
            except Exception:
                self.stats.failed += 1
                log.exception("cannot build capture")

    async def close(self) -> None:
        """Ask the writer to stop after what is already queued (used by cleanup)."""
        while True:
            try:
                self._queue.put_nowait(None)
                return
            except asyncio.QueueFull:
                await asyncio.sleep(0.01)


CAPTURE = web.AppKey("capture", CaptureWriter)


async def _capture_ctx(app: web.Application) -> AsyncIterator[None]:
    writer = app[CAPTURE]
    task = asyncio.create_task(writer.run(), name="capture-writer")
    yield
    if not task.done():
        await writer.close()
    try:
        await task
    except Exception:
        log.exception("capture writer stopped with an error")


def install_capture(app: web.Application, writer: CaptureWriter) -> None:
    """Capture every filter call of ``app`` with ``writer`` (before the app starts)."""
    app[CAPTURE] = writer
    app.cleanup_ctx.append(_capture_ctx)
    # Imported here: extender.app imports this module for the CAPTURE key.
    from extender.app import METRICS
    from extender.metrics import CAPTURE_COUNTERS

    app[METRICS].add_stats(writer.stats, CAPTURE_COUNTERS)


def capture_writer(settings: Mapping[str, Any]) -> CaptureWriter:
    """The writer for ``serve``'s capture settings; the directory is created now, so a
    path that cannot be used stops the process at start instead of dropping captures."""
    directory = Path(settings["capture_dir"])
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as exc:
        raise SettingsError(f"capture-dir: cannot use {directory}: {exc}") from None
    return CaptureWriter(
        directory, max_files=settings["capture_max_files"], max_bytes=settings["capture_max_bytes"]
    )
