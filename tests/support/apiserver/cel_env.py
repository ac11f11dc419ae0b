"""CEL as kube-apiserver's admission plugins evaluate it, on the ``cel`` package (PyPI
common-expression-language 0.10, cel-rust's bindings).

The admission environment (staging/src/k8s.io/apiserver/pkg/cel/environment/base.go)
has cel-go's standard library and extensions plus Kubernetes' own libraries
(staging/src/k8s.io/apiserver/pkg/cel/library/). The ``cel`` package brings the
standard library and, in ``cel.stdlib``, the strings, lists, math, sets and base64
extensions; this module adds the Kubernetes functions the shipped policies use:

- ``jsonpatch.escapeKey(s)`` (library/jsonpatch.go): RFC 6901's escaping of one
  reference token, ``~`` to ``~0`` and ``/`` to ``~1``.
- The quantity library (library/quantity.go), as far as comparing goes:
  ``quantity(s)``, ``isQuantity(s)``, and the members ``compareTo``, ``isGreaterThan``
  and ``isLessThan``. Values are parsed by ``policies/quantity.py`` ``parse_quantity``
  (resource.ParseQuantity's grammar and rounding). The ``cel`` package cannot carry a
  value of a type of its own, so a Quantity is a one-key map holding its exact value as
  a canonical decimal string: ``==`` then compares two quantities by value, as
  ``Quantity.Equal`` does (``quantity('1Gi') == quantity('1024Mi')``). A string that
  is not a quantity makes ``quantity()`` fail with resource.ParseQuantity's error text
  (``ErrFormatWrong``, or ``ErrSuffix`` for a well-formed string with an unknown
  suffix); a member called on something else fails with cel-go's ``no such overload``.
  Not provided: ``sign``, ``asInteger``, ``isInteger``, ``asApproximateFloat``,
  ``add``, ``sub``.

The package calls a method ``a.f(b)`` as the registered function ``f(a, b)``.

Anything else the package lacks (``authorizer``, ``string()`` of a bool, the rest of
the quantity library, the IP, CIDR, URL, regex and semver libraries...) raises
``UnsupportedExpression`` when an expression needs it, which the API server answers
with a 500 naming the expression: never a decision a real server would not make.

The one rewrite: the ``cel`` package cannot construct a message (``JSONPatch{op: 'add',
path: '/x', value: 1}`` fails with "Found struct JSONPatch, feature not enabled"), which
a MutatingAdmissionPolicy's JSONPatch expression builds
(.../admission/plugin/policy/mutating/patch/json_patch.go). Before such an expression
is compiled, each ``JSONPatch{...}`` literal (braces balanced, string literals and
comments respected) becomes the map literal ``{'op': ..., 'path': ..., 'value': ...}``,
its field names (``op``, ``path``, ``value``, ``from``; any other is refused, as cel-go
refuses an unknown field) quoted and nothing else touched. The mutating plugin reads
the resulting maps as the JSONPatch values they stand for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

import cel
from cel.stdlib import STDLIB_FUNCTIONS

from policies.quantity import QuantityError, parse_quantity


class PolicyError(ValueError):
    """A policy or binding the fake API server cannot load, naming what and why."""


class UnsupportedExpression(PolicyError):
    """An expression the ``cel`` package cannot evaluate though a real server would
    (a function or variable it does not provide)."""


class CelEvaluationError(Exception):
    """An error a Kubernetes library function returns, worded as cel-go's."""


# ----- the Kubernetes library functions --------------------------------------------

_QUANTITY = "@kubernetes.io/quantity"
# resource/quantity.go splitREString, which ErrFormatWrong quotes.
_SPLIT_RE = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def _escape_key(key: Any) -> str:
    if not isinstance(key, str):
        raise CelEvaluationError("no such overload")
    # strings.NewReplacer("/", "~1", "~", "~0") replaces in one pass; "~" first here
    # does the same, the "~" of each "~1" written after it being left alone.
    return key.replace("~", "~0").replace("/", "~1")


def _canonical(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def _quantity(text: Any) -> dict[str, str]:
    if not isinstance(text, str):
        raise CelEvaluationError("no such overload")
    try:
        value = parse_quantity(text)
    except QuantityError:
        if text and re.fullmatch(_SPLIT_RE, text):
            raise CelEvaluationError("unable to parse quantity's suffix") from None
        raise CelEvaluationError(f"quantities must match the regular expression '{_SPLIT_RE}'") from None
    return {_QUANTITY: _canonical(value)}


def _is_quantity(text: Any) -> bool:
    if not isinstance(text, str):
        raise CelEvaluationError("no such overload")
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _value_of(quantity: Any) -> Decimal:
    if not (isinstance(quantity, dict) and list(quantity) == [_QUANTITY]):
        raise CelEvaluationError("no such overload")
    return Decimal(quantity[_QUANTITY])


def _compare_to(left: Any, right: Any) -> int:
    a, b = _value_of(left), _value_of(right)
    return (a > b) - (a < b)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **STDLIB_FUNCTIONS,
    "jsonpatch.escapeKey": _escape_key,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isGreaterThan": lambda left, right: _compare_to(left, right) == 1,
    "isLessThan": lambda left, right: _compare_to(left, right) == -1,
}


