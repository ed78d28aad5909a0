"""Time and MicroTime formats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube.timefmt import format_microtime, format_time, parse_time

MOMENT = datetime(2026, 7, 24, 10, 15, 30, 123456, tzinfo=UTC)


def test_microtime_has_six_fraction_digits() -> None:
    assert format_microtime(MOMENT) == "2026-07-24T10:15:30.123456Z"
    assert format_microtime(MOMENT.replace(microsecond=0)) == "2026-07-24T10:15:30.000000Z"


def test_time_drops_the_fraction() -> None:
    assert format_time(MOMENT) == "2026-07-24T10:15:30Z"


def test_other_zones_are_converted_to_utc() -> None:
    local = MOMENT.astimezone(timezone(timedelta(hours=2)))
    assert format_microtime(local) == "2026-07-24T10:15:30.123456Z"


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_microtime(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-07-24T10:15:30Z", MOMENT.replace(microsecond=0)),
        ("2026-07-24T10:15:30.123456Z", MOMENT),
        ("2026-07-24T10:15:30.123456789Z", MOMENT),
        ("2026-07-24T10:15:30.1Z", MOMENT.replace(microsecond=100000)),
        ("2026-07-24T12:15:30.123456+02:00", MOMENT),
        ("2026-07-24T05:15:30.123456-05:00", MOMENT),
    ],
)
def test_parse(text: str, expected: datetime) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["", "2026-07-24", "yesterday", "2026-07-24T10:15:30"])
def test_parse_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time(text)


@given(st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 2)))
def test_microtime_round_trip(moment: datetime) -> None:
    assert parse_time(format_microtime(moment)) == moment
