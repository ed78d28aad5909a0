"""Quantities as decoded JSON bodies hold them: strings, numbers, whitespace."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.objects.quantities import read_quantity, stringify
from hami_protocol.errors import RequestError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("1Gi", Fraction(2**30)),
        (" 2 ", Fraction(2)),  # Quantity.UnmarshalJSON trims whitespace
        (2, Fraction(2)),
        (2.0, Fraction(2)),
        (0.5, Fraction(1, 2)),
        ("1e3", Fraction(1000)),
    ],
)
def test_read_quantity(value: object, expected: Fraction) -> None:
    assert read_quantity(value) == expected


@pytest.mark.parametrize("value", [None, True, "lots", "", "1 Gi", [], {"a": 1}])
def test_read_quantity_refuses_non_quantities(value: object) -> None:
    with pytest.raises(RequestError, match="cpu"):
        read_quantity(value, key="cpu")


def test_stringify_keeps_strings_and_writes_numbers_as_stored() -> None:
    given_strings = {"cpu": "1", "memory": "1Gi"}
    assert stringify(given_strings) is given_strings
    assert stringify({"cpu": 1, "memory": "1Gi", "x": 1.5, "y": 2.0}) == {
        "cpu": "1",
        "memory": "1Gi",
        "x": "1.5",
        "y": "2",
    }
    assert stringify(None) is None


@given(st.one_of(st.text(max_size=20), st.integers(), st.floats(), st.none(), st.booleans()))
def test_garbage_gives_a_value_or_request_error(value: object) -> None:
    try:
        result = read_quantity(value)
    except RequestError:
        return
    assert isinstance(result, Fraction)
