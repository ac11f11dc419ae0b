"""What the API server would refuse in the fields the extender reads: for files only.

A Node, RuntimeClass or Pod in a cluster file (or a manifest handed to ``check``) was
written by hand or by a script, and nothing validated it. The parsing models
(``extender.cluster.objects``) skip fields they do not declare, so a RuntimeClass with
``scheduling.nodeselector`` (lower case), or ``nodeSelector`` at the top level, would
load as a class without a selector, which then selects every node; a toleration with
``operator: exists`` would load and never tolerate anything. The API server refuses
both (kubectl's default since 1.27 is server-side field validation ``Strict``: unknown
fields are errors, matched case-sensitively, sigs.k8s.io/json), so these files must be
refused too, with the field path, and a hint where the field looks like a typo.

What is checked, mirroring kubernetes/kubernetes:

- **Unknown fields** in the parts the extender reads: a RuntimeClass's top level,
  ``scheduling``, ``overhead`` and tolerations; the top level and ``metadata`` of every
  kind; Node taints and ``status.runtimeHandlers`` entries; Pod tolerations. Node
  ``spec``/``status`` and Pod ``spec`` hold dozens of fields the extender never reads,
  and new Kubernetes versions add more, so there only a key that is one of the read
  fields in another case or number (``Tolerations``, ``runtimeclassname``, ``taint``)
  is refused: it cannot be a real field, and it would be silently dropped.
- **Enums**: toleration ``operator`` (``Equal``, ``Exists``, and ``Lt``/``Gt``, which
  the extender evaluates: alpha in Kubernetes 1.35, feature gate
  TaintTolerationComparisonOperators) and ``effect`` (``NoSchedule``,
  ``PreferNoSchedule``, ``NoExecute`` or empty); taint ``effect`` (required). The
  rules of ``ValidateTolerations`` and ``validateNodeTaints`` (pkg/apis/core/validation/
  validation.go): a toleration without a key must use ``Exists``, ``Exists`` takes no
  value, ``tolerationSeconds`` needs ``NoExecute``; taints unique by key and effect.
- **Syntax**: label keys (``IsQualifiedName``, i.e. ``content.IsLabelKey``) and values
  (``IsValidLabelValue``) in ``metadata.labels``, ``scheduling.nodeSelector``, taints
  and tolerations (staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go and
  pkg/api/validate/content/kube.go); a RuntimeClass ``handler`` is a DNS-1123 label
  and its name a DNS-1123 subdomain (pkg/apis/node/validation/validation.go,
  ``ValidateRuntimeClass``); node names and a pod's ``runtimeClassName``/``nodeName``
  are DNS-1123 subdomains (content/dns.go); a class's ``overhead.podFixed`` and a pod's
  ``spec.overhead`` are quantities (``policies.quantity``, which the parsing models use
  too) and not negative. The label and name checks are ``policies.node_affinity``'s,
  which the annotation uses.

Objects from the API server are not checked again: the API server validated them, and
the watch must stay fast. Types (a label that is not a string, a missing ``handler``)
are the parsing models' business; this module skips any value of the wrong type rather
than reporting it twice, so ``check`` can list its problems beside the models' (a key
that is not a string is skipped too, or named as an unknown field where every field is
known).

Messages follow the API server's field errors (``Unsupported value: "exists":
supported values: ...``, ``Invalid value: ...``, ``Duplicate value: ...``) without the
regular expressions it appends.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import orjson
from pydantic_core import ErrorDetails

from extender.cluster.objects import NodeModel, RuntimeClassModel, ValidationError
from extender.cluster.pod_views import SCHEDULED_POD_FIELDS
from policies.node_affinity import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN_MAX,
    LABEL_NAME,
    LABEL_NAME_MAX,
    QUALIFIED_NAME,
    label_key_errors,
    label_value_errors,
    node_name_errors,
)
from policies.quantity import QuantityError, parse_quantity
from policies.tolerations import parse_go_int64

__all__ = [
    "LabelMemo",
    "Problem",
    "decode_problems",
    "every_problem",
    "object_problems",
    "object_reference",
    "runtime_class_decode_problems",
]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing the API server would refuse: the field path and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


# --- the fields of each part (k8s.io/api core/v1, node/v1, meta/v1 types.go) ----------

_TYPE_FIELDS: Final = ("apiVersion", "kind")
_OBJECT_META: Final = frozenset(
    (
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    )
)
_RUNTIME_CLASS: Final = frozenset((*_TYPE_FIELDS, "metadata", "handler", "overhead", "scheduling"))
_SCHEDULING: Final = frozenset(("nodeSelector", "tolerations"))
_OVERHEAD: Final = frozenset(("podFixed",))
_TOLERATION: Final = frozenset(("key", "operator", "value", "effect", "tolerationSeconds"))
_TAINT: Final = frozenset(("key", "value", "effect", "timeAdded"))
_WITH_SPEC_AND_STATUS: Final = frozenset((*_TYPE_FIELDS, "metadata", "spec", "status"))
_RUNTIME_HANDLER: Final = frozenset(("name", "features"))
# Open parts: only these (read) fields are guarded against near misses.
_NODE_SPEC_READ: Final = ("taints",)
_NODE_STATUS_READ: Final = ("runtimeHandlers",)
_POD_SPEC_READ: Final = ("runtimeClassName", "tolerations", "nodeName", "overhead")
# Fields of a nested part written one level too high: "did you mean scheduling.nodeSelector?"
_RUNTIME_CLASS_MOVED: Final = {
    "nodeSelector": "scheduling.nodeSelector",
    "tolerations": "scheduling.tolerations",
    "podFixed": "overhead.podFixed",
}

_API_VERSIONS: Final = {"RuntimeClass": "node.k8s.io/v1", "Node": "v1", "Pod": "v1"}

# core/v1 TaintEffect and TolerationOperator values, in the API server's order.
_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_OPERATORS: Final = ("Equal", "Exists", "Lt", "Gt")

# --- syntax ----------------------------------------------------------------------------
# The patterns and messages are policies.node_affinity's (the annotation's label keys
# and values are checked there, by the same rules); this module adds the DNS label of a
# handler and a fast path for the many labels of a cluster file (a dozen per node).

_DNS_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character"
)

# IsDNS1123Subdomain (content/dns.go): metadata.name, a pod's runtimeClassName and nodeName.
dns_subdomain_errors = node_name_errors


def dns_label_errors(value: str) -> list[str]:
    """IsDNS1123Label (content/dns.go): a valid subdomain that is not a label can only
    hold dots."""
    errors = []
    if len(value) > LABEL_NAME_MAX:
        errors.append(f"must be no more than {LABEL_NAME_MAX} characters")
    if not DNS1123_LABEL.fullmatch(value):
        errors.append("must not contain dots" if not dns_subdomain_errors(value) else _DNS_LABEL_MSG)
    return errors


def valid_label_key(key: str) -> bool:
    """``label_key_errors(key) == []``, in one match."""
    match = QUALIFIED_NAME.fullmatch(key)
    return (
        match is not None
        and len(match.group(2)) <= LABEL_NAME_MAX
        and (match.group(1) is None or len(match.group(1)) <= DNS1123_SUBDOMAIN_MAX)
    )


def valid_label_value(value: str) -> bool:
    """``label_value_errors(value) == []``, in one match."""
    return not value or (len(value) <= LABEL_NAME_MAX and LABEL_NAME.fullmatch(value) is not None)


# --- helpers ---------------------------------------------------------------------------

_MAX_SHOWN = 64


def _quoted(value: object) -> str:
    """A value as the API server quotes it in an error, bounded."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return orjson.dumps(text).decode()


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def _key_path(path: str, key: str) -> str:
    shown = key if len(key) <= _MAX_SHOWN else key[: _MAX_SHOWN - 3] + "..."
    return f"{path}[{shown}]"


