"""The RuntimeClass node-selector-term annotation: decoding, and logging bad ones once.

The annotation ``runtimeclass-extender.dev/node-selector-term`` holds one core/v1
NodeSelectorTerm as JSON or YAML, decoded here (by ``extender.documents``, whose
one-line errors become the class's ``selector_error``); the validation and the
matching are pure and live in ``policies.node_affinity``.

A malformed annotation is not an error of the object: the RuntimeClass is kept, with
``selector_error`` set, and the ``RuntimeClassNodeSelector`` predicate fails it closed on
every node. The error is logged once per class revision: the watch re-delivers the same
object on every re-list, and a log line per delivery would drown the one that matters.
Seen revisions are remembered in a bounded LRU, so a long-running process with many
edits does not grow without limit (an evicted revision is simply logged again).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

from extender.documents import DocumentError, load_document
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION, TermError, parse_term
from policies.objects import SelectorRequirement

log = logging.getLogger("extender.cluster")

__all__ = [
    "NODE_SELECTOR_TERM_ANNOTATION",
    "SelectorAnnotation",
    "SelectorErrorLog",
    "selector_from_annotations",
]


class SelectorAnnotation(NamedTuple):
    """What a RuntimeClass's annotation contributes to its view."""

    # None: no annotation. () with () fields: an empty term, which matches no node.
    match_expressions: tuple[SelectorRequirement, ...] | None = None
    match_fields: tuple[SelectorRequirement, ...] = ()
    error: str | None = None


NO_ANNOTATION = SelectorAnnotation()


def _decode(text: str) -> Any:
    if not text.strip():
        raise TermError("the annotation is empty; expected a NodeSelectorTerm as JSON or YAML")
    try:
        return load_document(text.strip(), what="JSON or YAML")
    except DocumentError as exc:
        raise TermError(str(exc)) from None


def selector_from_annotations(annotations: Mapping[str, str] | None) -> SelectorAnnotation:
    """The node selector term of a RuntimeClass's annotations; never raises."""
    if not annotations or NODE_SELECTOR_TERM_ANNOTATION not in annotations:
        return NO_ANNOTATION
    try:
        term = parse_term(_decode(annotations[NODE_SELECTOR_TERM_ANNOTATION]))
    except TermError as exc:
        return SelectorAnnotation(error=f"annotation {NODE_SELECTOR_TERM_ANNOTATION}: {exc}")
    return SelectorAnnotation(term.match_expressions, term.match_fields)


class SelectorErrorLog:
    """Logs a class's annotation error once per (name, resourceVersion, annotation text)."""

    def __init__(self, *, max_entries: int = 4096, logger: logging.Logger = log) -> None:
        self.max_entries = max_entries
        self._logger = logger
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def report(self, *, name: str, resource_version: str, annotation: str, error: str) -> bool:
        """Log ``error`` unless this revision was logged already; True when it logged."""
        # The annotation text is part of the key because cluster files often carry no
        # resourceVersion: an edited file must still log its new error.
        key = (name, resource_version, annotation)
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        self._logger.warning(
            "invalid node selector annotation: the RuntimeClass fits no node until it is fixed",
            extra={"runtimeclass": name, "resource_version": resource_version, "error": error},
        )
        return True

    def clear(self) -> None:
        self._seen.clear()
