"""What both admission reviews share: the AdmissionReview wire format and the limits of what they say.

``parse_review`` turns a request body into the ``AdmissionRequest`` fields the reviews
read, or raises ``ReviewError`` with one line naming the field (the HTTP handlers
answer 400 with it); ``response_body`` builds the AdmissionReview sent back. ``fit``
and ``shorten`` keep warnings and messages within what the API server passes on.

Wire format: staging/src/k8s.io/api/admission/v1/types.go (AdmissionReview,
AdmissionRequest, AdmissionResponse) in kubernetes/kubernetes. A denial's ``status`` is a
metav1.Status; the API server prefixes its message with ``admission webhook "<name>"
denied the request`` (staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/
statuserror.go, ``ToStatusErr``).

Warnings: the API server passes them to the client as HTTP ``Warning`` headers, and
AdmissionResponse documents "Limit warnings to 120 characters if possible. Warnings over
256 characters and large numbers of warnings may be truncated." Each warning is at most
``MAX_WARNING_CHARS`` (120) characters: interpolated values (names, selectors, taints)
are shortened with "…" first, so the fixed wording that says what to do survives.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from pydantic_core import ErrorDetails

__all__ = [
    "API_VERSION",
    "KIND",
    "MAX_MESSAGE_CHARS",
    "MAX_WARNING_CHARS",
    "OPERATIONS",
    "AdmissionRequest",
    "AdmissionReview",
    "Operation",
    "ReviewError",
    "fit",
    "parse_review",
    "quoted",
    "response_body",
    "shorten",
]

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
# The admission.Operation constants of types.go. An unknown operation is a bad review,
# which also keeps the metrics label bounded.
OPERATIONS: Final[tuple[Operation, ...]] = ("CREATE", "UPDATE", "DELETE", "CONNECT")

MAX_WARNING_CHARS: Final = 120
# A status message is shown whole by kubectl; only a value echoed from the object can
# make it long, and a 200 KB annotation must not come back as a 200 KB message.
MAX_MESSAGE_CHARS: Final = 1024
ELLIPSIS: Final = "…"
# Interpolated values are never shortened below this, so each stays recognisable.
_MIN_VALUE_CHARS = 12


class ReviewError(ValueError):
    """The body is not an admission.k8s.io/v1 AdmissionReview request; the message is
    one line naming the field, e.g. ``request.uid: missing``."""


# --- the AdmissionReview request, as much of it as the reviews read ------------------

WIRE = ConfigDict(strict=True, extra="ignore", frozen=True)


class GroupVersionKind(BaseModel):
    # metav1.GroupVersionKind: no omitempty, but the core group is ""; absent reads as "".
    model_config = WIRE
    group: str = ""
    version: str = ""
    kind: str = ""


class AdmissionRequest(BaseModel):
    model_config = WIRE
    uid: str
    kind: GroupVersionKind
    operation: Operation
    subResource: str = ""
    name: str = ""
    # The request's namespace: for a pod created with generateName the object has no
    # name yet, and its metadata.namespace may be unset (the request path names it).
    namespace: str = ""
    # runtime.RawExtension: the object as JSON. Parsed by the review that checks it;
    # oldObject, userInfo, resource and dryRun do not change any answer (no side
    # effects, so the webhooks are safe with sideEffects: None) and are not read.
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
            raise ValueError(f"must be one of {', '.join(OPERATIONS)}, got {quoted(operation)}")
        return operation


class AdmissionReview(BaseModel):
    model_config = WIRE
    apiVersion: str
    kind: str
    request: AdmissionRequest

    @field_validator("apiVersion")
    @classmethod
    def _v1(cls, api_version: str) -> str:
        if api_version != API_VERSION:
            # The API server wants the response in the request's version, and this one
            # answers v1: the webhook configuration's admissionReviewVersions: ["v1"].
            raise ValueError(f'must be "{API_VERSION}", got {quoted(api_version)}')
        return api_version

    @field_validator("kind")
    @classmethod
    def _admission_review(cls, kind: str) -> str:
        if kind != KIND:
            raise ValueError(f'must be "{KIND}", got {quoted(kind)}')
        return kind


def quoted(value: Any, limit: int = 64) -> str:
    """A value from the body, as JSON, bounded for an error message."""
    if isinstance(value, str):
        return orjson.dumps(shorten(value, limit)).decode()
    return JSON_TYPES.get(type(value), "another type")


JSON_TYPES: Mapping[type, str] = {
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
        got = JSON_TYPES.get(type(error.get("input")), "another type")
        return f"{path}: must be {_EXPECTED[kind]}, got {got}"
    return f"{path}: {error['msg']}"


def parse_review(body: bytes) -> AdmissionReview:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"body: not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        got = JSON_TYPES.get(type(document), "another type")
        raise ReviewError(f"body: must be an AdmissionReview object, got {got}")
    try:
        return AdmissionReview.model_validate(document)
    except ValidationError as exc:
        # The first problem in field order (apiVersion, kind, request...): fixing the
        # apiVersion of a v1beta1 review matters more than what follows from it.
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReviewError(_describe(errors[0]) + more) from None


# --- the response ----------------------------------------------------------------------


def response_body(
    uid: str,
    *,
    allowed: bool,
    message: str = "",
    warnings: Sequence[str] = (),
    patch: Sequence[Mapping[str, Any]] = (),
) -> bytes:
    """The AdmissionReview answering request ``uid``: allowed, or denied with ``message``;
    ``patch`` (JSONPatch operations, RFC 6902) only for a mutating webhook's answer."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        # 422 Invalid, as the API server answers an object that fails its own validation.
        response["status"] = {"code": 422, "reason": "Invalid", "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        # AdmissionResponse.Patch is []byte: base64 in JSON.
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode("ascii")
    if warnings:
        response["warnings"] = list(warnings)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


# --- length limits ---------------------------------------------------------------------


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS


def fit(template: str, *, limit: int | None = MAX_WARNING_CHARS, **values: str) -> str:
    """``template.format(**values)`` in at most ``limit`` characters: the longest values
    are shortened first (down to _MIN_VALUE_CHARS), then the text itself. ``limit``
    None: whole (``check`` prints warnings on a terminal, where nothing cuts them)."""
    text = template.format(**values)
    if limit is None:
        return text
    while len(text) > limit:
        key = max(values, key=lambda k: len(values[k]), default=None)
        if key is None or len(values[key]) <= _MIN_VALUE_CHARS:
            break
        excess = len(text) - limit
        values = {**values, key: shorten(values[key], max(_MIN_VALUE_CHARS, len(values[key]) - excess))}
        text = template.format(**values)
    return shorten(text, limit)
