"""Validating admission for RuntimeClasses: the pure decision behind ``POST /admission/runtimeclasses``.

The API server sends an ``admission.k8s.io/v1`` AdmissionReview for each CREATE or UPDATE
of a ``node.k8s.io/v1`` RuntimeClass; ``review`` answers it from the body and the
extender's ``ClusterState`` alone. The HTTP handler sends ``ReviewOutcome.response`` back
and counts ``operation`` and ``result``; a ``ReviewError`` (a body that is not an
AdmissionReview) becomes a 400.

What is checked, and why:

- **Deny** a RuntimeClass whose ``runtimeclass-extender.dev/node-selector-term``
  annotation the filter cannot read. The object goes through the very function the
  cluster source uses (``runtime_class_from_api``), so admission and the
  ``RuntimeClassNodeSelector`` predicate can never disagree: what admission accepts the
  filter can evaluate, and what admission denies the filter would fail closed on every
  node. This needs no cluster state, so it holds even before the cache has synced.
  An UPDATE that keeps a bad annotation is denied too (no ratcheting): the class fits no
  node anyway, and DELETE is never checked, so a broken class can always be removed.
- **Warn** (allow, with at most ``MAX_WARNINGS`` warnings) when the class is valid but its
  pods could not be placed with the cluster as the extender sees it: no node matches
  its selector, every matching node has a taint its tolerations don't cover, or no
  matching node that reports ``status.runtimeHandlers`` lists its handler. These are
  facts about today's nodes, which change, so they never deny: a class may rightly be
  created before its nodes join.

Cache only: the answer is computed from the watch-fed ``ClusterState``, with no call to
the API server. The API server waits for the webhook while it holds the user's request
(``timeoutSeconds``, 10 s by default), and a webhook that calls back into the API server
it serves can deadlock or amplify an outage. The cost is that warnings may lag the
cluster by the watch's delay; while the cache is not synced the node checks are skipped
with a warning saying so, rather than warning about nodes the cache has not seen yet.

Independent of ``failurePolicy``: nothing here relies on the webhook being called. The
filter fails a bad class closed whether or not admission saw it (with
``failurePolicy: Ignore``, or when the webhook is down, a bad annotation is still stored
and still fails closed); admission only moves the error to the moment of ``kubectl
apply``. Misrouted reviews (other kinds, other operations) are allowed unchecked, so a
too-broad webhook rule can never block unrelated writes.

Wire format and warning lengths: ``extender.admission.reviews``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from extender.admission.reviews import (
    MAX_MESSAGE_CHARS,
    MAX_WARNING_CHARS,
    AdmissionRequest,
    Operation,
    ReviewError,
    fit,
    parse_review,
    response_body,
    shorten,
)
from extender.cluster.class_nodes import selects
from extender.cluster.objects import ObjectError, runtime_class_from_api
from extender.cluster.state import ClusterState
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import EMPTY_LABELS, NodeView, RuntimeClassView, Taint
from policies.tolerations import FILTERED_EFFECTS, tolerated_by_any

__all__ = [
    "MAX_WARNINGS",
    "RESULTS",
    "Result",
    "ReviewOutcome",
    "class_warnings",
    "review",
]

Result = Literal["allowed", "denied", "warned", "skipped"]
# Every value of ``ReviewOutcome.result``, for pre-creating metric series.
RESULTS: Final[tuple[Result, ...]] = ("allowed", "denied", "warned", "skipped")

MAX_WARNINGS: Final = 3

_GROUP = "node.k8s.io"
_VERSION = "v1"
_RUNTIME_CLASS = "RuntimeClass"
_CHECKED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
_PENDING = "; its pods will stay pending"
# Prefix of SelectorAnnotation.error (extender/cluster/annotations.py); replaced by the
# field path so the annotation's name is not said twice.
_PARSER_PREFIX = f"annotation {NODE_SELECTOR_TERM_ANNOTATION}: "
_ANNOTATION_PATH = f"metadata.annotations[{NODE_SELECTOR_TERM_ANNOTATION}]"


@dataclass(frozen=True, slots=True)
class ReviewOutcome:
    """The answer to one AdmissionReview, with what metrics and logs need."""

    # The AdmissionReview to send back (JSON), ``response.uid`` echoing the request's.
    response: bytes
    operation: Operation
    result: Result
    allowed: bool
    # The denial's status message ("" when allowed).
    message: str = ""
    warnings: tuple[str, ...] = ()
    # The RuntimeClass reviewed ("" when the request carried none to check), for logs.
    name: str = ""


# --- the response ----------------------------------------------------------------------


def _outcome(
    request: AdmissionRequest,
    result: Result,
    *,
    message: str = "",
    warnings: tuple[str, ...] = (),
) -> ReviewOutcome:
    allowed = result != "denied"
    return ReviewOutcome(
        response=response_body(request.uid, allowed=allowed, message=message, warnings=warnings),
        operation=request.operation,
        result=result,
        allowed=allowed,
        message=message,
        warnings=warnings,
        # The object's name when it has one, else the request's (a DELETE carries no object).
        name=_class_name(request),
    )


def _class_name(request: AdmissionRequest) -> str:
    metadata = request.object.get("metadata") if request.object is not None else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name else request.name


def review(
    body: bytes, state: ClusterState, *, warning_limit: int | None = MAX_WARNING_CHARS
) -> ReviewOutcome:
    """Answer one AdmissionReview request body. Raises ReviewError for a bad body.
    ``warning_limit`` None: each warning whole (``check``; the webhook's go to the API
    server, which asks for at most MAX_WARNING_CHARS)."""
    request = parse_review(body).request
    checked = (
        request.operation in _CHECKED_OPERATIONS
        and request.kind.group == _GROUP
        and request.kind.version == _VERSION
        and request.kind.kind == _RUNTIME_CLASS
        # RuntimeClass has no subresources; a request for one carries no class to check.
        and not request.subResource
    )
    if not checked:
        return _outcome(request, "skipped")
    if request.object is None:
        raise ReviewError(f"request.object: missing (required for {request.operation} of a RuntimeClass)")
    try:
        view = runtime_class_from_api(request.object)
    except ObjectError as exc:
        # The API server validates a RuntimeClass before validating webhooks see it, so
        # this is a caller that is not the API server: say what is wrong all the same.
        return _outcome(request, "denied", message=shorten(str(exc), MAX_MESSAGE_CHARS))
    if view.selector_error is not None:
        return _outcome(
            request, "denied", message=shorten(_annotation_message(view.selector_error), MAX_MESSAGE_CHARS)
        )
    if not state.synced:
        return _outcome(
            request,
            "skipped",
            warnings=(
                fit(
                    "RuntimeClass {name}: node checks skipped, the extender's cache is not synced yet",
                    limit=warning_limit,
                    name=view.name,
                ),
            ),
        )
    warnings = class_warnings(view, state.nodes.values(), limit=warning_limit)[:MAX_WARNINGS]
    return _outcome(request, "warned" if warnings else "allowed", warnings=tuple(warnings))


def _annotation_message(selector_error: str) -> str:
    return f"{_ANNOTATION_PATH}: {selector_error.removeprefix(_PARSER_PREFIX)}"


# --- warnings --------------------------------------------------------------------------


def class_warnings(
    view: RuntimeClassView, nodes: Iterable[NodeView], *, limit: int | None = MAX_WARNING_CHARS
) -> list[str]:
    """Why pods of a valid class could not run on ``nodes``, as short warnings (each at
    most ``limit`` characters; None: whole).

    Most fundamental first, and without a matching node only that one: taints and
    handlers of nodes the class never selects are beside the point."""
    all_nodes: list[NodeView] = list(nodes)
    matching = _matching(view, all_nodes)
    if not matching:
        return [_no_node_warning(view, all_nodes, limit)]
    warnings: list[str] = []
    if (taint_warning := _taint_warning(view, matching, limit)) is not None:
        warnings.append(taint_warning)
    if (handler_warning := _handler_warning(view, matching, limit)) is not None:
        warnings.append(handler_warning)
    return warnings


def _matching(view: RuntimeClassView, nodes: list[NodeView]) -> list[NodeView]:
    # The filter's own predicate, so "matches" means what it means at scheduling time.
    return [node for node in nodes if selects(view, node)]


def _no_node_warning(view: RuntimeClassView, nodes: list[NodeView], limit: int | None) -> str:
    name = view.name
    if not nodes:
        return fit(
            "RuntimeClass {name}: no node matches, the cluster has no nodes" + _PENDING,
            limit=limit,
            name=name,
        )
    selector = ",".join(f"{k}={v}" for k, v in sorted(view.node_selector.items()))
    has_term = view.match_expressions is not None
    # Which half excludes the nodes: each half judged alone by the same predicate.
    map_only = dataclasses.replace(view, match_expressions=None, match_fields=())
    if not has_term or (view.node_selector and not _matching(map_only, nodes)):
        return fit(
            "RuntimeClass {name}: no node matches scheduling.nodeSelector {{{selector}}}" + _PENDING,
            limit=limit,
            name=name,
            selector=selector,
        )
    if not view.match_expressions and not view.match_fields:
        return fit(
            "RuntimeClass {name}: the annotation term is empty, and an empty term matches no node" + _PENDING,
            limit=limit,
            name=name,
        )
    term_only = dataclasses.replace(view, node_selector=EMPTY_LABELS)
    if view.node_selector and _matching(term_only, nodes):
        return fit(
            "RuntimeClass {name}: no node matches scheduling.nodeSelector AND the annotation term" + _PENDING,
            limit=limit,
            name=name,
        )
    return fit(
        "RuntimeClass {name}: no node matches the node-selector-term annotation" + _PENDING,
        limit=limit,
        name=name,
    )


def _blocking_taints(view: RuntimeClassView, node: NodeView) -> set[Taint]:
    """The node's taints that keep a pod with no tolerations of its own off it."""
    blocking: set[Taint] = set()
    for taint in node.taints:
        if taint.effect not in FILTERED_EFFECTS:
            continue
        # NoExecute counts even when the class tolerates it: the kubelet and the taint
        # manager evict on the pod's own tolerations only (kubernetes/kubernetes
        # pkg/controller/tainteviction/taint_eviction.go; docs/concepts.md).
        if taint.effect == "NoExecute" or not tolerated_by_any(taint, view.tolerations):
            blocking.add(taint)
    return blocking


