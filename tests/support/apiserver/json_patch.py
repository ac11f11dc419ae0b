"""RFC 6902 JSON Patch as kube-apiserver 1.36 applies it: gopkg.in/evanphx/json-patch.v4
(v4.13.0, github.com/evanphx/json-patch ``patch.go`` at the module root), which both
MutatingAdmissionPolicy's JSONPatch mutations
(staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch/json_patch.go)
and mutating webhooks' patches (.../admission/plugin/webhook/mutating/dispatcher.go) go
through. Its error texts are reproduced because they reach the client in the Status.

Written here rather than taken from the ``jsonpatch`` PyPI package because v4 is not
RFC 6902 to the letter, and the differences decide outcomes:

- ``replace`` of an object member that does not exist sets it (v4's ``partialDoc.get``
  never fails), where RFC 6902 requires the target to exist;
- ``copy`` from an object member that does not exist adds ``null``;
- a member whose value is JSON null counts as absent when a path walks through it, and
  a ``test`` of an absent or null member passes when the operation's value is null or
  missing;
- negative array indexes count from the end (``SupportNegativeIndices``);
- an operation without ``value`` adds (or replaces with) null.

A MutatingAdmissionPolicy builds each operation's value as JSON text, a webhook's patch
is decoded from JSON; v4 tells a null value apart in the two (``null_is_text``).

The patch runs on a deep copy: a failed operation leaves the document untouched (v4
returns an error and no document). ``JsonPatchError.test_failed`` tells a failed ``test``
(``jsonpatch.ErrTestFailed``) from the other errors, as the MutatingAdmissionPolicy
plugin does.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

JsonObj = dict[str, Any]

_MISSING = "missing value"
_INVALID_INDEX = "invalid index referenced"
_TEST_FAILED = "test failed"
# strconv.Atoi: an optional sign and decimal digits, nothing else.
_ATOI = re.compile(r"[+-]?[0-9]+")


class JsonPatchError(ValueError):
    """An operation that does not apply, worded as json-patch v4 words it."""

    def __init__(self, message: str, *, test_failed: bool = False) -> None:
        super().__init__(message)
        self.test_failed = test_failed


class _ContainerError(Exception):
    """An error of a container's get/add/remove, wrapped by the operation."""


def _decode_key(key: str) -> str:
    # RFC 6901 section 4: "~1" first, then "~0".
    return key.replace("~1", "/").replace("~0", "~")


def _atoi(key: str) -> int:
    if not _ATOI.fullmatch(key):
        raise _ContainerError(f'strconv.Atoi: parsing "{key}": invalid syntax')
    return int(key)


