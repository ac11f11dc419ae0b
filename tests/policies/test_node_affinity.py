"""NodeSelectorTerm validation and matching (``policies.node_affinity``).

Cases mirror Kubernetes' own tests; each table row names its source:
- SEL: staging/src/k8s.io/apimachinery/pkg/labels/selector_test.go
  (TestRequirementConstructor, TestRequirementSelectorMatching, TestSelectorMatches);
- NA: staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/
  nodeaffinity_test.go (TestNodeSelectorMatch, TestNodeSelectorRequirementsAsSelector,
  TestPodMatchesNodeSelectorAndAffinityTerms);
- VAL: pkg/apis/core/validation/validation.go ValidateNodeSelectorRequirement /
  ValidateNodeFieldSelectorRequirement (API rules the annotation bypasses);
- PI: strconv.ParseInt(s, 10, 64), which Requirement.Matches uses for Gt/Lt.
Node names in matchFields rows are DNS subdomains ("node-1" where Kubernetes' tests
use "node_1"): its matcher does not validate them, but the API does, and the annotation
gets no API validation, so we apply it.
"""

from __future__ import annotations

from typing import Any

import pytest

from policies.node_affinity import (
    EMPTY_TERM_DETAIL,
    NodeSelectorTerm,
    TermError,
    field_mismatch,
    parse_term,
    requirement_mismatch,
    term_matches,
    term_mismatches,
)
from policies.objects import SelectorRequirement as Req

SEL = "labels/selector_test.go"
NA = "nodeaffinity/nodeaffinity_test.go"
VAL = "pkg/apis/core/validation"
PI = "strconv.ParseInt via Requirement.Matches"


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        entry["values"] = list(values)
    return entry


# --- validation: what labels.NewRequirement / the API accept ---------------------------

# (source, requirement, valid): TestRequirementConstructor's table, then more.
REQUIREMENT_VALIDITY: list[tuple[str, dict[str, Any], bool]] = [
    (SEL, expr("x", "In"), False),
    (SEL, {"key": "x", "operator": "NotIn", "values": []}, False),
    (SEL, expr("x", "In", "foo"), True),
    (SEL, expr("x", "NotIn", "foo"), True),
    (SEL, expr("x", "Exists"), True),
    (SEL, expr("x", "DoesNotExist"), True),
    (SEL, expr("1foo", "In", "bar"), True),
    (SEL, expr("1234", "In", "bar"), True),
    (SEL, expr("y", "Gt", "1"), True),
    (SEL, expr("z", "Lt", "6"), True),
    (SEL, expr("foo", "Gt", "bar"), False),
    (SEL, expr("barz", "Lt", "blah"), False),
    (SEL, expr("a" * 254, "Exists"), False),  # name part longer than 63
    (SEL, expr("x", "In", ""), True),  # "The empty string is a valid value in the input values set."
    (NA, expr("foo", "Exists", "bar", "baz"), False),  # values set must be empty for exists
    (NA, expr("foo", "Gt", "1"), True),
    (NA, expr("bar", "Lt", "7"), True),
    (NA, expr("kernel-version", "Gt", "0204"), True),
    (NA, expr("invalid key", "In", "label_value"), False),
    (NA, expr("foo", "NotIn", "invalid value: ___@#$%^"), False),
    (VAL, expr("x", "DoesNotExist", "a"), False),
    (VAL, expr("x", "Gt", "1", "2"), False),
    (VAL, expr("x", "Lt"), False),
    (VAL, expr("x", "Equals", "a"), False),  # a labels operator, not a NodeSelectorOperator
    (VAL, expr("x", "in", "a"), False),  # operators are case-sensitive
    (VAL, expr("example.com/x", "Exists"), True),
    (VAL, expr("nvidia.com/gpu.count", "Gt", "0"), True),
    (VAL, expr("Example.com/x", "Exists"), False),  # the prefix is a lowercase DNS subdomain
    (VAL, expr("/x", "Exists"), False),
    (VAL, expr("a/b/c", "Exists"), False),
    (VAL, expr("x/", "Exists"), False),
    (VAL, expr("", "Exists"), False),
    (VAL, expr("x", "In", "a" * 64), False),  # label values are at most 63 characters
    (VAL, expr("x", "In", "-a"), False),
    (PI, expr("x", "Gt", "-1"), False),  # parses, but "-1" is not a valid label value
    (PI, expr("x", "Gt", "9223372036854775807"), True),
    (PI, expr("x", "Gt", "9223372036854775808"), False),  # out of int64 range
    (PI, expr("x", "Gt", "1.5"), False),
    (PI, expr("x", "Gt", "0x10"), False),
    (PI, expr("x", "Gt", "1_000"), False),
    (PI, expr("x", "Gt", ""), False),
]


