"""Escaping and the small formatters every GPU map view uses.

Every value on a page comes from cluster objects, so everything is escaped (:func:`esc`), numbers
too: a document is only as typed as the code that built it, hence the lenient readers
(:func:`as_map`, :func:`as_list`, :func:`number`) that turn a missing or mistyped field into
"no data" rather than an exception.  Times are shown against the document's own
``generatedAt`` (no clock here), and a status is always a word and a symbol, never colour alone
(:func:`flag`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from html import escape
from typing import Any

__all__ = [
    "as_list",
    "as_map",
    "duration",
    "esc",
    "flag",
    "mib",
    "number",
    "parse_time",
    "pct",
    "reason_lines",
    "text_or",
    "time_of",
]


def esc(value: object) -> str:
    """Escaped text of any value (``None`` is the caller's business: see :func:`text_or`)."""
    if isinstance(value, int):  # most values on a page: nothing to escape
        return str(value)
    return escape(str(value), quote=True)


def text_or(value: object, missing: str = "no data") -> str:
    return missing if value is None else esc(value)


def as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def mib(value: object) -> str:
    n = number(value)
    return "no data" if n is None else f"{n:,.0f} MiB"


def pct(value: object) -> str:
    n = number(value)
    return "no data" if n is None else f"{n:g} %"


def time_of(timestamp: object, now: datetime | None) -> str:
    """``<time>`` with the raw timestamp, and its age against the document's ``generatedAt``."""
    if not isinstance(timestamp, str) or not timestamp:
        return "never"
    text = f'<time datetime="{esc(timestamp)}">{esc(timestamp)}</time>'
    then = parse_time(timestamp)
    if now is None or then is None:
        return text
    return f"{text} ({duration((now - then).total_seconds())} before this page)"


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def duration(seconds: object) -> str:
    n = number(seconds)
    if n is None:
        return "unknown"
    total = max(int(n), 0)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def flag(ok: bool, good: str, bad: str) -> str:
    """A status as a word and a symbol, coloured too (never colour alone)."""
    if ok:
        return f'<span class="ok">✓ {esc(good)}</span>'
    return f'<span class="bad flag">✗ {esc(bad)}</span>'


def reason_lines(reasons: Iterable[Any]) -> str:
    """``k nodes: Reason (node-a, node-b, …)``, one line per reason."""
    lines = []
    for item in reasons:
        r = as_map(item)
        examples = [str(x) for x in as_list(r.get("examples"))]
        count = number(r.get("nodes"))
        more = ", …" if count is not None and count > len(examples) else ""
        listed = f" ({esc(', '.join(examples))}{more})" if examples else ""
        noun = "node" if count == 1 else "nodes"
        lines.append(
            f"{text_or(r.get('nodes'), '?')} {noun}: {text_or(r.get('reason'), '?')}{listed}"
        )
    return "<br>".join(lines) if lines else "no reasons recorded"
