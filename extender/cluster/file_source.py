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

A file is refused with every mistake it holds (the first 20 of them shown), each worded
as ``check`` words a manifest's: the item, the object, the field, what is wrong
(``document 0, item 1: node/a: metadata.labels[ready]: Invalid value: true: must be a
string``), so that a file with six mistakes is fixed in one round, not six.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from extender.cluster.annotations import SelectorErrorLog
from extender.cluster.objects import ObjectError, node_from_api, runtime_class_from_api
from extender.cluster.pod_views import ScheduledPod, TolerationInterner, scheduled_pod_from_api
from extender.cluster.state import ClusterState
from extender.cluster.validation import LabelMemo, Problem, every_problem, object_problems, object_reference
from extender.documents import DocumentError, load_documents, read_failure
from policies.objects import NodeView, RuntimeClassView

# The mistakes of a file shown at most; past them, "and N more".
MAX_MISTAKES_SHOWN: Final = 20


class ClusterFileError(ValueError):
    """The cluster file cannot be used. ``str()`` is a line per mistake, each naming the
    item, the object and the field as ``check`` names them
    (``document 0, item 3: runtimeclass/gvisor: scheduling.nodeselector: unknown field``),
    the first ``MAX_MISTAKES_SHOWN`` of them, then ``and N more mistakes``; with the
    file's path in front of each (``in_file``)."""

    def __init__(self, *mistakes: str, more: int = 0, source: str = "") -> None:
        super().__init__(*mistakes)
        self.mistakes = mistakes
        self.more = more
        self.source = source

    def in_file(self, path: str | Path) -> ClusterFileError:
        """The same mistakes, each line starting with ``path``."""
        return ClusterFileError(*(f"{path}: {m}" for m in self.mistakes), more=self.more, source=str(path))

    def __str__(self) -> str:
        lines = list(self.mistakes)
        if self.more:
            mistakes = "mistake" if self.more == 1 else "mistakes"
            lines.append(
                f"{self.source}: and {self.more} more {mistakes}"
                if self.source
                else f"and {self.more} more {mistakes}"
            )
        return "\n".join(lines)


def document_objects(
    documents: list[Any], report: Callable[[str], None] | None = None
) -> Iterator[tuple[str, Any]]:
    """Each object of decoded documents, with where it is ("document 1, item 0"):
    single objects, and the items of a ``List`` or typed list (``NodeList``: its items
    get the kind). A document that is neither is a ClusterFileError, or, given
    ``report``, said to it and passed over."""

    def refuse(message: str) -> None:
        if report is None:
            raise ClusterFileError(message)
        report(message)

    for doc_index, doc in enumerate(documents):
        if not isinstance(doc, dict):
            refuse(f"document {doc_index}: expected a Kubernetes object or List")
            continue
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                refuse(f"document {doc_index}: items must be a list")
                continue
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


@dataclass(slots=True)
class _Mistakes:
    """Every mistake of a file, counted; the first ``MAX_MISTAKES_SHOWN`` kept."""

    shown: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, mistake: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_MISTAKES_SHOWN:
            self.shown.append(mistake)

    def error(self) -> ClusterFileError:
        return ClusterFileError(*self.shown, more=self.count - len(self.shown))


def _kind_problem(kind: Any, *, with_pods: bool) -> Problem:
    """The ``kind`` of an object the file may not hold, as the API server words a field."""
    kinds = ("Node", "RuntimeClass", "Pod") if with_pods else ("Node", "RuntimeClass")
    supported = ", ".join(f'"{k}"' for k in kinds)
    if kind is None:
        return Problem("kind", f"Required value: one of {supported}")
    hint = " (Pods are read by audit alone)" if kind == "Pod" else ""
    return Problem("kind", f'Unsupported value: "{kind}": supported values: {supported}{hint}')


def _parse(text: str, *, with_pods: bool, selector_errors: SelectorErrorLog | None = None) -> ClusterContents:
    """Every object of the file, or a ClusterFileError with every mistake of it: the
    walk goes on past a bad object, so that one run names them all."""
    try:
        documents = load_documents(text)
    except DocumentError as exc:
        raise ClusterFileError(str(exc)) from None
    nodes: dict[str, NodeView] = {}
    classes: dict[str, RuntimeClassView] = {}
    pods: dict[str, ScheduledPod] = {}
    # Where each object was first found, for a duplicate's mistake.
    first: dict[tuple[str, str], str] = {}
    intern = TolerationInterner()
    label_memo = LabelMemo()
    mistakes = _Mistakes()
    for where, obj in document_objects(documents, mistakes.add):
        if not isinstance(obj, dict):
            mistakes.add(f"{where}: expected an object")
            continue
        kind = obj.get("kind")
        store: dict[str, Any]
        try:
            if kind == "Node":
                view: Any = node_from_api(obj)
                store = nodes
            elif kind == "RuntimeClass":
                view = runtime_class_from_api(obj, selector_errors=selector_errors)
                store = classes
            elif kind == "Pod" and with_pods:
                view = scheduled_pod_from_api(obj, intern=intern)
                store = pods
            else:
                mistakes.add(f"{where}: {object_reference(obj)}: {_kind_problem(kind, with_pods=with_pods)}")
                continue
        except ObjectError as exc:
            # Every problem of the object, each at its field, as check lists them; the
            # parser's own words only if neither list says why it refused.
            problems = every_problem(obj, label_memo) or [Problem("", str(exc))]
        else:
            # After the parse, which has checked the types this walk relies on.
            problems = object_problems(obj, label_memo)
        if problems:
            ref = object_reference(obj)
            for problem in problems:
                mistakes.add(f"{where}: {ref}: {problem}")
            continue
        key = (str(kind), view.name)
        if key in first:
            mistakes.add(
                f'{where}: {object_reference(obj)}: metadata.name: Duplicate value: "{view.name}" '
                f"(a {kind} of this name is at {first[key]})"
            )
            continue
        store[view.name] = view
        first[key] = where
    if mistakes.count:
        raise mistakes.error()
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
        raise exc.in_file(path) from None
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
        raise exc.in_file(path) from None
    state = state if state is not None else ClusterState()
    state.nodes.replace(contents.nodes)
    state.runtime_classes.replace(contents.runtime_classes)
    return state, contents.pods
