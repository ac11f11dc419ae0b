"""Toleration matching: ``policies.tolerations.tolerates`` against Kubernetes' rules.

Every case names the Kubernetes rule it mirrors. Sources:
- TT: ``Toleration.ToleratesTaint`` in staging/src/k8s.io/api/core/v1/toleration.go
  (effect, key, operator; ``Lt``/``Gt`` via ``compareNumericValues``: the taint value
  ``<``/``>`` the toleration value, feature gate TaintTolerationComparisonOperators).
- DEC: ``content.IsDecimalInteger`` in k8s.io/apimachinery/pkg/api/validate/content/
  decimal_int.go, which compareNumericValues applies before ``strconv.ParseInt(s, 10, 64)``
  (canonical form: no "+", no leading zeros, no "-0"; then the value must fit int64).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.objects import Taint, Toleration
from policies.tolerations import FILTERED_EFFECTS, parse_go_int64, tolerated_by_any, tolerates

TT = "staging/src/k8s.io/api/core/v1/toleration.go ToleratesTaint"
DEC = "k8s.io/apimachinery/pkg/api/validate/content IsDecimalInteger + strconv.ParseInt(s, 10, 64)"

INT64_MAX = "9223372036854775807"
INT64_MIN = "-9223372036854775808"


def case(name: str, toleration: Toleration, taint: Taint, expected: bool, rule: str = TT) -> Any:
    return pytest.param(toleration, taint, expected, rule, id=name)


# fmt: off
MATCHING_CASES = [
    # --- effect: an empty toleration effect matches every effect (TT rule 1)
    case("empty-effect-NoSchedule", Toleration("k", "Equal", "v", ""), Taint("k", "NoSchedule", "v"), True),
    case("empty-effect-NoExecute", Toleration("k", "Equal", "v", ""), Taint("k", "NoExecute", "v"), True),
    case("empty-effect-PreferNoSchedule", Toleration("k", "Equal", "v", ""), Taint("k", "PreferNoSchedule", "v"), True),
    case("effect-differs", Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "NoExecute", "v"), False),
    case("effect-same", Toleration("k", "Equal", "v", "NoExecute"), Taint("k", "NoExecute", "v"), True),
    case("effect-case-sensitive", Toleration("k", "Equal", "v", "noschedule"), Taint("k", "NoSchedule", "v"), False),
    # --- key: an empty key with Exists matches every key (TT rule 3)
    case("empty-key-exists-all", Toleration("", "Exists", "", ""), Taint("anything", "NoExecute", "x"), True),
    case("empty-key-exists-effect", Toleration("", "Exists", "", "NoSchedule"), Taint("anything", "NoSchedule", "x"), True),
    case("empty-key-exists-other-effect", Toleration("", "Exists", "", "NoSchedule"), Taint("anything", "NoExecute", "x"), False),
    # An empty key only skips the key check: the operator still decides. API validation
    # forbids key "" without Exists, but ToleratesTaint itself compares the values.
    case("empty-key-equal-empty-values", Toleration("", "Equal", "", ""), Taint("k", "NoSchedule", ""), True),
    case("empty-key-equal-value-differs", Toleration("", "Equal", "", ""), Taint("k", "NoSchedule", "v"), False),
    case("key-differs", Toleration("k", "Exists", "", ""), Taint("other", "NoSchedule", ""), False),
    case("key-case-sensitive", Toleration("Sandbox", "Exists", "", ""), Taint("sandbox", "NoSchedule", ""), False),
    # --- operator Equal / "" compares values (TT: "empty operator means Equal")
    case("equal-same-value", Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "NoSchedule", "v"), True),
    case("equal-other-value", Toleration("k", "Equal", "v1", "NoSchedule"), Taint("k", "NoSchedule", "v2"), False),
    case("empty-op-is-equal", Toleration("k", "", "v", "NoSchedule"), Taint("k", "NoSchedule", "v"), True),
    case("empty-op-other-value", Toleration("k", "", "v1", "NoSchedule"), Taint("k", "NoSchedule", "v2"), False),
    case("equal-both-empty", Toleration("k", "Equal", "", "NoSchedule"), Taint("k", "NoSchedule", ""), True),
    case("equal-empty-vs-value", Toleration("k", "Equal", "", "NoSchedule"), Taint("k", "NoSchedule", "v"), False),
    case("equal-case-sensitive", Toleration("k", "Equal", "True", "NoSchedule"), Taint("k", "NoSchedule", "true"), False),
    # --- operator Exists ignores the value (TT rule 2)
    case("exists-any-value", Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "NoSchedule", "v"), True),
    case("exists-ignores-own-value", Toleration("k", "Exists", "other", "NoSchedule"), Taint("k", "NoSchedule", "v"), True),
    case("exists-no-value", Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "NoSchedule", ""), True),
    # --- unknown operators never tolerate (TT: default branch returns false)
    case("unknown-op-In", Toleration("k", "In", "v", "NoSchedule"), Taint("k", "NoSchedule", "v"), False),
    case("op-case-sensitive-exists", Toleration("k", "exists", "", "NoSchedule"), Taint("k", "NoSchedule", "v"), False),
    case("op-case-sensitive-equal", Toleration("k", "equal", "v", "NoSchedule"), Taint("k", "NoSchedule", "v"), False),
    case("unknown-op-empty-key", Toleration("", "DoesNotExist", "", ""), Taint("k", "NoSchedule", ""), False),
    # --- Lt: the taint value is less than the toleration value (TT compareNumericValues)
    case("lt-taint-smaller", Toleration("k", "Lt", "10", "NoSchedule"), Taint("k", "NoSchedule", "5"), True),
    case("lt-equal", Toleration("k", "Lt", "10", "NoSchedule"), Taint("k", "NoSchedule", "10"), False),
    case("lt-taint-larger", Toleration("k", "Lt", "10", "NoSchedule"), Taint("k", "NoSchedule", "11"), False),
    case("lt-negative", Toleration("k", "Lt", "-1", "NoSchedule"), Taint("k", "NoSchedule", "-5"), True),
    case("lt-zero", Toleration("k", "Lt", "1", "NoSchedule"), Taint("k", "NoSchedule", "0"), True),
    case("lt-numeric-not-lexical", Toleration("k", "Lt", "9", "NoSchedule"), Taint("k", "NoSchedule", "10"), False),
    case("lt-int64-bounds", Toleration("k", "Lt", INT64_MAX, "NoSchedule"), Taint("k", "NoSchedule", INT64_MIN), True, DEC),
    # --- Gt: the taint value is greater than the toleration value
    case("gt-taint-larger", Toleration("k", "Gt", "10", "NoSchedule"), Taint("k", "NoSchedule", "11"), True),
    case("gt-equal", Toleration("k", "Gt", "10", "NoSchedule"), Taint("k", "NoSchedule", "10"), False),
    case("gt-taint-smaller", Toleration("k", "Gt", "10", "NoSchedule"), Taint("k", "NoSchedule", "9"), False),
    case("gt-negative", Toleration("k", "Gt", "-10", "NoSchedule"), Taint("k", "NoSchedule", "-5"), True),
    case("gt-numeric-not-lexical", Toleration("k", "Gt", "9", "NoSchedule"), Taint("k", "NoSchedule", "10"), True),
    case("gt-int64-bounds", Toleration("k", "Gt", INT64_MIN, "NoSchedule"), Taint("k", "NoSchedule", INT64_MAX), True, DEC),
    # Lt/Gt still obey the key and effect checks first (TT rules 1 and 3)
    case("lt-empty-key-any-key", Toleration("", "Lt", "10", ""), Taint("any", "NoExecute", "3"), True),
    case("lt-effect-differs", Toleration("k", "Lt", "10", "NoSchedule"), Taint("k", "NoExecute", "3"), False),
    case("gt-key-differs", Toleration("k", "Gt", "1", "NoSchedule"), Taint("other", "NoSchedule", "3"), False),
    case("op-case-sensitive-lt", Toleration("k", "lt", "10", "NoSchedule"), Taint("k", "NoSchedule", "3"), False),
]
# fmt: on


@pytest.mark.parametrize(("toleration", "taint", "expected", "rule"), MATCHING_CASES)
def test_tolerates(toleration: Toleration, taint: Taint, expected: bool, rule: str) -> None:
    assert tolerates(toleration, taint) is expected, rule


# Values Kubernetes does not read as an int64 in a Lt/Gt comparison (DEC). Several are
# accepted by Python's int() or by strconv.ParseInt alone, which is why they are here.
UNPARSABLE = [
    pytest.param("+5", id="plus-sign"),  # ParseInt accepts it; IsDecimalInteger does not
    pytest.param("+0", id="plus-zero"),
    pytest.param("007", id="leading-zeros"),  # ParseInt reads 7; IsDecimalInteger rejects
    pytest.param("-05", id="negative-leading-zero"),
    pytest.param("-0", id="negative-zero"),
    pytest.param("00", id="double-zero"),
    pytest.param(" 5", id="leading-space"),  # Python int() strips whitespace
    pytest.param("5 ", id="trailing-space"),
    pytest.param("5\n", id="trailing-newline"),
    pytest.param("1_0", id="underscore"),  # Python int() reads 10
    pytest.param("0x10", id="hex-prefix"),
    pytest.param("1e3", id="exponent"),
    pytest.param("1.0", id="decimal-point"),
    pytest.param("", id="empty"),
    pytest.param("-", id="bare-minus"),
    pytest.param("\uff15", id="fullwidth-digit"),  # Python int() reads 5
    pytest.param("\u0665", id="arabic-indic-digit"),  # Python int() reads 5
    pytest.param("\u2212" + "5", id="unicode-minus"),
    pytest.param("9223372036854775808", id="int64-overflow"),  # ParseInt: value out of range
    pytest.param("-9223372036854775809", id="int64-underflow"),
    pytest.param("99999999999999999999", id="far-overflow"),
]


@pytest.mark.parametrize("value", UNPARSABLE)
@pytest.mark.parametrize("operator", ["Lt", "Gt"])
def test_unparsable_toleration_value_never_tolerates(value: str, operator: str) -> None:
    # Against a taint value on the "right" side for either reading of ``value``
    # (below any plausible number for Lt, above for Gt), so only parsing can say no.
    taint_value = INT64_MIN if operator == "Lt" else INT64_MAX
    taint = Taint("k", "NoSchedule", taint_value)
    assert tolerates(Toleration("k", operator, value, "NoSchedule"), taint) is False, DEC


@pytest.mark.parametrize("value", UNPARSABLE)
@pytest.mark.parametrize("operator", ["Lt", "Gt"])
def test_unparsable_taint_value_never_tolerated(value: str, operator: str) -> None:
    toleration_value = INT64_MAX if operator == "Lt" else INT64_MIN
    toleration = Toleration("k", operator, toleration_value, "NoSchedule")
    assert tolerates(toleration, Taint("k", "NoSchedule", value)) is False, DEC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("7", 7),
        ("-7", -7),
        ("950", 950),
        ("-100", -100),
        (INT64_MAX, 2**63 - 1),
        (INT64_MIN, -(2**63)),
    ],
)
def test_parse_go_int64_canonical_values(text: str, expected: int) -> None:
    assert parse_go_int64(text) == expected, DEC


@pytest.mark.parametrize("value", UNPARSABLE)
def test_parse_go_int64_rejects(value: str) -> None:
    assert parse_go_int64(value) is None, DEC


def test_only_noschedule_and_noexecute_filter() -> None:
    # pkg/scheduler/framework/plugins/tainttoleration: the filter looks only at
    # NoSchedule and NoExecute taints; PreferNoSchedule is for scoring.
    assert frozenset({"NoSchedule", "NoExecute"}) == FILTERED_EFFECTS


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        pytest.param((), False, id="no-tolerations"),
        pytest.param((Toleration("other", "Exists"),), False, id="none-matches"),
        pytest.param(
            (Toleration("other", "Exists"), Toleration("k", "Equal", "v")), True, id="second-matches"
        ),
        pytest.param((Toleration("k", "Equal", "x"), Toleration("", "Exists")), True, id="wildcard-matches"),
    ],
)
def test_tolerated_by_any(tolerations: tuple[Toleration, ...], expected: bool) -> None:
    # component-helpers/scheduling/corev1 TolerationsTolerateTaint: any one toleration suffices.
    assert tolerated_by_any(Taint("k", "NoSchedule", "v"), tolerations) is expected


# --- properties over the whole int64 range ---------------------------------------------

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(INT64)
def test_every_int64_in_canonical_form_parses(value: int) -> None:
    assert parse_go_int64(str(value)) == value, DEC


@given(st.one_of(st.integers(max_value=-(2**63) - 1), st.integers(min_value=2**63)))
def test_outside_int64_never_parses(value: int) -> None:
    assert parse_go_int64(str(value)) is None, DEC


@given(st.text(alphabet=st.sampled_from("0123456789+-_ x\u0665\uff15"), max_size=22))
def test_only_canonical_text_parses(text: str) -> None:
    # IsDecimalInteger accepts exactly the canonical spelling of the number.
    value = parse_go_int64(text)
    assert value is None or str(value) == text, DEC


@given(INT64, INT64)
def test_lt_gt_compare_taint_against_toleration(taint_value: int, toleration_value: int) -> None:
    taint = Taint("k", "NoSchedule", str(taint_value))
    assert tolerates(Toleration("k", "Lt", str(toleration_value)), taint) is (
        taint_value < toleration_value
    ), TT
    assert tolerates(Toleration("k", "Gt", str(toleration_value)), taint) is (
        taint_value > toleration_value
    ), TT
