"""Kubernetes ``resource.Quantity`` parsing, as pure functions over exact values.

A quantity is ``<sign><number><suffix>``: an optional ``+``/``-``, digits with an optional
fraction (``1``, ``1.5``, ``1.``, ``.5`` — at least one digit), then at most one suffix:
binary ``Ki Mi Gi Ti Pi Ei`` (powers of 1024), decimal ``n u m k M G T P E`` (powers of 1000),
or a decimal exponent ``e``/``E`` followed by a signed integer (``1e3``, ``12e-3``).  Nothing
else is allowed: no whitespace, no second sign, no second dot, no bare suffix (``Gi``).

Values are returned as :class:`fractions.Fraction`, so ``1.5Gi`` is exactly ``1610612736`` and
``100m`` is exactly ``1/10``; no float ever touches a quantity.

Two deliberate limits keep arithmetic bounded on hostile input: a quantity longer than
:data:`MAX_QUANTITY_LENGTH` characters, or with a decimal exponent beyond
±:data:`MAX_EXPONENT`, is rejected.  The API server hands out canonical quantities of a few
dozen characters, so no real pod comes near either limit.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

from hami_protocol.errors import RequestError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_EXPONENT",
    "MAX_QUANTITY_LENGTH",
    "as_integer",
    "json_quantity",
    "parse_int_strict",
    "parse_quantity",
    "to_int_ceil",
    "to_milli",
]

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
MAX_QUANTITY_LENGTH: Final = 128
MAX_EXPONENT: Final = 1000

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

# The exponent alternative comes first so that ``1E3`` is 1000 and not "1 exa, then junk".
_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>[eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?",
    re.ASCII,
)
_INT_RE: Final = re.compile(r"[+-]?[0-9]+", re.ASCII)


def parse_quantity(text: str, *, key: str = "") -> Fraction:
    """Parse a quantity string into its exact value.

    ``key`` names the resource for the error message.  Raises :class:`RequestError` for
    anything that is not a quantity.
    """
    if not isinstance(text, str):
        raise RequestError(key, text, "quantity must be a string")
    if len(text) > MAX_QUANTITY_LENGTH:
        raise RequestError(key, text, f"quantity longer than {MAX_QUANTITY_LENGTH} characters")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise RequestError(key, text, "not a quantity (expected e.g. 1, 1.5, 500m, 16Gi, 1e3)")
    whole, frac = match["int"], match["frac"] or ""
    if not whole and not frac:
        raise RequestError(key, text, "quantity has no digits")
    mantissa = Fraction(int((whole or "0") + frac), 10 ** len(frac))
    value = mantissa * _suffix_multiplier(match["suffix"] or "", text=text, key=key)
    return -value if match["sign"] == "-" else value


def _suffix_multiplier(suffix: str, *, text: str, key: str) -> Fraction:
    if suffix in _BINARY:
        return Fraction(1024 ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return Fraction(10) ** _DECIMAL[suffix]
    if not suffix:
        return Fraction(1)
    exponent = int(suffix[1:])
    if abs(exponent) > MAX_EXPONENT:
        raise RequestError(key, text, f"decimal exponent beyond ±{MAX_EXPONENT}")
    return Fraction(10) ** exponent


def json_quantity(raw: object, *, key: str = "") -> Fraction:
    """A quantity as a decoded JSON body holds it: a string, or a number a client sent as one.

    Raises :class:`RequestError` naming ``key`` for anything else (booleans, null, objects,
    non-finite numbers) or a string that is not a quantity.
    """
    if isinstance(raw, str):
        return parse_quantity(raw, key=key)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return Fraction(raw)
    if isinstance(raw, float) and math.isfinite(raw):
        return parse_quantity(repr(raw), key=key)
    raise RequestError(key, raw, "quantity must be a string or a number")


def to_int_ceil(value: Fraction) -> int:
    """Round to an integer away from zero, like Go's ``Quantity.Value()``.

    ``1.2`` → 2, ``-1.2`` → -2, ``3`` → 3.
    """
    magnitude = -(-abs(value.numerator) // value.denominator)
    return magnitude if value >= 0 else -magnitude


def to_milli(value: Fraction) -> int:
    """The value in thousandths, rounded away from zero, like Go's ``Quantity.MilliValue()``."""
    return to_int_ceil(value * 1000)


def as_integer(value: Fraction) -> int | None:
    """The value as an int when it is a whole number that fits int64, else ``None``.

    This is Go's ``Quantity.AsInt64()`` applied to the canonical form the API server stores:
    ``2000m`` and ``2.0`` are the integer 2, ``1500m`` and ``0.5`` are not integers.
    """
    if value.denominator != 1 or not -INT64_MAX - 1 <= value.numerator <= INT64_MAX:
        return None
    return value.numerator


def parse_int_strict(text: str, *, key: str = "") -> int:
    """Parse a plain decimal integer (optional sign, ASCII digits, nothing else) within int64.

    For fields HAMi reads with ``strconv`` rather than as quantities: ``"4096"`` is fine,
    ``"4Ki"``, ``"1.0"``, ``" 1"`` and ``""`` are :class:`RequestError`.
    """
    if not isinstance(text, str):
        raise RequestError(key, text, "integer must be a string")
    if len(text) > MAX_QUANTITY_LENGTH or _INT_RE.fullmatch(text) is None:
        raise RequestError(key, text, "not a plain integer")
    number = int(text)
    if not -INT64_MAX - 1 <= number <= INT64_MAX:
        raise RequestError(key, text, "integer out of int64 range")
    return number
