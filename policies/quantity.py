"""Kubernetes resource quantities, compared as the API server compares them.

Pod Overhead is a ``ResourceList`` (resource name -> ``resource.Quantity``), and the
RuntimeClass admission plugin compares the pod's with the class's by
``apiequality.Semantic.DeepEqual``, whose Quantity rule is ``a.Cmp(b) == 0``: by value,
not by spelling. ``1Gi`` equals ``1024Mi``, ``1`` equals ``1000m``, ``0.5`` equals
``500m``. ``parse_quantity`` gives that value exactly (a ``Decimal``, no floats).

Grammar and rounding mirror staging/src/k8s.io/apimachinery/pkg/api/resource/
quantity.go (``ParseQuantity``; read for its behaviour, not copied):

    <quantity>     ::= <sign><digits>[.<digits>]<suffix> | <sign>.<digits><suffix>
    <suffix>       ::= Ki | Mi | Gi | Ti | Pi | Ei          (binary, powers of 1024)
                     | n | u | m | "" | k | M | G | T | P | E  (decimal)
                     | e<sign><digits> | E<sign><digits>    (decimal exponent)

and a value more precise than 1n is rounded up (away from zero) to the next nano, as
``ParseQuantity`` rounds to ``Nano`` with ``inf.RoundUp``. Not reproduced: the cap of
values beyond 2^63-1 of their scale, which no overhead comes near.

The python ``kubernetes`` client's ``utils.parse_quantity`` does the same job, but it is
not a dependency of this project (kubernetes-asyncio is, and pure modules must not
import it), and it accepts suffixes Kubernetes rejects; 40 lines here are exact and
cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_UP, Context, Decimal
from typing import Final

__all__ = ["QuantityError", "parse_quantity", "resource_lists_equal"]


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity; ``reason`` says why without repeating the
    text (for a message that shows it already: ``Invalid value: "lots": ...``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


_NOT_A_QUANTITY: Final = "not a quantity (e.g. 250m, 0.5, 160Mi, 1Gi)"
_EXPONENT: Final = "exponent out of range"


_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]?))"
)
_NANO: Final = Decimal("1e-9")
# Enough digits for any quantity quantity.go accepts (int64 mantissas, exponents to 18).
_EXACT: Final = Context(prec=80)


def parse_quantity(text: str) -> Decimal:
    """The value of a quantity string, exactly. Raises QuantityError."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"{text!r} is {_NOT_A_QUANTITY}", _NOT_A_QUANTITY)
    number = Decimal(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > 1000:
            # quantity.go rejects exponents it cannot scale; this bound keeps Decimal sane.
            raise QuantityError(f"{text!r}: {_EXPONENT}", _EXPONENT)
        value = number.scaleb(exponent, _EXACT)
    elif match["suffix"] in _BINARY:
        value = _EXACT.multiply(number, Decimal(1024) ** _BINARY[match["suffix"]])
    else:
        value = number.scaleb(_DECIMAL[match["suffix"]], _EXACT)
    if value.as_tuple().exponent < -9:  # type: ignore[operator]
        value = value.quantize(_NANO, rounding=ROUND_UP, context=_EXACT)
    return value


def resource_lists_equal(left: Mapping[str, str] | None, right: Mapping[str, str] | None) -> bool:
    """Two ResourceLists as ``apiequality.Semantic.DeepEqual`` compares them: the same
    resource names, each quantity equal by value; None and an empty list are equal (its
    forked reflect.DeepEqual treats nil and empty maps alike). Raises QuantityError."""
    left = left or {}
    right = right or {}
    if left.keys() != right.keys():
        return False
    return all(parse_quantity(left[name]) == parse_quantity(right[name]) for name in left)
