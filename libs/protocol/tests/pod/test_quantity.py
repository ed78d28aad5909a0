"""Quantity parsing: the Kubernetes grammar, exact values, rounding helpers, strict integers."""

from __future__ import annotations

import re
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.errors import RequestError
from hami_protocol.request.quantity import (
    INT32_MAX,
    MAX_QUANTITY_LENGTH,
    as_integer,
    parse_int_strict,
    parse_quantity,
    to_int_ceil,
    to_milli,
)

F = Fraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", F(0)),
        ("1", F(1)),
        ("007", F(7)),
        ("+1", F(1)),
        ("-1", F(-1)),
        ("1.5", F(3, 2)),
        (".5", F(1, 2)),
        ("1.", F(1)),
        ("-.5", F(-1, 2)),
        ("500m", F(1, 2)),
        ("2000m", F(2)),
        ("1n", F(1, 10**9)),
        ("1u", F(1, 10**6)),
        ("1k", F(1000)),
        ("1M", F(10**6)),
        ("1G", F(10**9)),
        ("1T", F(10**12)),
        ("1P", F(10**15)),
        ("1E", F(10**18)),
        ("1Ki", F(1024)),
        ("1Mi", F(1024**2)),
        ("1Gi", F(1024**3)),
        ("1Ti", F(1024**4)),
        ("1Pi", F(1024**5)),
        ("1Ei", F(1024**6)),
        ("1.5Gi", F(1610612736)),
        ("16Gi", F(17179869184)),
        ("16.0Gi", F(17179869184)),
        ("1e3", F(1000)),
        ("1E3", F(1000)),
        ("1e+3", F(1000)),
        ("12e-3", F(12, 1000)),
        ("1.5e1", F(15)),
        ("-1e-1", F(-1, 10)),
        ("1.e3", F(1000)),
        ("0.1n", F(1, 10**10)),
    ],
)
def test_valid_quantities(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".",
        "-",
        "+",
        "Gi",
        "m",
        "1.5.2",
        "--1",
        "+-1",
        "1 Gi",
        " 1",
        "1 ",
        "1\n",
        "1K",
        "1ki",
        "1gi",
        "1e",
        "1e+",
        "1e1.5",
        "1Gi1",
        "1ii",
        "e3",
        "1E3i",
        "1EE",
        "0x10",
        "1_000",
        "inf",
        "nan",
        "\uff11",  # FULLWIDTH DIGIT ONE is a digit to str.isdigit, not to Kubernetes
        "1\u0660",  # ARABIC-INDIC DIGIT ZERO
        "1,5",
    ],
)
def test_invalid_quantities(text: str) -> None:
    with pytest.raises(RequestError):
        parse_quantity(text)


def test_error_names_the_resource_and_quotes_the_value() -> None:
    with pytest.raises(RequestError) as caught:
        parse_quantity("16 Gi", key="nvidia.com/gpumem")
    assert caught.value.key == "nvidia.com/gpumem"
    assert caught.value.value == "16 Gi"
    assert "nvidia.com/gpumem" in str(caught.value)
    assert "'16 Gi'" in str(caught.value)


def test_non_string_is_rejected() -> None:
    with pytest.raises(RequestError):
        parse_quantity(5)  # type: ignore[arg-type]


