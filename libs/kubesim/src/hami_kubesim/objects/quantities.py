"""Resource quantities as they appear in decoded JSON bodies, read through
:mod:`hami_protocol.request.quantity`.

A client may send a quantity as a JSON number (``"cpu": 1``); the API server stores it as the
string a ``resource.Quantity`` serializes to (``"1"``), and, like ``Quantity.UnmarshalJSON``,
ignores surrounding whitespace.  Everything else about quantities is the protocol's.
"""

from __future__ import annotations

import re
from fractions import Fraction

from hami_protocol.errors import RequestError
from hami_protocol.request.quantity import json_quantity

__all__ = ["canonical_quantity", "format_quantity", "quantity_text", "read_quantity", "stringify"]


def quantity_text(value: object) -> object:
    """A JSON number given where a quantity belongs, written as the string the API server would
    store (``1`` -> ``"1"``); strings are kept exactly as given."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def stringify(resources: object) -> object:
    """``resources`` with numeric quantities written as strings; the same object if none are."""
    if not isinstance(resources, dict) or all(isinstance(v, str) for v in resources.values()):
        return resources
    return {k: quantity_text(v) for k, v in resources.items()}


def read_quantity(value: object, *, key: str = "") -> Fraction:
    """The exact value of a quantity taken from a decoded JSON body (a string or a number).

    Raises :class:`hami_protocol.errors.RequestError` (naming ``key``) when it is not one.
    """
    return json_quantity(value.strip() if isinstance(value, str) else value, key=key)


_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}
_DECIMAL_SUFFIXES[18] = "E"
_EXPONENT = re.compile(r"[eE][+-]?[0-9]+$")


def canonical_quantity(value: object) -> str | None:
    """``resource.Quantity.String()`` of a quantity from a JSON body (``"1024Mi"`` ->
    ``"1Gi"``, ``"0.5"`` -> ``"500m"``, ``1`` -> ``"1"``); ``None`` when it is not one."""
    try:
        exact = read_quantity(value)
    except RequestError:
        return None
    return format_quantity(exact, like=value.strip() if isinstance(value, str) else str(value))


def format_quantity(amount: Fraction, *, like: str = "") -> str:
    """``amount`` as ``Quantity.String()`` prints it in the format of the quantity text
    ``like``: binary (``Ki`` .. ``Ei``) unless below 1024 or fractional, decimal exponent
    (``1e3``), otherwise decimal SI.  Precision finer than nano rounds up, as ``Quantity``
    does."""
    sign, amount = ("-", -amount) if amount < 0 else ("", amount)
    if amount == 0:
        return "0"
    if like.endswith(_BINARY_SUFFIXES[1:]) and amount >= 1024 and amount.denominator == 1:
        number, power = int(amount), 0
        while power < 6 and number % 1024 == 0:
            number, power = number // 1024, power + 1
        return f"{sign}{number}{_BINARY_SUFFIXES[power]}"
    nanos = -(-amount * 10**9 // 1)  # ceil to nano precision
    exponent = -9
    while nanos % 1000 == 0 and exponent < 18:
        nanos, exponent = nanos // 1000, exponent + 3
    if _EXPONENT.search(like):
        return f"{sign}{nanos}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{nanos}{_DECIMAL_SUFFIXES[exponent]}"
