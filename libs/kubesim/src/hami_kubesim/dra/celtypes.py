"""The Kubernetes CEL extension types the DRA environment exposes: Quantity and Semver.

In Kubernetes CEL a device capacity is a ``Quantity`` (library ``quantity``: ``quantity("8Gi")``,
``isQuantity``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``add``, ``sub``, ``sign``,
``asInteger``, ``isInteger``, ``asApproximateFloat``) and a ``version`` attribute a semantic
version (library ``semver``: ``semver("1.2.3")``, ``isSemver``, ``compareTo``,
``isGreaterThan``, ``isLessThan``, ``major``, ``minor``, ``patch``).  cel-python dispatches a
method call ``x.f(y)`` to the global function ``f(x, y)``, so functions both libraries share
(``compareTo`` and friends) dispatch on the receiver's type.  Quantities compare exactly
(``1000m`` equals ``1``); ``<`` between them is, as upstream, no overload.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from functools import total_ordering
from typing import Any, Final

from celpy import celtypes

from hami_kubesim.dra.quantities import QuantityError, exact_value

__all__ = ["FUNCTIONS", "Quantity", "Semver", "parse_semver"]

_SEMVER: Final = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)


class Quantity:
    """A ``resource.Quantity`` value inside CEL."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            raise TypeError(f"no such overload: Quantity == {type(other).__name__}")
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


@total_ordering
class Semver:
    """A semantic version 2.0.0 (build metadata ignored in comparisons)."""

    __slots__ = ("major", "minor", "patch", "pre")

    def __init__(self, major: int, minor: int, patch: int, pre: tuple[str, ...]) -> None:
        self.major, self.minor, self.patch, self.pre = major, minor, patch, pre

    def _key(self) -> tuple[Any, ...]:
        # A pre-release sorts before its release; numeric identifiers before alphanumeric ones.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, not self.pre, pre)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            raise TypeError(f"no such overload: Semver == {type(other).__name__}")
        return self._key() == other._key()

    def __lt__(self, other: Semver) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def parse_semver(text: str) -> Semver | None:
    match = _SEMVER.fullmatch(text)
    if match is None:
        return None
    pre = tuple(match[4].split(".")) if match[4] else ()
    return Semver(int(match[1]), int(match[2]), int(match[3]), pre)


def _quantity(text: object) -> Quantity:
    try:
        return Quantity(exact_value(str(text), where="quantity()"))
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc


def _is_quantity(text: object) -> celtypes.BoolType:
    try:
        exact_value(str(text), where="isQuantity()")
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(text: object) -> Semver:
    version = parse_semver(str(text))
    if version is None:
        raise ValueError(f"could not parse {text!r} as semver")
    return version


def _is_semver(text: object) -> celtypes.BoolType:
    return celtypes.BoolType(parse_semver(str(text)) is not None)


def _compare_to(a: object, b: object) -> celtypes.IntType:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return celtypes.IntType((a.value > b.value) - (a.value < b.value))
    if isinstance(a, Semver) and isinstance(b, Semver):
        return celtypes.IntType((a > b) - (a < b))
    raise TypeError("compareTo needs two quantities or two semvers")


def _is_greater(a: object, b: object) -> celtypes.BoolType:
    return celtypes.BoolType(_compare_to(a, b) > 0)


def _is_less(a: object, b: object) -> celtypes.BoolType:
    return celtypes.BoolType(_compare_to(a, b) < 0)


def _operand(value: object) -> Fraction:
    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    raise TypeError("a quantity operand must be a quantity or an int")


def _add(a: object, b: object) -> Quantity:
    if not isinstance(a, Quantity):
        raise TypeError("add() is a quantity method")
    return Quantity(a.value + _operand(b))


def _sub(a: object, b: object) -> Quantity:
    if not isinstance(a, Quantity):
        raise TypeError("sub() is a quantity method")
    return Quantity(a.value - _operand(b))


def _as_quantity(a: object) -> Quantity:
    if not isinstance(a, Quantity):
        raise TypeError("not a quantity")
    return a


def _sign(a: object) -> celtypes.IntType:
    value = _as_quantity(a).value
    return celtypes.IntType((value > 0) - (value < 0))


def _is_integer(a: object) -> celtypes.BoolType:
    value = _as_quantity(a).value
    return celtypes.BoolType(value.denominator == 1 and abs(value.numerator) < 2**63)


def _as_integer(a: object) -> celtypes.IntType:
    value = _as_quantity(a).value
    if value.denominator != 1 or abs(value.numerator) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(value.numerator)


def _as_float(a: object) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_as_quantity(a).value))


def _version_part(name: str) -> Callable[[object], celtypes.IntType]:
    def part(a: object) -> celtypes.IntType:
        if not isinstance(a, Semver):
            raise TypeError(f"{name}() is a semver method")
        return celtypes.IntType(getattr(a, name))

    return part


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater,
    "isLessThan": _is_less,
    "add": _add,
    "sub": _sub,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_float,
    "major": _version_part("major"),
    "minor": _version_part("minor"),
    "patch": _version_part("patch"),
}
"""Extension functions handed to every compiled selector."""