# ----- the JSONPatch rewrite --------------------------------------------------------

JSON_PATCH_FIELDS = ("op", "path", "value", "from")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# CEL string and bytes literals: an optional raw and/or bytes prefix, then one of four quotes.
_STRING_START = re.compile(r"(?:[rR][bB]?|[bB][rR]?)?('''|\"\"\"|'|\")")


def _string_end(text: str, match: re.Match[str]) -> int:
    quote = match.group(1)
    raw = "r" in match.group(0)[: -len(quote)].lower()
    index = match.end()
    while index < len(text):
        if not raw and text[index] == "\\":
            index += 2
            continue
        if text.startswith(quote, index):
            return index + len(quote)
        index += 1
    return len(text)


def rewrite_json_patch_literals(expression: str) -> str:
    """``JSONPatch{op: 'add', ...}`` as the map literal ``{'op': 'add', ...}`` (see the
    module docstring); ValueError for a field JSONPatch does not have."""
    out: list[str] = []
    stack: list[str] = []  # "S" for a JSONPatch literal's brace, else the bracket
    field_next = False  # a field name of the innermost JSONPatch literal may come next
    struct_next = False  # the next "{" opens a JSONPatch literal
    last = ""  # the last character written that is not whitespace
    index = 0
    while index < len(expression):
        char = expression[index]
        if char.isspace():
            out.append(char)
            index += 1
            continue
        if expression.startswith("//", index):
            end = expression.find("\n", index)
            end = len(expression) if end < 0 else end
            out.append(expression[index:end])
            index = end
            continue
        string = _STRING_START.match(expression, index)
        if string is not None:
            end = _string_end(expression, string)
            out.append(expression[index:end])
            index, last, field_next = end, expression[end - 1], False
            continue
        identifier = _IDENTIFIER.match(expression, index)
        if identifier is not None:
            word, end = identifier.group(), identifier.end()
            following = end
            while following < len(expression) and expression[following].isspace():
                following += 1
            next_char = expression[following] if following < len(expression) else ""
            if field_next and stack and stack[-1] == "S" and next_char == ":":
                if word not in JSON_PATCH_FIELDS:
                    raise ValueError(f"JSONPatch has no field {word!r} (its fields: op, path, value, from)")
                out.append(f"'{word}'")
            elif word == "JSONPatch" and last != "." and next_char == "{":
                # Dropped with the whitespace after it: the brace opens a map literal.
                end, struct_next = following, True
            else:
                out.append(word)
            index, field_next = end, False
            if not struct_next:
                last = word[-1]
            continue
        if char == "{":
            stack.append("S" if struct_next else "{")
            field_next, struct_next = stack[-1] == "S", False
        elif char in "([":
            stack.append(char)
            field_next = False
        elif char in ")]}":
            if stack:
                stack.pop()
            field_next = False
        else:
            field_next = char == "," and bool(stack) and stack[-1] == "S"
        out.append(char)
        last = char
        index += 1
    return "".join(out)


# ----- compiling and evaluating ---------------------------------------------------------

_FUNCTION_ERROR = re.compile(
    r"^Function '[^']*' error: Python function call failed: (\w+): (.*)\. "
    r"Check function arguments and their types\.$",
    re.DOTALL,
)


def compile_expression(expression: str, *, json_patch: bool = False) -> Any:
    """A program of the ``cel`` package; ``json_patch``: a mutation's JSONPatch
    expression, rewritten first. ValueError when it cannot be compiled."""
    text = rewrite_json_patch_literals(expression) if json_patch else expression
    return cel.compile(text)


@lru_cache(maxsize=512)
def compiled(expression: str) -> Any:
    """``compile_expression`` of an expression stored in an object the fake reads at
    admission time (a webhook's matchConditions), compiled once."""
    return compile_expression(expression)


def execute(program: Any, expression: str, context: Mapping[str, Any]) -> Any:
    """Evaluate ``program`` (compiled from ``expression``) over ``context``: its value,
    or the evaluation error as the package raises it (KeyError for a missing map key,
    CelEvaluationError for a Kubernetes function's error); UnsupportedExpression where
    the package lacks a name the expression uses."""
    try:
        return program.execute(cel.Context(dict(context), functions=FUNCTIONS))
    except RuntimeError as exc:
        text = str(exc)
        if text.startswith("Undefined variable or function"):
            raise UnsupportedExpression(
                f"the cel package the fake API server evaluates CEL with cannot evaluate {expression!r}: {exc}"
            ) from exc
        failed = _FUNCTION_ERROR.match(text)
        if failed is not None and failed.group(1) == CelEvaluationError.__name__:
            raise CelEvaluationError(failed.group(2)) from None
        raise


def error_text(exc: Exception, variable_errors: Mapping[str, str] | None = None) -> str:
    """An evaluation error as cel-go words it (as far as the ``cel`` package lets)."""
    if isinstance(exc, KeyError) and exc.args:
        key = exc.args[0]
        if isinstance(key, str) and variable_errors and key in variable_errors:
            # An erroring variable is left out of ``variables``, so using it is a
            # missing key named after it.
            return variable_errors[key]
        return f"no such key: {key}"
    return str(exc)
