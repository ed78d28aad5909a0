"""Handshake values and the scheduler's health verdict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.node.handshake import (
    DEFAULT_HANDSHAKE_EXPIRY,
    Handshake,
    HandshakeVerdict,
    check_handshake,
    format_reported,
    format_requesting,
    parse_handshake,
    parse_handshake_time,
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "state", "timestamp"),
    [
        pytest.param(
            "Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895",
            "reported",
            utc(2024, 1, 23, 4, 30, 4, 434037),
            id="seed-go-time-string",
        ),
        pytest.param(
            "Requesting_2024.01.10 04:06:57",
            "requesting",
            utc(2024, 1, 10, 4, 6, 57),
            id="seed-v2.4-dotted",
        ),
        pytest.param(
            "Requesting_2024.05.14 07:07:33", "requesting", utc(2024, 5, 14, 7, 7, 33), id="seed"
        ),
        pytest.param(
            "Requesting_2024-01-23 04:30:04",
            "requesting",
            utc(2024, 1, 23, 4, 30, 4),
            id="datetime-layout",
        ),
        pytest.param(
            "Reported_2024-01-23 04:30:04", "reported", utc(2024, 1, 23, 4, 30, 4), id="reported_"
        ),
        pytest.param(
            "Reported 2024-01-23 04:30:04", "reported", utc(2024, 1, 23, 4, 30, 4), id="reported-sp"
        ),
        pytest.param(
            "Deleted_2024-01-23 04:30:04", "deleted", utc(2024, 1, 23, 4, 30, 4), id="deleted"
        ),
        pytest.param(
            "Reported 2024-01-23 12:30:04.5 +0800 CST",
            "reported",
            utc(2024, 1, 23, 4, 30, 4, 500000),
            id="offset-converted",
        ),
        pytest.param(
            "  Requesting_2024-01-23 04:30:04\n", "requesting", utc(2024, 1, 23, 4, 30, 4), id="ws"
        ),
        pytest.param(
            "x-Requesting_2024-01-23 04:30:04",
            "requesting",
            utc(2024, 1, 23, 4, 30, 4),
            id="hami-substring-test",
        ),
        pytest.param("Requesting_garbage", "requesting", None, id="bad-time"),
        pytest.param("Requesting", "requesting", None, id="no-time"),
        pytest.param("Requesting_2024-13-01 00:00:00", "requesting", None, id="bad-month"),
        pytest.param("Requesting_2024-01.01 00:00:00", "requesting", None, id="mixed-layout"),
        pytest.param("Reported2024-01-23 04:30:04", "reported", None, id="no-separator"),
        pytest.param("hello", "unknown", None, id="unknown"),
        pytest.param("", "unknown", None, id="empty"),
    ],
)
def test_parse_examples(value: str, state: str, timestamp: datetime | None) -> None:
    assert parse_handshake(value) == Handshake(state, timestamp, value)  # type: ignore[arg-type]


def test_absent_value_is_unknown() -> None:
    assert parse_handshake(None) == Handshake("unknown", None, "")


def test_format_writes_utc_wall_clock_whole_seconds() -> None:
    moment = datetime(2024, 1, 23, 12, 30, 4, 999999, tzinfo=timezone(timedelta(hours=8)))
    assert format_requesting(moment) == "Requesting_2024-01-23 04:30:04"
    assert format_reported(moment) == "Reported 2024-01-23 04:30:04"
    assert format_requesting(datetime(2024, 1, 23, 4, 30, 4)) == "Requesting_2024-01-23 04:30:04"


NOW = utc(2024, 1, 23, 4, 30, 0)
EXPIRY = DEFAULT_HANDSHAKE_EXPIRY


@pytest.mark.parametrize(
    ("value", "has_allocatable", "healthy", "needs_update"),
    [
        pytest.param(format_requesting(NOW), False, True, False, id="fresh-request"),
        pytest.param(
            format_requesting(NOW - timedelta(seconds=59)), False, True, False, id="within-window"
        ),
        pytest.param(
            format_requesting(NOW - timedelta(seconds=60)), False, False, False, id="expired-empty"
        ),
        pytest.param(
            format_requesting(NOW - timedelta(minutes=10)), True, True, False, id="expired-alloc"
        ),
        pytest.param("Requesting_2024.01.23 04:00:00", False, False, False, id="dotted-expired"),
        pytest.param(None, False, True, True, id="absent"),
        pytest.param("Reported 2024-01-23 04:29:59", False, True, True, id="reported"),
        pytest.param("Deleted_2024-01-23 04:00:00", False, True, True, id="deleted"),
        pytest.param("junk", False, True, True, id="junk"),
        pytest.param("Requesting_junk", False, True, True, id="unreadable-request-rewritten"),
        pytest.param(
            format_requesting(NOW + timedelta(seconds=30)), False, True, False, id="slight-skew"
        ),
        pytest.param(
            format_requesting(NOW + timedelta(hours=2)), False, True, True, id="far-future"
        ),
        pytest.param("Requesting_9999-12-31 23:59:59", False, True, True, id="no-overflow"),
    ],
)
def test_check_handshake(
    value: str | None, has_allocatable: bool, healthy: bool, needs_update: bool
) -> None:
    verdict = check_handshake(value, now=NOW, expiry=EXPIRY, has_allocatable=has_allocatable)
    assert verdict == HandshakeVerdict(healthy=healthy, needs_update=needs_update)


def test_expiry_is_a_parameter() -> None:
    value = format_requesting(NOW - timedelta(seconds=90))
    long = check_handshake(value, now=NOW, expiry=timedelta(minutes=5), has_allocatable=False)
    short = check_handshake(value, now=NOW, expiry=timedelta(seconds=60), has_allocatable=False)
    assert long.healthy
    assert not short.healthy


def test_naive_now_is_utc() -> None:
    naive_now = NOW.replace(tzinfo=None)
    value = format_requesting(NOW - timedelta(seconds=61))
    verdict = check_handshake(value, now=naive_now, expiry=EXPIRY, has_allocatable=False)
    assert not verdict.healthy


MOMENTS = st.datetimes(
    min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@given(MOMENTS)
def test_format_parse_round_trip(moment: datetime) -> None:
    whole = moment.replace(microsecond=0)
    requesting = parse_handshake(format_requesting(moment))
    reported = parse_handshake(format_reported(moment))
    assert (requesting.state, requesting.timestamp) == ("requesting", whole)
    assert (reported.state, reported.timestamp) == ("reported", whole)


@given(st.text() | st.text().map(lambda tail: "Requesting_" + tail))
def test_parse_and_check_never_raise(value: str) -> None:
    handshake = parse_handshake(value)
    assert handshake.raw == value
    moment = parse_handshake_time(value)
    assert moment is None or moment.tzinfo is UTC
    verdict = check_handshake(value, now=NOW, expiry=EXPIRY, has_allocatable=False)
    assert verdict.healthy or handshake.state == "requesting"