def _index(container: list[Any], key: str, *, size: int) -> int:
    index = _atoi(key)
    if index < 0:
        if index < -size:
            raise _ContainerError(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
        index += size
    if index >= size:
        raise _ContainerError(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
    return index


def _get(container: Any, key: str) -> Any:
    """``partialDoc.get`` (None, never an error, for an absent member) or
    ``partialArray.get``."""
    if isinstance(container, dict):
        return container.get(key)
    return container[_index(container, key, size=len(container))]


def _add(container: Any, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    if key == "-":
        container.append(value)
        return
    try:
        index = _atoi(key)
    except _ContainerError as exc:
        raise _ContainerError(f"value was not a proper array index: '{key}': {exc}") from None
    size = len(container) + 1
    if index >= size:
        raise _ContainerError(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
    if index < 0:
        if index < -size:
            raise _ContainerError(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
        index += size
    container.insert(index, value)


def _remove(container: Any, key: str) -> None:
    if isinstance(container, dict):
        if key not in container:
            raise _ContainerError(f"Unable to remove nonexistent key: {key}: {_MISSING}")
        del container[key]
        return
    index = _atoi(key)
    if index >= len(container):
        raise _ContainerError(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
    if index < 0:
        if index < -len(container):
            raise _ContainerError(f"Unable to access invalid index: {index}: {_INVALID_INDEX}")
        index += len(container)
    del container[index]


def _find(document: Any, path: str) -> tuple[Any, str] | None:
    """``findObject``: the container holding the path's last token, and that token."""
    split = path.split("/")
    if len(split) < 2:
        return None
    current = document
    for part in split[1:-1]:
        try:
            following = _get(current, _decode_key(part))
        except _ContainerError:
            return None
        # A null member is a nil node: nothing to walk into; nor is a scalar.
        if not isinstance(following, (dict, list)):
            return None
        current = following
    return current, _decode_key(split[-1])


def json_equal(left: Any, right: Any) -> bool:
    """JSON values equal as ``lazyNode.equal`` finds them: structurally, numbers by
    value (both sides are written by Go's encoders, so ``1`` and ``1.0`` are the same
    text), a boolean never equal to a number."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(json_equal(a, b) for a, b in zip(left, right, strict=True))
    return type(left) is type(right) and left == right


def _field(operation: Mapping[str, Any], name: str, what: str) -> str:
    value = operation.get(name)
    if not isinstance(value, str):
        # Operation.Path/From: absent (or not a string, which v4 also refuses).
        raise JsonPatchError(what)
    return value


def _apply_one(document: Any, operation: Mapping[str, Any], *, null_is_text: bool) -> Any:
    kind = operation.get("op")
    kind = kind if isinstance(kind, str) else "unknown"
    has_value = "value" in operation
    value = copy.deepcopy(operation.get("value"))
    # v4's nil node: no value, or (decoded from a webhook's JSON) a null one.
    value_is_nil = not has_value or (value is None and not null_is_text)

    def wrap(message: str) -> JsonPatchError:
        return JsonPatchError(message)

    if kind == "add":
        path = _field(operation, "path", f"add operation failed to decode path: {_MISSING}")
        found = _find(document, path)
        if found is None:
            raise wrap(f'add operation does not apply: doc is missing path: "{path}": {_MISSING}')
        try:
            _add(found[0], found[1], value)
        except _ContainerError as exc:
            raise wrap(f"error in add for path: '{path}': {exc}") from None
        return document
    if kind == "remove":
        path = _field(operation, "path", f"remove operation failed to decode path: {_MISSING}")
        found = _find(document, path)
        if found is None:
            raise wrap(f'remove operation does not apply: doc is missing path: "{path}": {_MISSING}')
        try:
            _remove(found[0], found[1])
        except _ContainerError as exc:
            raise wrap(f"error in remove for path: '{path}': {exc}") from None
        return document
    if kind == "replace":
        path = _field(
            operation,
            "path",
            f"replace operation failed to decode path: operation missing path field: {_MISSING}",
        )
        if path == "":
            if not isinstance(value, (dict, list)):
                # Go formats the nil error it wraps with %w this way.
                raise wrap("replace operation value must be object or array: %!w(<nil>)")
            return value
        found = _find(document, path)
        if found is None:
            raise wrap(f"replace operation does not apply: doc is missing path: {path}: {_MISSING}")
        try:
            _get(found[0], found[1])
        except _ContainerError:
            raise wrap(f"replace operation does not apply: doc is missing key: {path}: {_MISSING}") from None
        container, key = found
        if isinstance(container, dict):
            container[key] = value
        else:
            container[_index(container, key, size=len(container))] = value
        return document
    if kind == "move":
        source = _field(
            operation,
            "from",
            f"move operation failed to decode from: operation, missing from field: {_MISSING}",
        )
        found = _find(document, source)
        if found is None:
            raise wrap(f"move operation does not apply: doc is missing from path: {source}: {_MISSING}")
        container, key = found
        try:
            moved = _get(container, key)
            _remove(container, key)
        except _ContainerError as exc:
            raise wrap(f"error in move for path: '{key}': {exc}") from None
        path = _field(
            operation,
            "path",
            f"move operation failed to decode path: operation missing path field: {_MISSING}",
        )
        found = _find(document, path)
        if found is None:
            raise wrap(f"move operation does not apply: doc is missing destination path: {path}: {_MISSING}")
        try:
            _add(found[0], found[1], moved)
        except _ContainerError as exc:
            raise wrap(f"error in move for path: '{path}': {exc}") from None
        return document
    if kind == "test":
        path = _field(
            operation,
            "path",
            f"test operation failed to decode path: operation missing path field: {_MISSING}",
        )
        failed = JsonPatchError(f"testing value {path} failed: {_TEST_FAILED}", test_failed=True)
        if path == "":
            if has_value and json_equal(document, value):
                return document
            raise failed
        found = _find(document, path)
        if found is None:
            raise wrap(f"test operation does not apply: is missing path: {path}: {_MISSING}")
        try:
            current = _get(found[0], found[1])
        except _ContainerError as exc:
            raise wrap(f"error in test for path: '{path}': {exc}") from None
        if current is None:
            if value_is_nil:
                return document
            raise failed
        if not has_value or not json_equal(current, value):
            raise failed
        return document
    if kind == "copy":
        source = _field(
            operation,
            "from",
            f"copy operation failed to decode from: operation, missing from field: {_MISSING}",
        )
        found = _find(document, source)
        if found is None:
            raise wrap(f"copy operation does not apply: doc is missing from path: {source}: {_MISSING}")
        try:
            copied = copy.deepcopy(_get(found[0], found[1]))
        except _ContainerError as exc:
            raise wrap(f"error in copy for from: '{source}': {exc}") from None
        path = _field(operation, "path", f"copy operation failed to decode path: {_MISSING}")
        found = _find(document, path)
        if found is None:
            raise wrap(f"copy operation does not apply: doc is missing destination path: {path}: {_MISSING}")
        try:
            _add(found[0], found[1], copied)
        except _ContainerError as exc:
            raise wrap(f"error while adding value during copy: {exc}") from None
        return document
    raise wrap(f"Unexpected kind: {kind}")


def apply_patch(
    document: JsonObj, operations: Sequence[Mapping[str, Any]], *, null_is_text: bool = False
) -> Any:
    """``Patch.Apply``: the patched copy of ``document`` (a list if the patch replaced
    the whole document by one); JsonPatchError at the first operation that does not
    apply (nothing of the patch is kept).

    ``null_is_text``: each operation's ``value`` was written as JSON text, as the
    MutatingAdmissionPolicy plugin builds its operations (json_patch.go puts
    ``json.Marshal`` of the CEL value in ``value``), so a null value is the text
    ``null``, which a ``test`` of an absent member does not pass; a webhook's patch is
    decoded from JSON, where a null ``value`` is a nil node, which it does."""
    result: Any = copy.deepcopy(document)
    for operation in operations:
        result = _apply_one(result, operation, null_is_text=null_is_text)
    return result
