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

Warnings: the API server passes them to the client as HTTP ``Warning`` headers, and
AdmissionResponse documents "Limit warnings to 120 characters if possible. Warnings over
256 characters and large numbers of warnings may be truncated." Each warning here is at
most ``MAX_WARNING_CHARS`` (120) characters: interpolated values (class name, selector,
taint) are shortened with "…" first, so the fixed wording that says what to do survives.

Wire format: staging/src/k8s.io/api/admission/v1/types.go (AdmissionReview,
AdmissionRequest, AdmissionResponse) in kubernetes/kubernetes. A denial's ``status`` is a
metav1.Status; the API server prefixes its message with ``admission webhook "<name>"
denied the request`` (staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/
statuserror.go, ``ToStatusErr``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from pydantic_core import ErrorDetails

from extender.cluster.class_nodes import selects
from extender.cluster.objects import ObjectError, runtime_class_from_api
from extender.cluster.state import ClusterState
from policies.node_affinity import NODE_SELECTOR_TERM_ANNOTATION
from policies.objects import EMPTY_LABELS, NodeView, RuntimeClassView, Taint
from policies.tolerations import FILTERED_EFFECTS, tolerated_by_any

__all__ = [
    "API_VERSION",
    "KIND",
    "MAX_MESSAGE_CHARS",
    "MAX_WARNINGS",
    "MAX_WARNING_CHARS",
    "OPERATIONS",
    "RESULTS",
    "Operation",
    "Result",
    "ReviewError",
    "ReviewOutcome",
    "class_warnings",
    "review",
]

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
Result = Literal["allowed", "denied", "warned", "skipped"]
# The admission.Operation constants of types.go. An unknown operation is a bad review,
# which also keeps the metrics label bounded.
OPERATIONS: Final[tuple[Operation, ...]] = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# Every value of ``ReviewOutcome.result``, for pre-creating metric series.
RESULTS: Final[tuple[Result, ...]] = ("allowed", "denied", "warned", "skipped")

MAX_WARNINGS: Final = 3
MAX_WARNING_CHARS: Final = 120
# A status message is shown whole by kubectl; only an annotation echoed by the parser can
# make it long, and a 200 KB annotation must not come back as a 200 KB message.
MAX_MESSAGE_CHARS: Final = 1024
ELLIPSIS: Final = "…"

_GROUP = "node.k8s.io"
_VERSION = "v1"
_RUNTIME_CLASS = "RuntimeClass"
_CHECKED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
_PENDING = "; its pods will stay pending"
# Interpolated values are never shortened below this, so each stays recognisable.
_MIN_VALUE_CHARS = 12
# Prefix of SelectorAnnotation.error (extender/cluster/annotations.py); replaced by the
# field path so the annotation's name is not said twice.
_PARSER_PREFIX = f"annotation {NODE_SELECTOR_TERM_ANNOTATION}: "
_ANNOTATION_PATH = f"metadata.annotations[{NODE_SELECTOR_TERM_ANNOTATION}]"


class ReviewError(ValueError):
    """The body is not an admission.k8s.io/v1 AdmissionReview request; the message is
    one line naming the field, e.g. ``request.uid: missing``."""


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


# --- the AdmissionReview request, as much of it as the decision reads ------------------

_WIRE = ConfigDict(strict=True, extra="ignore", frozen=True)


class _GroupVersionKind(BaseModel):
    # metav1.GroupVersionKind: no omitempty, but the core group is ""; absent reads as "".
    model_config = _WIRE
    group: str = ""
    version: str = ""
    kind: str = ""


class _AdmissionRequest(BaseModel):
    model_config = _WIRE
    uid: str
    kind: _GroupVersionKind
    operation: Operation
    subResource: str = ""
    name: str = ""
    # runtime.RawExtension: the object as JSON. Parsed into a view only when checked;
    # oldObject, userInfo, resource and dryRun do not change the answer (no side
    # effects, so the webhook is safe with sideEffects: None) and are not read.
    object: dict[str, Any] | None = None

    @field_validator("uid")
    @classmethod
    def _uid_not_empty(cls, uid: str) -> str:
        if not uid:
            # The response must echo it: without one the API server rejects any answer.
            raise ValueError("must not be empty")
        return uid

    @field_validator("operation", mode="before")
    @classmethod
    def _known_operation(cls, operation: Any) -> Any:
        # Before the Literal check, for a message that lists the choices in wire form.
        if operation not in OPERATIONS:
            raise ValueError(f"must be one of {', '.join(OPERATIONS)}, got {_quoted(operation)}")
        return operation


class _AdmissionReview(BaseModel):
    model_config = _WIRE
    apiVersion: str
    kind: str
    request: _AdmissionRequest

    @field_validator("apiVersion")
    @classmethod
    def _v1(cls, api_version: str) -> str:
        if api_version != API_VERSION:
            # The API server wants the response in the request's version, and this one
            # answers v1: the webhook configuration's admissionReviewVersions: ["v1"].
            raise ValueError(f'must be "{API_VERSION}", got {_quoted(api_version)}')
        return api_version

    @field_validator("kind")
    @classmethod
    def _admission_review(cls, kind: str) -> str:
        if kind != KIND:
            raise ValueError(f'must be "{KIND}", got {_quoted(kind)}')
        return kind


def _quoted(value: Any, limit: int = 64) -> str:
    """A value from the body, as JSON, bounded for an error message."""
    if isinstance(value, str):
        return orjson.dumps(_shorten(value, limit)).decode()
    return _JSON_TYPES.get(type(value), "another type")


_JSON_TYPES: Mapping[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}
_EXPECTED: Mapping[str, str] = {
    "string_type": "a string",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def _describe(error: ErrorDetails) -> str:
    path = ".".join(str(part) for part in error["loc"]) or "body"
    kind = error["type"]
    if kind == "missing":
        return f"{path}: missing"
    if kind == "value_error":
        return f"{path}: {error.get('ctx', {}).get('error', error['msg'])}"
    if kind in _EXPECTED:
        got = _JSON_TYPES.get(type(error.get("input")), "another type")
        return f"{path}: must be {_EXPECTED[kind]}, got {got}"
    return f"{path}: {error['msg']}"


def _parse(body: bytes) -> _AdmissionReview:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"body: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        got = _JSON_TYPES.get(type(document), "another type")
        raise ReviewError(f"body: must be an AdmissionReview object, got {got}")
    try:
        return _AdmissionReview.model_validate(document)
    except ValidationError as exc:
        # The first problem in field order (apiVersion, kind, request...): fixing the
        # apiVersion of a v1beta1 review matters more than what follows from it.
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReviewError(_describe(errors[0]) + more) from None


# --- the response ----------------------------------------------------------------------


def _outcome(
    request: _AdmissionRequest,
    result: Result,
    *,
    message: str = "",
    warnings: tuple[str, ...] = (),
) -> ReviewOutcome:
    allowed = result != "denied"
    response: dict[str, Any] = {"uid": request.uid, "allowed": allowed}
    if not allowed:
        # 422 Invalid, as the API server answers an object that fails its own validation.
        response["status"] = {"code": 422, "reason": "Invalid", "message": message}
    if warnings:
        response["warnings"] = list(warnings)
    body = orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})
    return ReviewOutcome(
        response=body,
        operation=request.operation,
        result=result,
        allowed=allowed,
        message=message,
        warnings=warnings,
    )


