"""Replay: re-decide captured filter requests and say which decisions changed.

A capture file (``extender.capture.writer``) holds a request, the answer given, and the state
it was decided against. Replaying decides the request again, by default against that
captured state (which finds changes made by a new extender version or policy), or
against a cluster file (which finds the effect of edited RuntimeClasses or nodes), and
compares the answers node by node: a node that moved between the passing list,
``FailedNodes`` and ``FailedAndUnresolvableNodes``, or whose reason text changed, is a
difference; so is a changed ``Error``.

Here: finding and reading the capture files of a directory, and the pure parts,
re-deciding and comparing. POSTing to a running extender and printing live in
``extender.tools.replay``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from extender.capture.format import FILE_PREFIX, FILE_SUFFIX, Capture, CaptureFormatError, parse_capture
from extender.cluster.objects import ObjectError
from extender.cluster.state import ClusterState
from extender.documents import read_failure
from extender.filtering import decide
from policies.registry import Policy

PASSING = "passing"
FAILED = "FailedNodes"
UNRESOLVABLE = "FailedAndUnresolvableNodes"


def capture_files(directory: Path) -> list[Path]:
    """Capture files in ``directory``, oldest first. Raises OSError if unreadable."""
    return sorted(
        p for p in directory.iterdir() if p.name.startswith(FILE_PREFIX) and p.name.endswith(FILE_SUFFIX)
    )


def load_capture(path: Path) -> Capture:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureFormatError(f"{path}: {read_failure(exc)}") from None
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
