"""The capture file format: building a file from a filter call, and reading one back.

One JSON object per file (documented field by field in docs/reference.md, "Capture
file", and versioned by ``apiVersion``/``kind``): the request and the answer exactly
as sent, and the state the answer was decided against, as far as the request referenced
it (the pod's RuntimeClass and, in names mode, the nodes asked about), plus a
fingerprint of the whole state. Pure: bytes in, bytes out; ``extender.capture.writer``
writes files and ``extender.capture.replay`` reads them.

The fingerprint covers the whole state (every Node and RuntimeClass view), not only the
referenced objects: replay uses it to tell whether it runs against the state the
capture saw.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from pydantic import ValidationError

from extender import __version__
from extender.cluster.objects import describe_validation_error
from extender.protocol import ExtenderArgs
from extender.view_json import CodecError, node_from_json, runtime_class_from_json, to_json
from policies.objects import NodeView, RuntimeClassView

CAPTURE_API_VERSION = "runtimeclass-extender.dev/v1alpha1"
CAPTURE_KIND = "FilterCapture"
FILE_PREFIX = "capture-"
# Set by ``replay --url`` on every request it sends; ``serve`` does not capture requests
# that carry it, so replaying against the capturing server leaves its directory alone.
REPLAY_HEADER = "X-Runtimeclass-Extender-Replay"
FILE_SUFFIX = ".json"


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


class CaptureFormatError(ValueError):
    """A capture file cannot be read; the message names the file and the field."""


@dataclass(frozen=True)
class Capture:
    path: Path
    request: ExtenderArgs
    request_json: bytes
    response: Mapping[str, Any]
    fingerprint: str
    runtime_class_name: str | None
    runtime_class: RuntimeClassView | None
    # Names mode: the nodes asked about (None = the extender did not know it then).
    # Full-nodes mode: None, the nodes are in the request.
    nodes: Mapping[str, NodeView | None] | None

    @property
    def pod_name(self) -> str:
        return self.request.Pod.view().key


def parse_capture(data: bytes, path: Path) -> Capture:
    """One capture file's content -> Capture. Raises CaptureFormatError."""

    def bad(problem: str) -> CaptureFormatError:
        return CaptureFormatError(f"{path}: {problem}")

    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise bad(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise bad("expected a JSON object")
    if record.get("apiVersion") != CAPTURE_API_VERSION or record.get("kind") != CAPTURE_KIND:
        raise bad(f"expected apiVersion {CAPTURE_API_VERSION} and kind {CAPTURE_KIND}")
    request_json = orjson.dumps(record.get("request"))
    try:
        request = ExtenderArgs.model_validate_json(request_json)
    except ValidationError as exc:
        raise bad(f"malformed request: {describe_validation_error(exc, 'request')}") from None
    response = record.get("response")
    if not isinstance(response, dict):
        raise bad("response: expected an object")
    state = record.get("state")
    if not isinstance(state, dict):
        raise bad("state: expected an object")
    try:
        rc_json = state.get("runtimeClass")
        runtime_class = (
            runtime_class_from_json(rc_json, "state.runtimeClass") if rc_json is not None else None
        )
        nodes_json = state.get("nodes")
        nodes: dict[str, NodeView | None] | None = None
        if nodes_json is not None:
            if not isinstance(nodes_json, dict):
                raise CodecError("state.nodes: expected an object")
            nodes = {
                str(name): node_from_json(view, f"state.nodes.{name}") if view is not None else None
                for name, view in nodes_json.items()
            }
    except CodecError as exc:
        raise bad(str(exc)) from None
    rc_name = state.get("runtimeClassName")
    fingerprint = state.get("fingerprint")
    return Capture(
        path=path,
        request=request,
        request_json=request_json,
        response=response,
        fingerprint=fingerprint if isinstance(fingerprint, str) else "",
        runtime_class_name=rc_name if isinstance(rc_name, str) else None,
        runtime_class=runtime_class,
        nodes=nodes,
    )