@pytest.mark.parametrize(("source", "requirement", "valid"), REQUIREMENT_VALIDITY)
def test_match_expression_validity(source: str, requirement: dict[str, Any], valid: bool) -> None:
    document = {"matchExpressions": [requirement]}
    if valid:
        term = parse_term(document)
        assert term.match_expressions == (
            Req(requirement["key"], requirement["operator"], tuple(requirement.get("values", ()))),
        ), source
    else:
        with pytest.raises(TermError, match=r"matchExpressions\[0\]"):
            parse_term(document)


FIELD_VALIDITY: list[tuple[str, dict[str, Any], bool]] = [
    (NA, expr("metadata.name", "In", "node-1"), True),
    (NA, expr("metadata.name", "NotIn", "node-1"), True),
    (NA, expr("metadata.name", "In", "host-1", "host-2"), False),  # "must have one element"
    (VAL, expr("metadata.name", "In"), False),
    (VAL, expr("metadata.name", "Exists"), False),  # matchFields supports In/NotIn only
    (VAL, expr("metadata.name", "Gt", "1"), False),
    (VAL, expr("metadata.namespace", "In", "a"), False),  # only metadata.name
    (VAL, expr("metadata.name", "In", "node_1"), False),  # not a DNS subdomain
    (VAL, expr("metadata.name", "In", "Node-1"), False),
]


@pytest.mark.parametrize(("source", "requirement", "valid"), FIELD_VALIDITY)
def test_match_field_validity(source: str, requirement: dict[str, Any], valid: bool) -> None:
    document = {"matchFields": [requirement]}
    if valid:
        assert parse_term(document).match_fields == (
            Req(requirement["key"], requirement["operator"], tuple(requirement["values"])),
        ), source
    else:
        with pytest.raises(TermError, match=r"matchFields\[0\]"):
            parse_term(document)


# (document, fragment of the error): the shape of the term itself.
SHAPE_ERRORS: list[tuple[Any, str]] = [
    (None, "expected a NodeSelectorTerm object"),
    ([expr("x", "Exists")], "expected a NodeSelectorTerm object"),
    ("x in (a)", "expected a NodeSelectorTerm object"),  # the string selector syntax is not a term
    ({"matchExpression": []}, "unknown field(s) matchExpression"),
    ({"nodeSelectorTerms": []}, "unknown field(s) nodeSelectorTerms"),
    ({"matchExpressions": {"key": "x"}}, "matchExpressions: must be a list"),
    ({"matchExpressions": ["x"]}, "matchExpressions[0]: must be an object"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "matchExpressions[0].key: must be a string"),
    ({"matchExpressions": [{"key": "x"}]}, "matchExpressions[0].operator: must be a string"),
    ({"matchExpressions": [{"key": "x", "operator": "Exists", "value": "a"}]}, "unknown field(s) value"),
    (
        {"matchExpressions": [{"key": "x", "operator": "In", "values": "a"}]},
        "values: must be a list of strings",
    ),
    # YAML's unquoted 4 is a number; Go's decoder refuses it for []string, and so do we.
    (
        {"matchExpressions": [{"key": "x", "operator": "Gt", "values": [4]}]},
        'values[0]: must be a string (quote it: "4")',
    ),
    (
        {"matchExpressions": [{"key": "x", "operator": "In", "values": [True]}]},
        'must be a string (quote it: "true")',
    ),
    ({"matchExpressions": [{"key": "x", "operator": "In", "values": [None]}]}, "values[0]: must be a string"),
]