def review(body: bytes, state: ClusterState) -> ReviewOutcome:
    """Answer one AdmissionReview request body. Raises ReviewError for a bad body."""
    request = _parse(body).request
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
        return _outcome(request, "denied", message=_shorten(str(exc), MAX_MESSAGE_CHARS))
    if view.selector_error is not None:
        return _outcome(
            request, "denied", message=_shorten(_annotation_message(view.selector_error), MAX_MESSAGE_CHARS)
        )
    if not state.synced:
        return _outcome(
            request,
            "skipped",
            warnings=(
                _fit(
                    "RuntimeClass {name}: node checks skipped, the extender's cache is not synced yet",
                    name=view.name,
                ),
            ),
        )
    warnings = class_warnings(view, state.nodes.values())[:MAX_WARNINGS]
    return _outcome(request, "warned" if warnings else "allowed", warnings=tuple(warnings))


def _annotation_message(selector_error: str) -> str:
    return f"{_ANNOTATION_PATH}: {selector_error.removeprefix(_PARSER_PREFIX)}"


# --- warnings --------------------------------------------------------------------------


def class_warnings(view: RuntimeClassView, nodes: Iterable[NodeView]) -> list[str]:
    """Why pods of a valid class could not run on ``nodes``, as short warnings.

    Most fundamental first, and without a matching node only that one: taints and
    handlers of nodes the class never selects are beside the point."""
    all_nodes: list[NodeView] = list(nodes)
    matching = _matching(view, all_nodes)
    if not matching:
        return [_no_node_warning(view, all_nodes)]
    warnings: list[str] = []
    if (taint_warning := _taint_warning(view, matching)) is not None:
        warnings.append(taint_warning)
    if (handler_warning := _handler_warning(view, matching)) is not None:
        warnings.append(handler_warning)
    return warnings


