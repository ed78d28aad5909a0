"""Quantities as the DRA allocator handles them: integer values in, canonical strings out.

The allocator's capacity arithmetic works on ``Quantity.Value()`` (an integer, rounded up away
from zero like Go's), and results carry quantities as the API server would print them: binary
suffixes for values written with one (``16Gi``), decimal ones otherwise (``100``, ``2k``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final

from hami_protocol.errors import RequestError
from hami_protocol.request.quantity import json_quantity, to_int_ceil

__all__ = ["QuantityError", "exact_value", "format_quantity", "is_binary", "quantity_value"]

_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES: Final = ("", "k", "M", "G", "T", "P", "E")


class QuantityError(ValueError):
    """A field that must be a quantity is not one."""


def quantity_value(raw: object, *, where: str) -> int:
    """``Quantity.Value()`` of a decoded JSON quantity; :class:`QuantityError` names ``where``."""
    try:
        return to_int_ceil(json_quantity(raw.strip() if isinstance(raw, str) else raw, key=where))
    except RequestError as exc:
        raise QuantityError(f"{where}: {raw!r} is not a quantity") from exc


def exact_value(raw: object, *, where: str) -> Fraction:
    """The exact value of a decoded JSON quantity (CEL compares these, not rounded ones)."""
    try:
        return json_quantity(raw.strip() if isinstance(raw, str) else raw, key=where)
    except RequestError as exc:
        raise QuantityError(f"{where}: {raw!r} is not a quantity") from exc


def is_binary(raw: object) -> bool:
    """Whether a quantity was written with a binary suffix (its canonical form keeps one)."""
    return isinstance(raw, str) and raw.strip().endswith("i")


def format_quantity(value: int, *, binary: bool) -> str:
    """The canonical string of an integer quantity (``resource.Quantity.String()``).

    Binary format keeps the largest power of 1024 that divides the value exactly, and falls
    back to decimal below 1024 (``1536`` stays ``1536``, ``4294967296`` is ``4Gi``); decimal
    format keeps the largest power of 1000 (``2000`` is ``2k``).
    """
    if binary and abs(value) >= 1024:
        return _scaled(value, 1024, _BINARY_SUFFIXES)
    return _scaled(value, 1000, _DECIMAL_SUFFIXES)


def _scaled(value: int, base: int, suffixes: tuple[str, ...]) -> str:
    power = 0
    while value != 0 and value % base == 0 and power < len(suffixes) - 1:
        value //= base
        power += 1
    return f"{value}{suffixes[power]}"