def _did_you_mean(key: str, known: Collection[str]) -> str | None:
    """The known field ``key`` most likely stands for: the same in another case, else
    the closest spelling (difflib), if any is close."""
    by_lower = {name.lower(): name for name in known}
    if key.lower() in by_lower:
        return by_lower[key.lower()]
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None


def _unknown(path: str, key: str, hint: str | None) -> Problem:
    message = "unknown field" + (f" (did you mean {hint}?)" if hint else "")
    return Problem(_join(path, key), message)


def _closed(
    obj: Mapping[str, Any], path: str, known: Collection[str], moved: Mapping[str, str] | None = None
) -> list[Problem]:
    """Every key of ``obj`` not among ``known`` (a part whose fields are all known). A
    key that is no string (YAML's ``1:``) is unknown too, without a hint."""
    return [
        _unknown(path, key, _did_you_mean(key, known) or (moved or {}).get(key))
        if isinstance(key, str)
        else _unknown(path, str(key), None)
        for key in obj
        if key not in known
    ]


def _stem(field: str) -> str:
    return field.lower().removesuffix("s")


def _stems(read: Collection[str]) -> Mapping[str, str]:
    return MappingProxyType({_stem(name): name for name in read})


def _near_misses(obj: Mapping[str, Any], path: str, by_stem: Mapping[str, str]) -> list[Problem]:
    """Keys of an open part that are a read field (``by_stem``'s values) in another case
    or number."""
    read = by_stem.values()
    return [
        _unknown(path, key, by_stem[_stem(key)])
        for key in obj
        if isinstance(key, str) and key not in read and _stem(key) in by_stem
    ]