@pytest.mark.parametrize(("document", "fragment"), SHAPE_ERRORS)
def test_term_shape_errors(document: Any, fragment: str) -> None:
    with pytest.raises(TermError) as caught:
        parse_term(document)
    assert fragment in str(caught.value)


def test_every_problem_is_reported_with_its_path() -> None:
    document = {
        "matchExpressions": [expr("ok", "Exists"), expr("x", "Gt", "abc"), expr("y", "Foo")],
        "matchFields": [expr("metadata.uid", "In", "a")],
    }
    with pytest.raises(TermError) as caught:
        parse_term(document)
    message = str(caught.value)
    assert message.split("; ") == [
        "matchExpressions[1].values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, the value must be an integer",
        'matchExpressions[2].operator: Unsupported value: "Foo": supported values: '
        '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"',
        'matchFields[0].key: Invalid value: "metadata.uid": not a valid field selector key (only metadata.name)',
    ]


def test_a_number_is_reported_once_not_also_as_a_wrong_count() -> None:
    with pytest.raises(TermError) as caught:
        parse_term({"matchExpressions": [{"key": "x", "operator": "Gt", "values": [4]}]})
    assert "exactly one value" not in str(caught.value)


@pytest.mark.parametrize(
    ("document", "term"),
    [
        ({}, NodeSelectorTerm((), ())),
        ({"matchExpressions": None, "matchFields": None}, NodeSelectorTerm((), ())),  # Go: null = nil slice
        ({"matchExpressions": []}, NodeSelectorTerm((), ())),
        (
            {
                "matchExpressions": [expr("a", "In", "x", "y")],
                "matchFields": [expr("metadata.name", "NotIn", "n-1")],
            },
            NodeSelectorTerm((Req("a", "In", ("x", "y")),), (Req("metadata.name", "NotIn", ("n-1",)),)),
        ),
    ],
)
def test_valid_terms(document: dict[str, Any], term: NodeSelectorTerm) -> None:
    assert parse_term(document) == term


# --- matching: Requirement.Matches, ANDed within a term -------------------------------

LABELS_XY = {"x": "foo", "y": "baz"}

