"""Resource quantities as they appear in decoded JSON bodies, read through
:mod:`hami_protocol.request.quantity`.

A client may send a quantity as a JSON number (``"cpu": 1``); the API server stores it as the
string a ``resource.Quantity`` serializes to (``"1"``), and, like ``Quantity.UnmarshalJSON``,
ignores surrounding whitespace.  Everything else about quantities is the protocol's.
"""

from __future__ import annotations

from fractions import Fraction

from hami_protocol.request.quantity import json_quantity

__all__ = ["quantity_text", "read_quantity", "stringify"]


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
