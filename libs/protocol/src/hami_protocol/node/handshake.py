"""Node handshake values (``hami.io/node-handshake[-<x>]``) and the scheduler's health verdict.

Values seen on the wire, all tolerated:

* ``Requesting_2024-01-23 04:30:04`` — written by the scheduler (v2.5+ layout); v2.4 wrote
  ``Requesting_2024.01.10 04:06:57``.
* ``Reported 2024-01-23 04:30:04`` / ``Reported_<ts>`` — written by device plugins; the <= v2.7
  NVIDIA plugin wrote Go's ``time.Now().String()``, e.g.
  ``Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895``.
* ``Deleted_<ts>`` — written by the v2.4 node clean-up.

Timestamps without an offset are naive wall-clock strings; we read and write them as UTC (our
pods run in UTC).  Parsed timestamps are timezone-aware UTC datetimes.  Nothing here raises on
bad input: an unrecognised value has state ``unknown``, an unparsable time is ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Final, Literal

__all__ = [
    "DEFAULT_HANDSHAKE_EXPIRY",
    "Handshake",
    "HandshakeState",
    "HandshakeVerdict",
    "check_handshake",
    "format_reported",
    "format_requesting",
    "parse_handshake",
    "parse_handshake_time",
    "wire_time",
]

HandshakeState = Literal["requesting", "reported", "deleted", "unknown"]

DEFAULT_HANDSHAKE_EXPIRY: Final = timedelta(seconds=60)
"""HAMi's window between writing ``Requesting_<now>`` and judging the node."""

_KEYWORDS: Final[tuple[tuple[str, HandshakeState], ...]] = (
    ("Requesting", "requesting"),
    ("Reported", "reported"),
    ("Deleted", "deleted"),
)

# Go's time.DateTime (dashes) or the v2.4 dotted date, optionally followed by the rest of Go's
# time.String(): fraction, numeric offset, zone abbreviation, monotonic clock reading.
_TIMESTAMP = re.compile(
    r"(?P<year>\d{4})(?P<sep>[-.])(?P<month>\d{2})(?P=sep)(?P<day>\d{2})"
    r" +(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})(?:\.(?P<fraction>\d{1,9}))?"
    r"(?: +(?P<offset>[+-]\d{4})(?: +[A-Za-z0-9+-]+)?)?"
    r"(?: +m=[+-]\d+(?:\.\d+)?)?",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class Handshake:
    """A decoded handshake value; ``raw`` is the value as read ("" when absent)."""

    state: HandshakeState
    timestamp: datetime | None
    raw: str


@dataclass(frozen=True, slots=True)
class HandshakeVerdict:
    """The scheduler's judgement of one node × vendor.

    ``needs_update``: write :func:`format_requesting` (now) to the handshake key.
    """

    healthy: bool
    needs_update: bool


def parse_handshake_time(text: str) -> datetime | None:
    """Parse one of the timestamp layouts above into an aware UTC datetime, else ``None``."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        return None
    fraction = (match["fraction"] or "").ljust(6, "0")[:6]  # Python keeps microseconds
    tz = UTC
    if match["offset"]:
        sign = -1 if match["offset"][0] == "-" else 1
        hours, minutes = int(match["offset"][1:3]), int(match["offset"][3:5])
        try:
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        except ValueError:
            return None
    try:
        moment = datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            int(fraction),
            tzinfo=tz,
        )
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _after_keyword(rest: str) -> datetime | None:
    # The keyword is followed by '_' (Requesting_, Deleted_, Reported_) or a space (Reported ).
    if not rest or rest[0] not in "_ \t":
        return None
    return parse_handshake_time(rest[1:])


def parse_handshake(value: str | None) -> Handshake:
    """Classify a handshake value and extract its timestamp.  Never raises."""
    raw = value or ""
    text = raw.strip()
    for keyword, state in _KEYWORDS:
        if text.startswith(keyword):
            return Handshake(state, _after_keyword(text[len(keyword) :]), raw)
    if "Requesting" in text:
        # HAMi tests for the substring and reads the time after the first '_'.
        _, separator, rest = text.partition("_")
        return Handshake("requesting", parse_handshake_time(rest) if separator else None, raw)
    return Handshake("unknown", None, raw)


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def wire_time(moment: datetime) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in UTC (a naive ``moment`` is taken to be UTC)."""
    t = _as_utc(moment)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"


def format_requesting(now: datetime) -> str:
    """``Requesting_YYYY-MM-DD HH:MM:SS`` in UTC (a naive ``now`` is taken to be UTC)."""
    return f"Requesting_{wire_time(now)}"


def format_reported(now: datetime) -> str:
    """``Reported YYYY-MM-DD HH:MM:SS`` in UTC, the form an external device plugin may write."""
    return f"Reported {wire_time(now)}"


def _plus(moment: datetime, delta: timedelta) -> datetime:
    try:
        return moment + delta
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC) if delta >= timedelta(0) else moment


def check_handshake(
    value: str | None, *, now: datetime, expiry: timedelta, has_allocatable: bool
) -> HandshakeVerdict:
    """Decide a node's health from its handshake value (HAMi's ``CheckHealth``).

    * Not a ``Requesting`` value (absent, ``Reported``, ``Deleted``, anything else): healthy, and
      the scheduler writes a fresh ``Requesting_<now>``.
    * ``Requesting`` younger than ``expiry``: healthy, nothing to write.
    * Older, but the node still advertises the device count resource: healthy.
    * Older and nothing allocatable: unhealthy (the caller cleans the node up).

    Two deliberate differences from HAMi: a ``Requesting`` value whose time cannot be read, or
    that lies more than ``expiry`` in the future, is rewritten (HAMi leaves it, and the node can
    then never be judged again); the v2.4 dotted layout is read as a real time.
    """
    handshake = parse_handshake(value)
    if handshake.state != "requesting" or handshake.timestamp is None:
        return HandshakeVerdict(healthy=True, needs_update=True)
    current = _as_utc(now)
    if handshake.timestamp > _plus(current, expiry):
        return HandshakeVerdict(healthy=True, needs_update=True)
    if current < _plus(handshake.timestamp, expiry) or has_allocatable:
        return HandshakeVerdict(healthy=True, needs_update=False)
    return HandshakeVerdict(healthy=False, needs_update=False)
