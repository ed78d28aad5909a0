"""Go-style durations (``5m``, ``30s``, ``1h30m``, ``500ms``): parsing flags, writing messages.

HAMi's flags are Go ``time.Duration`` values and its messages print them with Go's
``Duration.String`` (``5m0s``), so both directions follow Go.  A bare number is read as seconds,
which Go would refuse; it keeps ``HAMI_*`` environment values written by hand working.
"""

from __future__ import annotations

import math
import re
from typing import Final

__all__ = ["format_go_duration", "parse_go_duration"]

_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS: Final = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def parse_go_duration(text: str, *, bare_seconds: bool = True) -> float:
    """Seconds in ``text`` (``1m30s`` → 90.0); raises :class:`ValueError` when unreadable.

    ``bare_seconds=False`` follows Go exactly: a number without a unit is refused unless it is
    ``0`` (Kubernetes configuration files are read that way).
    """
    value = text.strip()
    if not value:
        raise ValueError("empty duration")
    sign = 1.0
    if value[0] in "+-":
        sign = -1.0 if value[0] == "-" else 1.0
        value = value[1:]
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if math.isfinite(number) and (bare_seconds or number == 0):
            return sign * number
        raise ValueError(f"invalid duration {text!r} (want e.g. 5m, 30s, 1h30m)")
    total, position = 0.0, 0
    while position < len(value):
        match = _PART.match(value, position)
        if match is None:
            raise ValueError(f"invalid duration {text!r} (want e.g. 5m, 30s, 1h30m)")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Go's ``Duration.String``: ``5m0s``, ``28s``, ``1h0m0s``, ``1.5s``, ``500ms``, ``0s``."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    remaining = abs(seconds)
    if remaining < 1:
        millis = remaining * 1e3
        if millis >= 1:
            return f"{sign}{_trim(millis)}ms"
        micros = remaining * 1e6
        if micros >= 1:
            return f"{sign}{_trim(micros)}µs"
        return f"{sign}{_trim(remaining * 1e9)}ns"
    hours, rest = divmod(remaining, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{_trim(secs)}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return sign + text


def _trim(number: float) -> str:
    rounded = round(number, 9)
    if rounded == int(rounded):
        return str(int(rounded))
    return f"{rounded:.9f}".rstrip("0").rstrip(".")