def _unsupported(path: str, value: str, supported: Iterable[str]) -> Problem:
    choices = list(supported)
    listed = ", ".join(f'"{choice}"' for choice in choices)
    hint = next((choice for choice in choices if choice.lower() == value.lower()), None)
    more = f' (did you mean "{hint}"?)' if hint else ""
    return Problem(path, f"Unsupported value: {_quoted(value)}: supported values: {listed}{more}")


def _invalid(path: str, value: object, messages: list[str]) -> list[Problem]:
    if not messages:
        return []
    return [Problem(path, f"Invalid value: {_quoted(value)}: {'; '.join(messages)}")]


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# --- the parts -------------------------------------------------------------------------


@dataclass(slots=True)
class LabelMemo:
    """Label keys and values already found valid, for one file: every node of a cluster
    carries the same keys and mostly the same values (zones, instance types, pools),
    and the labels are most of the checking. Sized by the file, dropped with it."""

    keys: set[str] = field(default_factory=set)
    values: set[str] = field(default_factory=set)


def _labels(labels: Mapping[str, Any], path: str, memo: LabelMemo) -> list[Problem]:
    """ValidateLabels: each key a qualified name, each value a label value."""
    problems: list[Problem] = []
    good_keys, good_values = memo.keys, memo.values
    for key, value in labels.items():
        if key not in good_keys:
            if not isinstance(key, str):
                continue  # the parsing model's: keys must be strings
            if valid_label_key(key):
                good_keys.add(key)
            else:
                problems += _invalid(_key_path(path, key), key, label_key_errors(key))
        if isinstance(value, str) and value not in good_values:
            if valid_label_value(value):
                good_values.add(value)
            else:
                problems += _invalid(_key_path(path, key), value, label_value_errors(value))
    return problems


def _metadata(obj: Mapping[str, Any], memo: LabelMemo) -> list[Problem]:
    metadata = _dict(obj.get("metadata"))
    problems = _closed(metadata, "metadata", _OBJECT_META)
    name = _str(metadata.get("name"))
    if name:
        problems += _invalid("metadata.name", name, dns_subdomain_errors(name))
    problems += _labels(_dict(metadata.get("labels")), "metadata.labels", memo)
    return problems


def _api_version(obj: Mapping[str, Any], kind: str) -> list[Problem]:
    # Absent is fine here (cluster files written by hand often leave it out); a wrong
    # one names a version the API server does not serve for this kind.
    version = obj.get("apiVersion")
    if version is None or version == _API_VERSIONS[kind]:
        return []
    return [_unsupported("apiVersion", str(version), [_API_VERSIONS[kind]])]


