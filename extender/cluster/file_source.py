"""The cluster-file source: Nodes and RuntimeClasses from a file instead of an API server.

Accepts what ``kubectl get nodes,runtimeclasses -o yaml`` (or ``-o json``) prints: a
``List`` (or ``NodeList``/``RuntimeClassList``), or a multi-document YAML stream of
single objects and lists. Used for running without a cluster, for tests, and for
replaying captured requests against a known state.

A file may also carry Pods (``kubectl get nodes,runtimeclasses,pods -A -o yaml``) for
the audit of running pods: ``load_cluster_file_with_pods`` returns them beside the
state. The plain ``load_cluster_file`` keeps rejecting Pods: a state for serving or
replay has no use for them, and a file of pods handed to it is more likely a mistake
than a cluster.

A file is held to what the API server would accept in the fields the extender reads
(``extender.cluster.validation``): a misspelt ``scheduling.nodeselector`` or an
``operator: exists`` is refused with the field path, instead of loading a class that
selects every node or a toleration that never tolerates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.objects import ObjectError, node_from_api, runtime_class_from_api
from extender.cluster.pod_views import ScheduledPod, TolerationInterner, scheduled_pod_from_api
from extender.cluster.state import ClusterState
from extender.cluster.validation import LabelMemo, describe_problems, object_problems, object_reference
from extender.documents import DocumentError, load_documents, read_failure
from policies.objects import NodeView, RuntimeClassView


class ClusterFileError(ValueError):
    """The cluster file cannot be used; the message names the file and the item."""


def document_objects(documents: list[Any]) -> Iterator[tuple[str, Any]]:
    """Each object of decoded documents, with where it is ("document 1, item 0"):
    single objects, and the items of a ``List`` or typed list (``NodeList``: its items
    get the kind). Raises ClusterFileError for a document that is neither."""
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


@dataclass(frozen=True, slots=True)
class ClusterContents:
    """Everything a cluster file holds, in file order (duplicates rejected)."""

    nodes: list[NodeView] = field(default_factory=list)
    runtime_classes: list[RuntimeClassView] = field(default_factory=list)
    pods: list[ScheduledPod] = field(default_factory=list)


def _parse(text: str, *, with_pods: bool, selector_errors: SelectorErrorLog | None = None) -> ClusterContents:
    try:
        documents = load_documents(text)
    except DocumentError as exc:
        raise ClusterFileError(str(exc)) from None
    nodes: dict[str, NodeView] = {}
    classes: dict[str, RuntimeClassView] = {}
    pods: dict[str, ScheduledPod] = {}
    intern = TolerationInterner()
    label_memo = LabelMemo()
    expected = "Node, RuntimeClass or Pod" if with_pods else "Node or RuntimeClass"
    for where, obj in document_objects(documents):
        if not isinstance(obj, dict):
            raise ClusterFileError(f"{where}: expected an object")
        kind = obj.get("kind")
        if kind is None:
            raise ClusterFileError(f"{where}: no kind (expected {expected})")
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
            elif kind == "Pod" and with_pods:
                pod = scheduled_pod_from_api(obj, intern=intern)
                if pod.name in pods:
                    raise ClusterFileError(f"{where}: Pod {pod.name!r} appears twice")
                pods[pod.name] = pod
            else:
                raise ClusterFileError(f"{where}: kind {kind!r} is not {expected}")
        except ObjectError as exc:
            raise ClusterFileError(f"{where}: {exc}") from None
        # After the parse, which has checked the types this walk relies on.
        if problems := object_problems(obj, label_memo):
            raise ClusterFileError(f"{where}: {object_reference(obj)}: {describe_problems(problems)}")
    return ClusterContents(list(nodes.values()), list(classes.values()), list(pods.values()))


def parse_cluster(
    text: str, *, selector_errors: SelectorErrorLog | None = None
) -> tuple[list[NodeView], list[RuntimeClassView]]:
    """Nodes and RuntimeClasses from a cluster file's text. Raises ClusterFileError,
    also for a Pod (see ``parse_cluster_with_pods``)."""
    contents = _parse(text, with_pods=False, selector_errors=selector_errors)
    return contents.nodes, contents.runtime_classes


def parse_cluster_with_pods(text: str, *, selector_errors: SelectorErrorLog | None = None) -> ClusterContents:
    """Nodes, RuntimeClasses and Pods from a cluster file's text. Every Pod is returned,
    bound or not (``extender.cluster.pod_views.is_audited`` picks the ones the audit judges).
    Raises ClusterFileError."""
    return _parse(text, with_pods=True, selector_errors=selector_errors)


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ClusterFileError(f"{path}: {read_failure(exc)}") from None


def load_cluster_file(
    path: str | Path, state: ClusterState | None = None, *, selector_errors: SelectorErrorLog | None = None
) -> ClusterState:
    """Read ``path`` into ``state`` (a new one by default) and mark both kinds synced.
    Bad node-selector-term annotations are reported to ``selector_errors`` (if given)."""
    text = _read(path)
    try:
        nodes, classes = parse_cluster(text, selector_errors=selector_errors)
    except ClusterFileError as exc:
        raise ClusterFileError(f"{path}: {exc}") from None
    state = state if state is not None else ClusterState()
    state.nodes.replace(nodes)
    state.runtime_classes.replace(classes)
    return state


def load_cluster_file_with_pods(
    path: str | Path, state: ClusterState | None = None, *, selector_errors: SelectorErrorLog | None = None
) -> tuple[ClusterState, list[ScheduledPod]]:
    """Like ``load_cluster_file``, for a file that may also hold Pods: the state, and
    every Pod of the file in file order."""
    text = _read(path)
    try:
        contents = parse_cluster_with_pods(text, selector_errors=selector_errors)
    except ClusterFileError as exc:
        raise ClusterFileError(f"{path}: {exc}") from None
    state = state if state is not None else ClusterState()
    state.nodes.replace(contents.nodes)
    state.runtime_classes.replace(contents.runtime_classes)
    return state, contents.pods
