"""The cluster-file source: Nodes and RuntimeClasses from a file instead of an API server.

Accepts what ``kubectl get nodes,runtimeclasses -o yaml`` (or ``-o json``) prints: a
``List`` (or ``NodeList``/``RuntimeClassList``), or a multi-document YAML stream of
single objects and lists. Used for running without a cluster, for tests, and for
replaying captured requests against a known state.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.objects import ObjectError, node_from_api, runtime_class_from_api
from extender.cluster.state import ClusterState
from policies.objects import NodeView, RuntimeClassView


class ClusterFileError(ValueError):
    """The cluster file cannot be used; the message names the file and the item."""


def _documents(text: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [orjson.loads(stripped)]
        except orjson.JSONDecodeError:
            pass  # YAML flow style also starts with "{"; let the YAML parser judge it.
    # CSafeLoader where libyaml is present: the example files are small, but users
    # point this at dumps of large clusters.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc is not None]


def _objects(documents: list[Any]) -> Iterator[tuple[str, Any]]:
    for doc_index, doc in enumerate(documents):
        if not isinstance(doc, dict):
            raise ClusterFileError(f"document {doc_index}: expected a Kubernetes object or List")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise ClusterFileError(f"document {doc_index}: items must be a list")
            item_kind = kind[: -len("List")] or None
            for item_index, item in enumerate(items):
                where = f"document {doc_index}, item {item_index}"
                if isinstance(item, dict) and item_kind and "kind" not in item:
                    item = {**item, "kind": item_kind}
                yield where, item
        else:
            yield f"document {doc_index}", doc


def parse_cluster(
    text: str, *, selector_errors: SelectorErrorLog | None = None
) -> tuple[list[NodeView], list[RuntimeClassView]]:
    """Nodes and RuntimeClasses from a cluster file's text. Raises ClusterFileError."""
    try:
        documents = _documents(text)
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"not valid YAML or JSON: {exc}") from None
    nodes: dict[str, NodeView] = {}
    classes: dict[str, RuntimeClassView] = {}
    for where, obj in _objects(documents):
        if not isinstance(obj, dict):
            raise ClusterFileError(f"{where}: expected an object")
        kind = obj.get("kind")
        try:
            if kind == "Node":
                node = node_from_api(obj)
                if node.name in nodes:
                    raise ClusterFileError(f"{where}: Node {node.name!r} appears twice")
                nodes[node.name] = node
            elif kind == "RuntimeClass":
                rc = runtime_class_from_api(obj, selector_errors=selector_errors)
                if rc.name in classes:
                    raise ClusterFileError(f"{where}: RuntimeClass {rc.name!r} appears twice")
                classes[rc.name] = rc
            else:
                raise ClusterFileError(f"{where}: kind {kind!r} is not Node or RuntimeClass")
        except ObjectError as exc:
            raise ClusterFileError(f"{where}: {exc}") from None
    return list(nodes.values()), list(classes.values())


def load_cluster_file(
    path: str | Path, state: ClusterState | None = None, *, selector_errors: SelectorErrorLog | None = None
) -> ClusterState:
    """Read ``path`` into ``state`` (a new one by default) and mark both kinds synced."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterFileError(f"{path}: cannot read: {exc}") from None
    try:
        nodes, classes = parse_cluster(text, selector_errors=selector_errors)
    except ClusterFileError as exc:
        raise ClusterFileError(f"{path}: {exc}") from None
    state = state if state is not None else ClusterState()
    state.nodes.replace(nodes)
    state.runtime_classes.replace(classes)
    return state