def tolerations_problems(items: list[Any], path: str, *, unique: bool = False) -> list[Problem]:
    """ValidateTolerations (and, for a RuntimeClass, no toleration twice)."""
    problems: list[Problem] = []
    seen: set[tuple[Any, ...]] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        at = f"{path}[{index}]"
        problems += _closed(item, at, _TOLERATION)
        key = _str(item.get("key")) or ""
        operator = _str(item.get("operator")) or ""
        value = _str(item.get("value")) or ""
        effect = _str(item.get("effect")) or ""
        if key:
            problems += _invalid(f"{at}.key", key, label_key_errors(key))
        if operator not in ("", *_OPERATORS):
            problems.append(_unsupported(f"{at}.operator", operator, _OPERATORS))
        elif item.get("key") in (None, "") and operator != "Exists":  # a key of another type: the model's
            problems += _invalid(
                f"{at}.operator",
                operator,
                ['operator must be Exists when `key` is empty, which means "match all values and all keys"'],
            )
        if operator in ("", "Equal"):
            problems += _invalid(f"{at}.value", value, label_value_errors(value))
        elif operator == "Exists" and value:
            problems += _invalid(f"{at}.value", value, ["value must be empty when `operator` is 'Exists'"])
        elif operator in ("Lt", "Gt") and parse_go_int64(value) is None:
            problems += _invalid(
                f"{at}.value", value, [f"must be a decimal integer (int64) for operator {operator}"]
            )
        if effect and effect not in _EFFECTS:
            problems.append(_unsupported(f"{at}.effect", effect, _EFFECTS))
        if item.get("tolerationSeconds") is not None and effect != "NoExecute":
            problems += _invalid(
                f"{at}.effect", effect, ["effect must be 'NoExecute' when `tolerationSeconds` is set"]
            )
        if unique:
            identity = (key, operator, value, effect)
            if identity in seen:
                problems.append(Problem(at, "Duplicate value: the same toleration again"))
            seen.add(identity)
    return problems


def _taints(items: list[Any], path: str) -> list[Problem]:
    """validateNodeTaints: key and value syntax, effect required, unique by key and effect."""
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        at = f"{path}[{index}]"
        problems += _closed(item, at, _TAINT)
        key = _str(item.get("key")) or ""
        value = _str(item.get("value")) or ""
        effect = _str(item.get("effect")) or ""
        problems += _invalid(f"{at}.key", key, label_key_errors(key))
        problems += _invalid(f"{at}.value", value, label_value_errors(value))
        if not effect:
            problems.append(Problem(f"{at}.effect", "Required value"))
        elif effect not in _EFFECTS:
            problems.append(_unsupported(f"{at}.effect", effect, _EFFECTS))
        if (key, effect) in seen:
            problems.append(
                Problem(
                    at,
                    f"Duplicate value: {_quoted(f'{key}:{effect}')}: taints must be unique by key and effect pair",
                )
            )
        seen.add((key, effect))
    return problems


def _quantity(path: str, value: Any) -> list[Problem]:
    """A quantity of a ResourceList: ParseQuantity's syntax (``policies.quantity``) and
    ValidateResourceQuantityValue (an overhead is never negative). A value of another
    type is the parsing model's to report (strings, and numbers a hand-written file may
    hold, are quantities)."""
    if type(value) not in (str, int):
        return []
    try:
        negative = parse_quantity(str(value)) < 0
    except QuantityError as exc:
        return _invalid(path, value, [exc.reason])
    return _invalid(path, value, ["must be greater than or equal to 0"]) if negative else []


def _top_level(
    obj: Mapping[str, Any],
    kind: str,
    fields: Collection[str],
    memo: LabelMemo,
    moved: Mapping[str, str] | None = None,
) -> list[Problem]:
    """apiVersion, the top-level fields and metadata: alike for every kind."""
    return _api_version(obj, kind) + _closed(obj, "", fields, moved) + _metadata(obj, memo)


def runtime_class_problems(obj: Mapping[str, Any], memo: LabelMemo) -> list[Problem]:
    problems = _top_level(obj, "RuntimeClass", _RUNTIME_CLASS, memo, _RUNTIME_CLASS_MOVED)
    handler = _str(obj.get("handler"))
    if handler is not None:
        # NameIsDNSLabel(handler): the CRI's handler name must be a DNS label.
        problems += _invalid("handler", handler, dns_label_errors(handler))
    scheduling = _dict(obj.get("scheduling"))
    problems += _closed(scheduling, "scheduling", _SCHEDULING)
    problems += _labels(_dict(scheduling.get("nodeSelector")), "scheduling.nodeSelector", memo)
    problems += tolerations_problems(
        _list(scheduling.get("tolerations")), "scheduling.tolerations", unique=True
    )
    overhead = _dict(obj.get("overhead"))
    problems += _closed(overhead, "overhead", _OVERHEAD)
    for name, quantity in _dict(overhead.get("podFixed")).items():
        if not isinstance(name, str):
            continue  # the parsing model's: resource names must be strings
        at = _key_path("overhead.podFixed", name)
        problems += _invalid(at, name, label_key_errors(name))
        problems += _quantity(at, quantity)
    return problems