def _matching(view: RuntimeClassView, nodes: list[NodeView]) -> list[NodeView]:
    # The filter's own predicate, so "matches" means what it means at scheduling time.
    return [node for node in nodes if selects(view, node)]


def _no_node_warning(view: RuntimeClassView, nodes: list[NodeView]) -> str:
    name = view.name
    if not nodes:
        return _fit("RuntimeClass {name}: no node matches, the cluster has no nodes" + _PENDING, name=name)
    selector = ",".join(f"{k}={v}" for k, v in sorted(view.node_selector.items()))
    has_term = view.match_expressions is not None
    # Which half excludes the nodes: each half judged alone by the same predicate.
    map_only = dataclasses.replace(view, match_expressions=None, match_fields=())
    if not has_term or (view.node_selector and not _matching(map_only, nodes)):
        return _fit(
            "RuntimeClass {name}: no node matches scheduling.nodeSelector {{{selector}}}" + _PENDING,
            name=name,
            selector=selector,
        )
    if not view.match_expressions and not view.match_fields:
        return _fit(
            "RuntimeClass {name}: the annotation term is empty, and an empty term matches no node" + _PENDING,
            name=name,
        )
    term_only = dataclasses.replace(view, node_selector=EMPTY_LABELS)
    if view.node_selector and _matching(term_only, nodes):
        return _fit(
            "RuntimeClass {name}: no node matches scheduling.nodeSelector AND the annotation term" + _PENDING,
            name=name,
        )
    return _fit(
        "RuntimeClass {name}: no node matches the node-selector-term annotation" + _PENDING, name=name
    )


def _blocking_taints(view: RuntimeClassView, node: NodeView) -> set[Taint]:
    """The node's taints that keep a pod with no tolerations of its own off it."""
    blocking: set[Taint] = set()
    for taint in node.taints:
        if taint.effect not in FILTERED_EFFECTS:
            continue
        # NoExecute counts even when the class tolerates it: the kubelet and the taint
        # manager evict on the pod's own tolerations only (DESIGN §4, TaintToleration).
        if taint.effect == "NoExecute" or not tolerated_by_any(taint, view.tolerations):
            blocking.add(taint)
    return blocking


def _taint_warning(view: RuntimeClassView, matching: list[NodeView]) -> str | None:
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
    return _fit(template + f" on {count}/{len(matching)}", name=view.name, taint=str(taint))


def _handler_warning(view: RuntimeClassView, matching: list[NodeView]) -> str | None:
    # Nodes without status.runtimeHandlers (an older kubelet; an empty list is the same
    # on the wire) say nothing either way. The "" entry is the node's default handler
    # and never stands for a class's handler (policies/runtime_handler.py).
    reporting = [node for node in matching if node.runtime_handlers]
    if not reporting:
        return None
    for node in reporting:
        if any(h.name and h.name == view.handler for h in node.runtime_handlers or ()):
            return None
    return _fit(
        f"RuntimeClass {{name}}: none of the {len(reporting)} matching node(s) reporting runtimeHandlers"
        ' lists "{handler}"',
        name=view.name,
        handler=view.handler,
    )


# --- length limits ---------------------------------------------------------------------


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


def _fit(template: str, **values: str) -> str:
    """``template.format(**values)`` in at most MAX_WARNING_CHARS: the longest values
    are shortened first (down to _MIN_VALUE_CHARS), then the text itself."""
    text = template.format(**values)
    while len(text) > MAX_WARNING_CHARS:
        key = max(values, key=lambda k: len(values[k]), default=None)
        if key is None or len(values[key]) <= _MIN_VALUE_CHARS:
            break
        excess = len(text) - MAX_WARNING_CHARS
        values = {**values, key: _shorten(values[key], max(_MIN_VALUE_CHARS, len(values[key]) - excess))}
        text = template.format(**values)
    return _shorten(text, MAX_WARNING_CHARS)
