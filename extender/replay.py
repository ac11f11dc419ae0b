"""Replay: re-decide captured filter requests and say which decisions changed.

A capture file (``extender.capture``) holds a request, the answer given, and the state
it was decided against. Replaying decides the request again, by default against that
captured state (which finds changes made by a new extender version or policy), or
against a cluster file (which finds the effect of edited RuntimeClasses or nodes), and
compares the answers node by node: a node that moved between the passing list,
``FailedNodes`` and ``FailedAndUnresolvableNodes``, or whose reason text changed, is a
difference; so is a changed ``Error``.

Loading and comparing are pure functions here; reading the directory, POSTing to a
running extender and printing live in ``extender.commands_tools``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from extender.capture import CAPTURE_API_VERSION, CAPTURE_KIND, FILE_PREFIX, FILE_SUFFIX
from extender.cluster.objects import ObjectError, describe_validation_error
from extender.cluster.state import ClusterState
from extender.filtering import decide
from extender.protocol import ExtenderArgs
from extender.viewcodec import CodecError, node_from_json, runtime_class_from_json
from policies.objects import NodeView, RuntimeClassView
from policies.registry import Policy

PASSING = "passing"
FAILED = "FailedNodes"
UNRESOLVABLE = "FailedAndUnresolvableNodes"


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
        pod = self.request.Pod.view()
        return f"{pod.namespace}/{pod.name}" if pod.namespace else pod.name


def capture_files(directory: Path) -> list[Path]:
    """Capture files in ``directory``, oldest first. Raises OSError if unreadable."""
    return sorted(
        p for p in directory.iterdir() if p.name.startswith(FILE_PREFIX) and p.name.endswith(FILE_SUFFIX)
    )


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


def load_capture(path: Path) -> Capture:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureFormatError(f"{path}: cannot read: {exc}") from None
    return parse_capture(data, path)


def captured_state(capture: Capture) -> ClusterState:
    """The state as the capture saw it, as far as the request referenced it."""
    state = ClusterState()
    state.nodes.replace(v for v in (capture.nodes or {}).values() if v is not None)
    state.runtime_classes.replace([capture.runtime_class] if capture.runtime_class is not None else [])
    return state


def redecide(capture: Capture, state: ClusterState, policy: Policy) -> dict[str, Any]:
    """The answer the extender gives now, as JSON values. Raises CaptureFormatError."""
    try:
        result = decide(capture.request, state, policy).result
    except ObjectError as exc:
        raise CaptureFormatError(f"{capture.path}: malformed request: {exc}") from None
    answer: dict[str, Any] = orjson.loads(result.to_json())
    return answer


def _item_name(item: Any) -> str:
    if isinstance(item, dict):
        meta = item.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            return str(meta["name"])
    return "?"


def outcome(answer: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each node's place in a filter answer: (passing | FailedNodes | ..., reason)."""
    # Go decodes keys case-insensitively; accept what kube-scheduler would.
    folded = {str(k).lower(): v for k, v in answer.items()}
    places: dict[str, tuple[str, str]] = {}
    names = folded.get("nodenames")
    if isinstance(names, list):
        for name in names:
            places[str(name)] = (PASSING, "")
    nodes = folded.get("nodes")
    if isinstance(nodes, dict) and isinstance(nodes.get("items"), list):
        for item in nodes["items"]:
            places[_item_name(item)] = (PASSING, "")
    for key, place in (("failednodes", FAILED), ("failedandunresolvablenodes", UNRESOLVABLE)):
        failed = folded.get(key)
        if isinstance(failed, dict):
            for name, reason in failed.items():
                places[str(name)] = (place, str(reason))
    return places


def _describe(place: tuple[str, str] | None) -> str:
    if place is None:
        return "absent"
    where, reason = place
    return where if where == PASSING else f"{where} {orjson.dumps(reason).decode()}"


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Differences between two filter answers, one line each; empty when they agree."""
    changes: list[str] = []
    error_before = str(before.get("Error") or before.get("error") or "")
    error_after = str(after.get("Error") or after.get("error") or "")
    if error_before != error_after:
        changes.append(f"Error: {error_before!r} -> {error_after!r}")
    old, new = outcome(before), outcome(after)
    for node in sorted(old.keys() | new.keys()):
        if old.get(node) != new.get(node):
            changes.append(f"node {node}: {_describe(old.get(node))} -> {_describe(new.get(node))}")
    return changes