# (source, requirements, labels, match)
LABEL_MATCHING: list[tuple[str, list[Req], dict[str, str], bool]] = [
    # TestRequirementSelectorMatching
    (SEL, [Req("x", "In", ("foo",)), Req("y", "NotIn", ("alpha",))], LABELS_XY, True),
    (SEL, [Req("x", "In", ("foo",)), Req("y", "In", ("alpha",))], LABELS_XY, False),
    (SEL, [Req("x", "NotIn", ("",)), Req("y", "Exists")], {"y": ""}, True),
    (SEL, [Req("x", "DoesNotExist"), Req("y", "Exists")], {"y": ""}, True),
    (SEL, [Req("x", "NotIn", ("",)), Req("y", "DoesNotExist")], {"y": ""}, False),
    (SEL, [Req("x", "In", ("",))], {"y": "baz"}, False),
    (SEL, [Req("z", "Gt", ("1",))], {"z": "2"}, True),
    (SEL, [Req("z", "Gt", ("1",))], {"z": "v2"}, False),
    # TestSelectorMatches (the string forms x>1, x<1, x, !x)
    (SEL, [Req("x", "Gt", ("1",))], {"x": "2"}, True),
    (SEL, [Req("x", "Lt", ("1",))], {"x": "0"}, True),
    (SEL, [Req("x", "Gt", ("1",))], {"x": "0"}, False),
    (SEL, [Req("x", "Lt", ("1",))], {"x": "2"}, False),
    (SEL, [Req("x", "Exists")], {"x": "z"}, True),
    (SEL, [Req("x", "DoesNotExist")], {"y": "z"}, True),
    (SEL, [Req("x", "Exists")], {"y": "z"}, False),
    (SEL, [Req("x", "DoesNotExist")], {"x": "z"}, False),
    # TestPodMatchesNodeSelectorAndAffinityTerms
    (NA, [Req("foo", "In", ("bar", "value2"))], {"foo": "bar"}, True),
    (NA, [Req("kernel-version", "Gt", ("0204",))], {"kernel-version": "0206"}, True),
    (NA, [Req("mem-type", "NotIn", ("DDR", "DDR2"))], {"mem-type": "DDR3"}, True),
    (NA, [Req("GPU", "Exists")], {"GPU": "NVIDIA-GRID-K1"}, True),
    (NA, [Req("foo", "In", ("value1", "value2"))], {"foo": "bar"}, False),
    (NA, [Req("GPU", "Exists"), Req("GPU", "NotIn", ("AMD", "INTER"))], {"GPU": "NVIDIA-GRID-K1"}, True),
    (NA, [Req("GPU", "Exists"), Req("GPU", "In", ("AMD", "INTER"))], {"GPU": "NVIDIA-GRID-K1"}, False),
    (NA, [Req("foo", "Exists")], {"foo": "barrrrrr"}, True),
    # NotIn and DoesNotExist match an absent label; In, Exists, Gt and Lt do not.
    (SEL, [Req("zone", "NotIn", ("a",))], {}, True),
    (SEL, [Req("zone", "DoesNotExist")], {}, True),
    (SEL, [Req("zone", "In", ("a",))], {}, False),
    (SEL, [Req("zone", "Exists")], {}, False),
    (SEL, [Req("gpu", "Gt", ("0",))], {}, False),
    (SEL, [Req("gpu", "Lt", ("10",))], {}, False),
    # Gt/Lt parse the node's label with strconv.ParseInt(v, 10, 64): strict and exclusive.
    (PI, [Req("n", "Gt", ("4",))], {"n": "4"}, False),
    (PI, [Req("n", "Lt", ("4",))], {"n": "4"}, False),
    (PI, [Req("n", "Gt", ("4",))], {"n": "+5"}, True),
    (PI, [Req("n", "Lt", ("0",))], {"n": "-5"}, True),
    (PI, [Req("n", "Gt", ("4",))], {"n": "05"}, True),
    (PI, [Req("n", "Gt", ("4",))], {"n": "5.0"}, False),
    (PI, [Req("n", "Gt", ("4",))], {"n": "0x10"}, False),
    (PI, [Req("n", "Gt", ("4",))], {"n": " 5"}, False),
    (PI, [Req("n", "Gt", ("4",))], {"n": ""}, False),
    (PI, [Req("n", "Gt", ("9223372036854775806",))], {"n": "9223372036854775807"}, True),
    (PI, [Req("n", "Gt", ("0",))], {"n": "9223372036854775808"}, False),  # overflows int64
    (
        PI,
        [Req("n", "Gt", ("4",))],
        {"n": "\u0665"},
        False,
    ),  # ARABIC-INDIC DIGIT FIVE: int() takes it, ParseInt does not
]


@pytest.mark.parametrize(("source", "requirements", "labels", "match"), LABEL_MATCHING)
def test_label_matching(source: str, requirements: list[Req], labels: dict[str, str], match: bool) -> None:
    assert term_matches(requirements, (), labels, "node-1") is match, source


NAME_IN = Req("metadata.name", "In", ("node-1",))
FOO_BAR = Req("foo", "In", ("bar",))

