"""Kubernetes time formats: ``Time`` (RFC 3339, seconds) and ``MicroTime`` (six fractional digits).

Both are written in UTC with a ``Z`` suffix; parsing accepts any RFC 3339 form (offsets, any number
of fractional digits) and returns an aware UTC datetime.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("naive datetime: Kubernetes times must be timezone-aware")
    return moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """``metav1.Time``: ``2026-07-24T10:15:30Z`` (fraction dropped)."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_microtime(moment: datetime) -> str:
    """``metav1.MicroTime``: ``2026-07-24T10:15:30.123456Z`` (exactly six fractional digits)."""
    return _utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (Time or MicroTime) into an aware UTC datetime.

    Fractions beyond microseconds are truncated. Raises ``ValueError`` on anything else.
    """
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text[:64]!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = match.group(7) or ""
    micros = int((fraction + "000000")[:6])
    tz = UTC
    if match.group(9):
        offset = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
        tz = timezone(offset if match.group(9) == "+" else -offset)
    return datetime(year, month, day, hour, minute, second, micros, tzinfo=tz).astimezone(UTC)


def utc_now() -> datetime:
    return datetime.now(UTC)


__all__ = [
    "format_microtime",
    "format_time",
    "parse_time",
    "utc_now",
]
