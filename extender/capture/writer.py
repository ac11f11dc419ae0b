"""The capture writer behind ``serve --capture-dir``: one file per answered filter call.

``replay`` re-decides the files later (after a RuntimeClass edit or an upgrade) and
shows what would change; the file format is ``extender.capture.format``.

Capturing must never slow or fail a filter call, so the work is split:

- In the handler, ``CaptureWriter.submit`` only takes references: the raw request and
  response bytes, the (frozen) RuntimeClass view, and a snapshot of the node map. The
  snapshot is a shallow dict copy taken only when the store's generation changed since
  the last capture, so a steady cluster costs nothing per call. The pending capture
  goes to a bounded queue with ``put_nowait``; when the queue is full the capture is
  dropped and counted, never waited for.
- A background task (``run``, started and drained by ``extender.http.wiring``) takes
  pending captures one by one and builds and writes each file in a worker thread.
  Node views are immutable, so reading them off the loop thread is safe. Their JSON
  and digests are cached by identity, which keeps the per-capture CPU work (and so the
  GIL time taken from the loop) to a join of cached fragments.
- Files are written to a temporary name and renamed, so a reader never sees half a
  file. Past ``max_files`` or ``max_bytes`` the oldest files (by name, which starts
  with the UTC time) are removed. Write errors are logged and counted, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from extender.capture.format import FILE_PREFIX, FILE_SUFFIX, Pending, RecordBuilder, file_name
from extender.cluster.state import ClusterState
from extender.filtering import Decision
from extender.protocol import ExtenderArgs
from extender.settings import DEFAULT_CAPTURE_MAX_BYTES, DEFAULT_CAPTURE_MAX_FILES
from policies.objects import NodeView, RuntimeClassView
from policies.registry import Policy

log = logging.getLogger("extender.capture")

# Pending captures waiting for the writer; beyond this they are dropped (and counted).
# Each may hold its own shallow copy of the node map (when the state changed between
# calls: ~650 KB at 15,000 nodes) plus the request bytes, so the queue stays short.
DEFAULT_QUEUE_SIZE = 64


@dataclass
class CaptureStats:
    written: int = 0
    dropped: int = 0  # queue full
    too_large: int = 0  # a single capture larger than max_bytes
    failed: int = 0  # write errors
    removed: int = 0  # old files removed to stay within the bounds


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
        max_files: int = DEFAULT_CAPTURE_MAX_FILES,
        max_bytes: int = DEFAULT_CAPTURE_MAX_BYTES,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        self.dir = CaptureDir(Path(directory), max_files, max_bytes)
        self.stats = CaptureStats()
        self._queue: asyncio.Queue[Pending | None] = asyncio.Queue(maxsize=queue_size)
        self._finished = asyncio.Event()
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
            await self._write_until_closed()
        finally:
            self._finished.set()

    async def _write_until_closed(self) -> None:
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
        """Stop the writer after what is already queued, and wait until it is written."""
        while True:
            try:
                self._queue.put_nowait(None)
                break
            except asyncio.QueueFull:
                await asyncio.sleep(0.01)
        await self._finished.wait()
