"""Kubernetes resource quantities (``100m``, ``1Gi``, ``2e3``) as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)


def parse_quantity(value: object) -> Decimal | None:
    """The quantity's value, or ``None`` if ``value`` is not a valid quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if m is None:
        return None
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        return None
    if m.group(2):
        return number * (Decimal(10) ** int(m.group(2)[1:]))
    return number * _SUFFIX[m.group(3) or ""]


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