def test_limits_on_length_and_exponent() -> None:
    assert parse_quantity("1" * MAX_QUANTITY_LENGTH) == int("1" * MAX_QUANTITY_LENGTH)
    with pytest.raises(RequestError, match="longer"):
        parse_quantity("1" * (MAX_QUANTITY_LENGTH + 1))
    assert parse_quantity("1e1000") == 10**1000
    with pytest.raises(RequestError, match="exponent"):
        parse_quantity("1e1001")
    with pytest.raises(RequestError, match="exponent"):
        parse_quantity("1e-99999999999999")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(F(0), 0), (F(3), 3), (F(6, 5), 2), (F(-6, 5), -2), (F(1, 10**9), 1), (F(-3), -3)],
)
def test_to_int_ceil_rounds_away_from_zero(value: Fraction, expected: int) -> None:
    assert to_int_ceil(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100m", 100), ("1", 1000), ("1n", 1), ("-1n", -1), ("1.5", 1500), ("0", 0), ("1Ki", 1024000)],
)
def test_to_milli(text: str, expected: int) -> None:
    assert to_milli(parse_quantity(text)) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2000m", 2),
        ("2.0", 2),
        ("1e3", 1000),
        ("16Gi", 17179869184),
        ("1500m", None),
        ("0.5", None),
        ("-3", -3),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("-9223372036854775808", -(2**63)),
        ("1e19", None),
    ],
)
def test_as_integer(text: str, expected: int | None) -> None:
    assert as_integer(parse_quantity(text)) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("4096", 4096), ("-5", -5), ("+5", 5), ("007", 7), ("0", 0)]
)
def test_parse_int_strict_accepts_plain_integers(text: str, expected: int) -> None:
    assert parse_int_strict(text) == expected


@pytest.mark.parametrize(
    "text", ["4Ki", "1.0", " 1", "1 ", "", "1e3", "-", "9223372036854775808", "\uff11", "0x1"]
)
def test_parse_int_strict_rejects_everything_else(text: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_int_strict(text, key="limits.nvidia.com/gpumem")
    assert caught.value.key == "limits.nvidia.com/gpumem"


# --- properties ---------------------------------------------------------------------------------

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _oracle(sign: str, whole: str, frac: str | None, suffix: str) -> Fraction:
    """An independent evaluation with Decimal arithmetic at generous precision."""
    with localcontext() as ctx:
        ctx.prec = 400
        number = Decimal(f"{whole or '0'}.{frac or '0'}")
        if suffix in _BINARY:
            number *= Decimal(1024) ** _BINARY[suffix]
        elif suffix in _DECIMAL:
            number = number.scaleb(_DECIMAL[suffix])
        else:
            number = number.scaleb(int(suffix[1:]))
        if sign == "-":
            number = -number
        return Fraction(number)


_digits = st.text(alphabet="0123456789", max_size=20)
_suffixes = st.one_of(
    st.sampled_from(sorted(_BINARY) + sorted(_DECIMAL)),
    st.builds(
        lambda e, sign, n: f"{e}{sign}{n}",
        st.sampled_from("eE"),
        st.sampled_from(["", "+", "-"]),
        st.integers(min_value=0, max_value=60),
    ),
)


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=_digits,
    frac=st.none() | _digits,
    suffix=_suffixes,
)
def test_valid_quantities_match_decimal_oracle(
    sign: str, whole: str, frac: str | None, suffix: str
) -> None:
    if not whole and not frac:
        whole = "0"
    text = f"{sign}{whole}" + ("" if frac is None else f".{frac}") + suffix
    assert parse_quantity(text) == _oracle(sign, whole, frac, suffix)


@given(st.text(max_size=40) | st.text(alphabet="0123456789.+-eEKMGTPinumk \n", max_size=12))
def test_garbage_only_raises_request_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except RequestError:
        return
    assert isinstance(value, Fraction)


@given(st.text(max_size=30))
def test_parse_int_strict_garbage(text: str) -> None:
    try:
        number = parse_int_strict(text)
    except RequestError:
        assert re.fullmatch(r"[+-]?[0-9]{1,19}", text, re.ASCII) is None or abs(int(text)) >= 2**63
        return
    assert re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII)
    assert number == int(text)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_parse_int_strict_round_trips(number: int) -> None:
    assert parse_int_strict(str(number)) == number


@given(st.integers(min_value=0, max_value=INT32_MAX))
def test_integer_quantities_are_integers(number: int) -> None:
    assert as_integer(parse_quantity(str(number))) == number
    assert to_int_ceil(parse_quantity(f"{number}000m")) == number