def node_problems(obj: Mapping[str, Any], memo: LabelMemo) -> list[Problem]:
    problems = _top_level(obj, "Node", _WITH_SPEC_AND_STATUS, memo)
    spec = _dict(obj.get("spec"))
    problems += _near_misses(spec, "spec", _NODE_SPEC_STEMS)
    problems += _taints(_list(spec.get("taints")), "spec.taints")
    status = _dict(obj.get("status"))
    problems += _near_misses(status, "status", _NODE_STATUS_STEMS)
    for index, handler in enumerate(_list(status.get("runtimeHandlers"))):
        if isinstance(handler, dict):
            problems += _closed(handler, f"status.runtimeHandlers[{index}]", _RUNTIME_HANDLER)
    return problems


def pod_problems(obj: Mapping[str, Any], memo: LabelMemo) -> list[Problem]:
    problems = _top_level(obj, "Pod", _WITH_SPEC_AND_STATUS, memo)
    spec = _dict(obj.get("spec"))
    problems += _near_misses(spec, "spec", _POD_SPEC_STEMS)
    for name in ("runtimeClassName", "nodeName"):
        value = _str(spec.get(name))
        if value:
            problems += _invalid(f"spec.{name}", value, dns_subdomain_errors(value))
    problems += tolerations_problems(_list(spec.get("tolerations")), "spec.tolerations")
    for name, quantity in _dict(spec.get("overhead")).items():
        if isinstance(name, str):
            problems += _quantity(_key_path("spec.overhead", name), quantity)
    return problems


_NODE_SPEC_STEMS: Final = _stems(_NODE_SPEC_READ)
_NODE_STATUS_STEMS: Final = _stems(_NODE_STATUS_READ)
_POD_SPEC_STEMS: Final = _stems(_POD_SPEC_READ)

_BY_KIND = {"RuntimeClass": runtime_class_problems, "Node": node_problems, "Pod": pod_problems}


def object_problems(obj: Mapping[str, Any], memo: LabelMemo | None = None) -> list[Problem]:
    """What the API server would refuse in ``obj`` (a Node, RuntimeClass or Pod as API
    JSON, already accepted by the parsing models), in field order; [] for other kinds.
    Pass one ``memo`` for all the objects of a file."""
    check = _BY_KIND.get(str(obj.get("kind")))
    return check(obj, memo if memo is not None else LabelMemo()) if check is not None else []


def object_reference(obj: Mapping[str, Any]) -> str:
    """``runtimeclass/gvisor``, as kubectl names an object (the kind alone without a name)."""
    kind = str(obj.get("kind") or "object").lower()
    name = _str(_dict(obj.get("metadata")).get("name"))
    return f"{kind}/{name}" if name else kind


# --- every problem of an object, as field problems (``check``) -------------------------

# The map fields of the models: their keys are shown as the API server shows a key,
# ``metadata.labels[app]``, not as a field.
_MAP_FIELDS = frozenset({"labels", "annotations", "nodeSelector", "podFixed"})
# What a type error expects, by pydantic's error type.
_EXPECTED = MappingProxyType(
    {
        "string_type": "a string",
        "int_type": "an integer",
        "int_parsing": "an integer",
        "int_from_float": "an integer",
        "bool_type": "true or false",
        "dict_type": "an object",
        "model_type": "an object",
        "model_attributes_type": "an object",
        "list_type": "a list",
    }
)
# The tag pydantic appends to the location of each member of a union that failed
# (``podFixed`` values: ``str | int``).
_UNION_TAGS = frozenset({"str", "int"})


def _shown(value: Any) -> str:
    """A value as JSON, bounded: the ``Invalid value: ...`` of a field problem."""
    text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    previous: int | str | None = None
    for index, part in enumerate(loc):
        # A Pod's spec.overhead is a map; a RuntimeClass's overhead holds podFixed.
        pod_overhead = previous == "overhead" and index >= 2 and loc[index - 2] == "spec"
        if isinstance(part, int) or previous in _MAP_FIELDS or pod_overhead:
            key = str(part) if len(str(part)) <= _MAX_SHOWN else str(part)[: _MAX_SHOWN - 3] + "..."
            path += f"[{key}]"
        else:
            path = f"{path}.{part}" if path else str(part)
        previous = part
    return path