# (source, match_expressions, match_fields, labels, node name, match)
TERM_MATCHING: list[tuple[str, list[Req], list[Req], dict[str, str], str, bool]] = [
    # An empty term matches no objects ("Pod with empty MatchExpressions ... will match no objects").
    (NA, [], [], {"foo": "bar"}, "node-1", False),
    (NA, [], [NAME_IN], {}, "node-1", True),
    (NA, [], [NAME_IN], {}, "node-2", False),
    # "one term: matchFields does not match, but matchExpressions matches"
    (NA, [FOO_BAR], [NAME_IN], {"foo": "bar"}, "node-2", False),
    # "one term: both matchFields and matchExpressions match"
    (NA, [FOO_BAR], [NAME_IN], {"foo": "bar"}, "node-1", True),
    # "node matches field selector, but not labels"
    (NA, [Req("label_1", "In", ("label_1_val",))], [NAME_IN], {}, "node-1", False),
    (NA, [], [Req("metadata.name", "NotIn", ("node-1",))], {}, "node-1", False),
    (NA, [], [Req("metadata.name", "NotIn", ("node-1",))], {}, "node-2", True),
]


@pytest.mark.parametrize(("source", "expressions", "fields", "labels", "node", "match"), TERM_MATCHING)
def test_term_matching(
    source: str, expressions: list[Req], fields: list[Req], labels: dict[str, str], node: str, match: bool
) -> None:
    assert term_matches(expressions, fields, labels, node) is match, source


# --- the detail strings explain and debug logs show -----------------------------------

DETAILS: list[tuple[Req, dict[str, str], str | None]] = [
    (Req("gpu.count", "Gt", ("4",)), {"gpu.count": "2"}, "label gpu.count=2 is not Gt 4"),
    (Req("gpu.count", "Lt", ("4",)), {"gpu.count": "9"}, "label gpu.count=9 is not Lt 4"),
    (Req("gpu.count", "Gt", ("4",)), {}, "label gpu.count missing (Gt 4)"),
    (Req("gpu.count", "Gt", ("4",)), {"gpu.count": "many"}, "label gpu.count=many is not an integer (Gt 4)"),
    (Req("zone", "In", ("a", "b")), {}, "label zone missing (In [a, b])"),
    (Req("zone", "In", ("a", "b")), {"zone": "c"}, "label zone=c is not In [a, b]"),
    (Req("zone", "NotIn", ("a", "b")), {"zone": "a"}, "label zone=a is excluded (NotIn [a, b])"),
    (Req("gpu", "Exists"), {}, "label gpu missing (Exists)"),
    (Req("gpu", "DoesNotExist"), {"gpu": "t4"}, "label gpu=t4 is present (DoesNotExist)"),
    (Req("gpu.count", "Gt", ("4",)), {"gpu.count": "8"}, None),
]


@pytest.mark.parametrize(("requirement", "labels", "detail"), DETAILS)
def test_mismatch_detail_names_the_expression(
    requirement: Req, labels: dict[str, str], detail: str | None
) -> None:
    assert requirement_mismatch(requirement, labels) == detail


def test_field_mismatch_detail() -> None:
    assert field_mismatch(NAME_IN, "node-2") == "metadata.name=node-2 is not In [node-1]"
    assert field_mismatch(Req("metadata.name", "NotIn", ("node-1",)), "node-1") == (
        "metadata.name=node-1 is excluded (NotIn [node-1])"
    )
    assert field_mismatch(NAME_IN, "node-1") is None


def test_term_mismatches_lists_every_failing_requirement_in_order() -> None:
    expressions = [Req("zone", "In", ("a",)), Req("os", "Exists"), Req("gpu.count", "Gt", ("1",))]
    assert term_mismatches(expressions, [NAME_IN], {"os": "linux", "gpu.count": "1"}, "node-2") == [
        "label zone missing (In [a])",
        "label gpu.count=1 is not Gt 1",
        "metadata.name=node-2 is not In [node-1]",
    ]
    assert term_mismatches([], [], {}, "node-1") == [EMPTY_TERM_DETAIL]