def _taint_warning(view: RuntimeClassView, matching: list[NodeView], limit: int | None) -> str | None:
    per_node = [_blocking_taints(view, node) for node in matching]
    if not all(per_node):
        return None
    carriers = Counter(taint for taints in per_node for taint in taints)
    no_schedule = {t: n for t, n in carriers.items() if t.effect == "NoSchedule"}
    # Name a NoSchedule taint when there is one: the class's tolerations can fix that.
    # Only when NoExecute taints alone block every node does the warning say "only pods
    # can tolerate", which is then true of every blocking taint.
    candidates = no_schedule or carriers
    taint, count = min(candidates.items(), key=lambda item: (-item[1], str(item[0])))
    if no_schedule:
        template = "RuntimeClass {name}: every matching node has an untolerated taint, e.g. {taint}"
    else:
        template = "RuntimeClass {name}: every matching node has a taint only pods can tolerate, e.g. {taint}"
    return fit(template + f" on {count}/{len(matching)}", limit=limit, name=view.name, taint=str(taint))


def _handler_warning(view: RuntimeClassView, matching: list[NodeView], limit: int | None) -> str | None:
    # Nodes without status.runtimeHandlers (an older kubelet; an empty list is the same
    # on the wire) say nothing either way. The "" entry is the node's default handler
    # and never stands for a class's handler (policies/runtime_handler.py).
    reporting = [node for node in matching if node.runtime_handlers]
    if not reporting:
        return None
    for node in reporting:
        if any(h.name and h.name == view.handler for h in node.runtime_handlers or ()):
            return None
    return fit(
        f"RuntimeClass {{name}}: none of the {len(reporting)} matching node(s) reporting runtimeHandlers"
        ' lists "{handler}"',
        limit=limit,
        name=view.name,
        handler=view.handler,
    )
