"""Slim views <-> plain JSON values, for explain output and capture files.

The views in ``policies.objects`` are frozen dataclasses of strings, tuples, mappings
and frozensets. This codec walks their fields generically, so a field added to a view
shows up in explain output and capture files without touching this module:

- a field ``node_selector`` becomes the key ``nodeSelector`` (camelCase, like the API);
- mappings become objects, tuples become arrays, frozensets become sorted arrays;
- nested views (taints, tolerations, handlers, selector requirements) recurse.

Decoding reads the dataclass's type hints and rebuilds exactly those shapes; a key
missing from the input takes the field's default (older capture files stay readable),
an unknown key or a value of the wrong type is a ``CodecError`` naming its path.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from policies.objects import NodeView, PodView, RuntimeClassView

T = TypeVar("T")


class CodecError(ValueError):
    """A JSON value does not have the shape of the view it should decode to."""


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_json(value: Any) -> Any:
    """A view (or anything nested in one) as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {camel(f.name): to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(to_json(v) for v in value)
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        candidates = [a for a in args if a is not type(None)]
        if len(candidates) == 1:
            return _decode(candidates[0], value, path)
        raise CodecError(f"{path}: unsupported union type {tp}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_json(tp, value, path)
    if tp is str or tp is int or tp is bool:
        # bool is an int in Python; keep them apart as JSON does.
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise CodecError(f"{path}: expected {tp.__name__}, got {type(value).__name__}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise CodecError(f"{path}: expected an array")
        return tuple(_decode(args[0], item, f"{path}[{i}]") for i, item in enumerate(value))
    if origin is frozenset:
        if not isinstance(value, list):
            raise CodecError(f"{path}: expected an array")
        return frozenset(_decode(args[0], item, f"{path}[{i}]") for i, item in enumerate(value))
    if origin in (Mapping, dict, typing.Mapping):
        if not isinstance(value, dict):
            raise CodecError(f"{path}: expected an object")
        return types.MappingProxyType({str(k): _decode(args[1], v, f"{path}.{k}") for k, v in value.items()})
    raise CodecError(f"{path}: cannot decode type {tp}")


def from_json(cls: type[T], value: Any, path: str = "$") -> T:
    """Rebuild a view of type ``cls`` from ``to_json`` output. Raises CodecError."""
    if not isinstance(value, dict):
        raise CodecError(f"{path}: expected an object")
    assert dataclasses.is_dataclass(cls)
    hints = _hints(cls)
    fields = {camel(f.name): f for f in dataclasses.fields(cls)}
    unknown = set(value) - set(fields)
    if unknown:
        raise CodecError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    kwargs = {
        f.name: _decode(hints[f.name], value[key], f"{path}.{key}")
        for key, f in fields.items()
        if key in value
    }
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise CodecError(f"{path}: {exc}") from None


def node_from_json(value: Any, path: str = "$") -> NodeView:
    return from_json(NodeView, value, path)


def runtime_class_from_json(value: Any, path: str = "$") -> RuntimeClassView:
    return from_json(RuntimeClassView, value, path)


def runtime_class_to_json(rc: RuntimeClassView) -> dict[str, Any]:
    """A class as the tools and ``/explain`` show it: the annotation's term is either
    absent (``matchExpressions`` and ``matchFields`` both null) or present (both
    lists, possibly empty), never half of each. (Capture files keep ``to_json``'s form,
    which ``from_json`` reads back.)"""
    document: dict[str, Any] = to_json(rc)
    if rc.match_expressions is None:
        document["matchFields"] = None
    return document


def pod_to_json(pod: PodView) -> dict[str, Any]:
    """The parts of a pod that a decision reads."""
    return {
        "name": pod.name,
        "namespace": pod.namespace,
        "runtimeClassName": pod.runtime_class_name,
        "tolerations": to_json(pod.tolerations),
    }