def _field_problems(errors: list[ErrorDetails]) -> list[Problem]:
    """Each pydantic error as the API server words a field error: the field's path
    (``scheduling.tolerations[0].key``, ``metadata.labels[app]``), then ``Required
    value`` or ``Invalid value: VALUE: must be ...``. The members of a union that all
    failed on one value are one problem."""
    problems: list[Problem] = []
    grouped: dict[tuple[int | str, ...], list[ErrorDetails]] = {}
    for error in errors:
        loc = tuple(error["loc"])
        if len(loc) > 1 and loc[-1] in _UNION_TAGS and loc[-2] != "[key]":
            loc = loc[:-1]
        grouped.setdefault(loc, []).append(error)
    for loc, group in grouped.items():
        first = group[0]
        if loc and loc[-1] == "[key]":
            problems.append(
                Problem(
                    _field_path(loc[:-1]),
                    f"Invalid value: {_shown(first.get('input'))}: keys must be strings",
                )
            )
        elif first["type"] == "missing":
            problems.append(Problem(_field_path(loc), "Required value"))
        elif all(error["type"] in _EXPECTED for error in group):
            expected = " or ".join(dict.fromkeys(_EXPECTED[error["type"]] for error in group))
            problems.append(
                Problem(_field_path(loc), f"Invalid value: {_shown(first.get('input'))}: must be {expected}")
            )
        else:
            problems.append(Problem(_field_path(loc), first["msg"]))
    return problems


_NO_NAME = Problem("metadata.name", "Required value: name or generateName is required")
_NO_NAMESPACE = Problem("metadata.namespace", "Required value")


def _decoded(validate: Callable[[Any], object], obj: Any) -> list[Problem]:
    """What a parsing model's validator refuses in ``obj``, each at its field, without
    the bare ``metadata: Required value`` (the names below say it better)."""
    try:
        validate(obj)
    except ValidationError as exc:
        problems = _field_problems(exc.errors(include_url=False))
    else:
        return []
    return [p for p in problems if p != Problem("metadata", "Required value")]


def _names(obj: Any, *, namespaced: bool = False) -> list[Problem]:
    """No name (no metadata at all, or metadata without one), in the API server's words;
    and, for a namespaced object (a Pod of a cluster file), no namespace."""
    metadata = _dict(obj).get("metadata", {})
    if not isinstance(metadata, dict):
        return []
    problems = [] if metadata.get("name") else [_NO_NAME]
    if namespaced and not metadata.get("namespace"):
        problems.append(_NO_NAMESPACE)
    return problems


def runtime_class_decode_problems(obj: Any) -> list[Problem]:
    """What the parsing model (``extender.cluster.objects``) refuses in a RuntimeClass:
    every problem, each at its field (``runtime_class_from_api`` stops at the first, as
    one line), for ``check`` to list them all beside ``object_problems`` (which also
    checks the overhead's quantities). [] when the model takes it."""
    return _names(obj) + _decoded(RuntimeClassModel.model_validate, obj)


def node_decode_problems(obj: Any) -> list[Problem]:
    """``runtime_class_decode_problems`` for a Node (``node_from_api``)."""
    return _names(obj) + _decoded(NodeModel.model_validate, obj)


def pod_decode_problems(obj: Any) -> list[Problem]:
    """``runtime_class_decode_problems`` for a Pod of a cluster file
    (``scheduled_pod_from_api``: name and namespace required)."""
    return _names(obj, namespaced=True) + _decoded(SCHEDULED_POD_FIELDS.validate_python, obj)


_DECODERS: Final = MappingProxyType(
    {"RuntimeClass": runtime_class_decode_problems, "Node": node_decode_problems, "Pod": pod_decode_problems}
)


def decode_problems(obj: Any) -> list[Problem]:
    """What the parsing model of ``obj``'s kind refuses in it, field by field, for a
    Node, RuntimeClass or Pod; [] for other kinds. List them before ``object_problems``,
    as ``check`` does (the types first)."""
    decode = _DECODERS.get(str(_dict(obj).get("kind")))
    return decode(obj) if decode is not None else []


def every_problem(obj: Any, memo: LabelMemo | None = None) -> list[Problem]:
    """Every problem of a Node, RuntimeClass or Pod, as the API server lists its field
    errors: what the parsing model refuses (``decode_problems``, the types first), then
    what validation refuses at the fields the model did not (a taint without a key is
    ``Required value``, not that and an invalid empty key)."""
    decoded = decode_problems(obj)
    refused = {problem.path for problem in decoded}
    return decoded + [p for p in object_problems(obj, memo) if p.path not in refused]
