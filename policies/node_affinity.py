"""Expressive RuntimeClass selectors: one core/v1 NodeSelectorTerm, evaluated like node affinity.

KEP-585's alternative "NodeSelectorTerm" gives a RuntimeClass a NodeSelectorTerm instead
of a label map. RuntimeClass has no such field, so the term lives in an annotation
(``NODE_SELECTOR_TERM_ANNOTATION``), which the RuntimeClass admission plugin never merges
into pods: the extender alone enforces it.

Nothing validates an annotation on its way into the API server, so this module does the
validation Kubernetes does for ``requiredDuringSchedulingIgnoredDuringExecution`` terms,
applying both of its layers (a term must pass each):

- API validation, pkg/apis/core/validation/validation.go ``ValidateNodeSelectorRequirement``
  and ``ValidateNodeFieldSelectorRequirement`` (operators, value counts, label-name keys,
  ``matchFields`` only on ``metadata.name`` with one node-name value);
- the scheduler's parser, staging/src/k8s.io/component-helpers/scheduling/corev1/
  nodeaffinity/nodeaffinity.go ``nodeSelectorRequirementsAsSelector`` and
  ``nodeSelectorRequirementsAsFieldSelector``, which build requirements with
  ``labels.NewRequirement`` (staging/src/k8s.io/apimachinery/pkg/labels/selector.go):
  label keys and values must be valid, In/NotIn need a value, Exists/DoesNotExist none,
  Gt/Lt exactly one that ``strconv.ParseInt(v, 10, 64)`` accepts.

A term the scheduler could not parse matches no node there; here it is an error, so the
class fails closed with a reason that says why.

Matching mirrors ``Requirement.Matches`` in labels/selector.go: In needs the label with a
listed value; NotIn and DoesNotExist match when the label is absent; Gt/Lt parse the
node's label value as int64 and never match a missing or non-integer label. Requirements
of a term are ANDed. A term with no requirements matches no node, as an empty term does
in node affinity (``isEmptyNodeSelectorTerm`` is skipped, so it never matches).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from policies.objects import SelectorRequirement

# The RuntimeClass annotation that holds the term (JSON or YAML of one NodeSelectorTerm).
NODE_SELECTOR_TERM_ANNOTATION = "runtimeclass-extender.dev/node-selector-term"

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
# metav1.ObjectNameField: the only field node affinity selects on.
NODE_NAME_FIELD = "metadata.name"

# The syntax of label keys and values and of DNS names, as
# k8s.io/apimachinery/pkg/util/validation (content/kube.go, content/dns.go) spells it:
# IsQualifiedName, IsValidLabelValue, IsDNS1123Label, IsDNS1123Subdomain. The one copy:
# extender.cluster.validation checks cluster files with these too. Groups are
# non-capturing so that the fragments compose (QUALIFIED_NAME's two groups).
_QUALIFIED_NAME_FMT = "(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_DNS1123_LABEL_FMT = "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = rf"{_DNS1123_LABEL_FMT}(?:\.{_DNS1123_LABEL_FMT})*"
LABEL_NAME = re.compile(_QUALIFIED_NAME_FMT)
LABEL_VALUE = re.compile(f"(?:{_QUALIFIED_NAME_FMT})?")
DNS1123_LABEL = re.compile(_DNS1123_LABEL_FMT)
DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)
# A whole label key in one match: the optional DNS subdomain prefix in group 1, the name
# in group 2 (the lengths are the caller's to check). ASCII only, so len() counts bytes,
# as Go's does.
QUALIFIED_NAME = re.compile(f"(?:({_DNS1123_SUBDOMAIN_FMT})/)?({_QUALIFIED_NAME_FMT})")
LABEL_NAME_MAX = 63  # also the most a label value and a DNS-1123 label may hold
DNS1123_SUBDOMAIN_MAX = 253

_LABEL_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)


# strconv.ParseInt(s, 10, 64), which labels.Requirement.Matches and NewRequirement use
# for Gt/Lt: an optional sign and ASCII digits (leading zeros are fine, "0204" is 204;
# base 10 is explicit, so no "0x" and no "_"), within int64. Python's int() is looser
# (whitespace, "_", non-ASCII digits), hence the pattern. (Toleration Lt/Gt values are
# stricter, see policies/tolerations.py; label selectors never were.)
_PARSE_INT = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_int64(text: str) -> int | None:
    """The value strconv.ParseInt(text, 10, 64) returns, or None where it errors."""
    if not _PARSE_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


class TermError(ValueError):
    """The annotation does not hold a valid NodeSelectorTerm; the message says where."""


class NodeSelectorTerm(NamedTuple):
    """A validated term: label requirements and node-field requirements, ANDed."""

    match_expressions: tuple[SelectorRequirement, ...]
    match_fields: tuple[SelectorRequirement, ...]


def label_key_errors(key: str) -> list[str]:
    """Why ``key`` is not a label key (validation.IsQualifiedName); empty when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and "/" in prefix:
        return [f"a label key has at most one '/' (prefix/name), {_LABEL_NAME_MSG} in the name part"]
    errors: list[str] = []
    if slash:
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > DNS1123_SUBDOMAIN_MAX:
                errors.append(f"prefix part must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
            if not DNS1123_SUBDOMAIN.fullmatch(prefix):
                errors.append(f"prefix part {_DNS1123_MSG}")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > LABEL_NAME_MAX:
        errors.append(f"name part must be no more than {LABEL_NAME_MAX} characters")
    elif not LABEL_NAME.fullmatch(name):
        errors.append(f"name part {_LABEL_NAME_MSG}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is not a label value (validation.IsValidLabelValue); empty when it is."""
    errors: list[str] = []
    if len(value) > LABEL_NAME_MAX:
        errors.append(f"must be no more than {LABEL_NAME_MAX} characters")
    if not LABEL_VALUE.fullmatch(value):
        # Kubernetes' wording (content/kube.go, labelValueErrMsg).
        errors.append(f"a valid label must be an empty string or {_LABEL_NAME_MSG.removeprefix('must ')}")
    return errors


def node_name_errors(value: str) -> list[str]:
    """Why ``value`` cannot be a node name (ValidateNodeName: a DNS-1123 subdomain)."""
    errors: list[str] = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(_DNS1123_MSG)
    return errors


def _invalid(path: str, value: object, messages: Sequence[str]) -> str:
    # field.Invalid's shape: `path: Invalid value: "x": message`.
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return f"{path}: Invalid value: {shown}: {'; '.join(messages)}"


def _unsupported(path: str, value: object, supported: Sequence[str]) -> str:
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    listed = ", ".join(f'"{s}"' for s in supported)
    return f"{path}: Unsupported value: {shown}: supported values: {listed}"


def _string_list(raw: Any, path: str, errors: list[str]) -> list[str]:
    """A JSON/YAML list of strings, or [] after noting why it is not one."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.append(f"{path}: must be a list of strings")
        return []
    values: list[str] = []
    for index, item in enumerate(raw):
        if isinstance(item, str):
            values.append(item)
        else:
            # Go's decoder refuses a number where []string is declared; so do we, with a hint,
            # because YAML turns an unquoted 4 into a number. It still counts as a value, so
            # the count rules do not report a second, misleading error.
            if isinstance(item, bool):
                errors.append(f'{path}[{index}]: must be a string (quote it: "{str(item).lower()}")')
            elif isinstance(item, int | float):
                errors.append(f'{path}[{index}]: must be a string (quote it: "{item}")')
            else:
                errors.append(f"{path}[{index}]: must be a string")
            values.append(str(item))
    return values


def _requirement_fields(raw: Any, path: str, errors: list[str]) -> tuple[Any, Any, list[str]] | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: must be an object with key, operator and values")
        return None
    unknown = sorted(str(k) for k in raw if k not in ("key", "operator", "values"))
    if unknown:
        errors.append(f"{path}: unknown field(s) {', '.join(unknown)}")
    key, operator = raw.get("key"), raw.get("operator")
    if not isinstance(key, str):
        errors.append(f"{path}.key: must be a string")
    if not isinstance(operator, str):
        errors.append(f"{path}.operator: must be a string")
    values = _string_list(raw.get("values"), f"{path}.values", errors)
    return key, operator, values


def _label_requirement(raw: Any, path: str, errors: list[str]) -> SelectorRequirement | None:
    """One matchExpressions entry, validated like labels.NewRequirement."""
    before = len(errors)
    fields = _requirement_fields(raw, path, errors)
    if fields is None:
        return None
    key, operator, values = fields
    if isinstance(key, str) and (problems := label_key_errors(key)):
        errors.append(_invalid(f"{path}.key", key, problems))
    values_path = f"{path}.values"
    if isinstance(operator, str):
        if operator in ("In", "NotIn"):
            if not values:
                errors.append(f"{values_path}: for 'In', 'NotIn' operators, values set can't be empty")
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(
                    f"{values_path}: values set must be empty for 'Exists', 'DoesNotExist' operators"
                )
        elif operator in ("Gt", "Lt"):
            if len(values) != 1:
                errors.append(f"{values_path}: for 'Gt', 'Lt' operators, exactly one value is required")
            for index, value in enumerate(values):
                if parse_int64(value) is None:
                    errors.append(
                        _invalid(
                            f"{values_path}[{index}]",
                            value,
                            ["for 'Gt', 'Lt' operators, the value must be an integer"],
                        )
                    )
        else:
            errors.append(_unsupported(f"{path}.operator", operator, OPERATORS))
    for index, value in enumerate(values):
        if problems := label_value_errors(value):
            errors.append(_invalid(f"{values_path}[{index}]", value, problems))
    if len(errors) != before:
        return None
    return SelectorRequirement(key, operator, tuple(values))


def _field_requirement(raw: Any, path: str, errors: list[str]) -> SelectorRequirement | None:
    """One matchFields entry, validated like ValidateNodeFieldSelectorRequirement."""
    before = len(errors)
    fields = _requirement_fields(raw, path, errors)
    if fields is None:
        return None
    key, operator, values = fields
    if isinstance(operator, str):
        if operator not in FIELD_OPERATORS:
            errors.append(_unsupported(f"{path}.operator", operator, FIELD_OPERATORS))
        elif len(values) != 1:
            errors.append(f"{path}.values: must have one element")
    if isinstance(key, str):
        if key != NODE_NAME_FIELD:
            errors.append(
                _invalid(f"{path}.key", key, [f"not a valid field selector key (only {NODE_NAME_FIELD})"])
            )
        else:
            for index, value in enumerate(values):
                if problems := node_name_errors(value):
                    errors.append(_invalid(f"{path}.values[{index}]", value, problems))
    if len(errors) != before:
        return None
    return SelectorRequirement(key, operator, tuple(values))


def parse_term(document: Any) -> NodeSelectorTerm:
    """Validate a decoded NodeSelectorTerm (a mapping from JSON/YAML). Raises TermError.

    Every problem is reported, joined with "; ", each prefixed with its path
    (``matchExpressions[0].values``), like an aggregated field.ErrorList.
    """
    if not isinstance(document, Mapping):
        raise TermError("expected a NodeSelectorTerm object with matchExpressions and/or matchFields")
    errors: list[str] = []
    unknown = sorted(str(k) for k in document if k not in ("matchExpressions", "matchFields"))
    if unknown:
        errors.append(
            f"unknown field(s) {', '.join(unknown)} (a NodeSelectorTerm has matchExpressions, matchFields)"
        )
    parts: dict[str, list[SelectorRequirement]] = {"matchExpressions": [], "matchFields": []}
    for section, parse_one in (("matchExpressions", _label_requirement), ("matchFields", _field_requirement)):
        raw = document.get(section)
        if raw is None:
            continue
        if not isinstance(raw, list):
            errors.append(f"{section}: must be a list")
            continue
        for index, item in enumerate(raw):
            requirement = parse_one(item, f"{section}[{index}]", errors)
            if requirement is not None:
                parts[section].append(requirement)
    if errors:
        raise TermError("; ".join(errors))
    return NodeSelectorTerm(tuple(parts["matchExpressions"]), tuple(parts["matchFields"]))


def _values(values: tuple[str, ...]) -> str:
    return f"[{', '.join(values)}]"


def requirement_mismatch(requirement: SelectorRequirement, labels: Mapping[str, str]) -> str | None:
    """Why ``labels`` fail ``requirement`` (labels.Requirement.Matches), or None when they match."""
    key, op, values = requirement.key, requirement.operator, requirement.values
    actual = labels.get(key)
    if op == "In":
        if actual is None:
            return f"label {key} missing (In {_values(values)})"
        return None if actual in values else f"label {key}={actual} is not In {_values(values)}"
    if op == "NotIn":
        # An absent label is not in any set.
        return (
            None
            if actual is None or actual not in values
            else f"label {key}={actual} is excluded (NotIn {_values(values)})"
        )
    if op == "Exists":
        return None if actual is not None else f"label {key} missing (Exists)"
    if op == "DoesNotExist":
        return None if actual is None else f"label {key}={actual} is present (DoesNotExist)"
    if op in ("Gt", "Lt"):
        bound = values[0] if len(values) == 1 else ""
        if actual is None:
            return f"label {key} missing ({op} {bound})"
        have, wanted = parse_int64(actual), parse_int64(bound)
        if have is None:
            return f"label {key}={actual} is not an integer ({op} {bound})"
        if wanted is None:  # a parsed term never gets here; Kubernetes matches nothing then
            return f"{op} needs one integer value for label {key}, got {_values(values)}"
        if (have > wanted) if op == "Gt" else (have < wanted):
            return None
        return f"label {key}={actual} is not {op} {bound}"
    return f"unknown operator {op!r} for label {key}"


def field_mismatch(requirement: SelectorRequirement, node_name: str) -> str | None:
    """Why ``node_name`` fails a matchFields requirement (fields.OneTerm[Not]EqualSelector)."""
    wanted = requirement.values[0] if requirement.values else ""
    if requirement.key != NODE_NAME_FIELD:
        return f"unknown field {requirement.key!r}"
    if requirement.operator == "In":
        return None if node_name == wanted else f"{NODE_NAME_FIELD}={node_name} is not In [{wanted}]"
    if requirement.operator == "NotIn":
        return (
            None if node_name != wanted else f"{NODE_NAME_FIELD}={node_name} is excluded (NotIn [{wanted}])"
        )
    return f"unknown operator {requirement.operator!r} for field {requirement.key}"


EMPTY_TERM_DETAIL = "the node selector term is empty, and an empty term matches no node (as in node affinity)"


def term_mismatches(
    match_expressions: Sequence[SelectorRequirement],
    match_fields: Sequence[SelectorRequirement],
    labels: Mapping[str, str],
    node_name: str,
) -> list[str]:
    """Every requirement of the term that the node fails (empty: the node matches)."""
    if not match_expressions and not match_fields:
        return [EMPTY_TERM_DETAIL]
    problems = [p for r in match_expressions if (p := requirement_mismatch(r, labels)) is not None]
    # nodeSelectorTerm.match skips matchFields when the node has no name; ours always have one.
    if node_name:
        problems.extend(p for r in match_fields if (p := field_mismatch(r, node_name)) is not None)
    return problems


def term_matches(
    match_expressions: Sequence[SelectorRequirement],
    match_fields: Sequence[SelectorRequirement],
    labels: Mapping[str, str],
    node_name: str,
) -> bool:
    return not term_mismatches(match_expressions, match_fields, labels, node_name)
