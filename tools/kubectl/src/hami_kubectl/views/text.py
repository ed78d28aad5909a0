"""Aligned columns and the units the tables print (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

GAP = "   "
"""Between columns, as kubectl's table printer pads them."""


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first being the header) as lines of left-aligned columns; the last column is
    never padded, so long holder lists do not push trailing blanks."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append(GAP.join([*cells, row[-1]]).rstrip())
    return lines


def truncate(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def number(value: Any) -> str:
    """An integer as printed; ``?`` when the document has none."""
    if isinstance(value, bool) or value is None:
        return "?"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def duration(seconds: float) -> str:
    """kubectl's short human duration: ``45s``, ``5m12s``, ``3h4m``, ``2d5h``, ``40d``."""
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s" if secs and minutes < 10 else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes and hours < 8 else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours and days < 8 else f"{days}d"


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def ago(text: Any, now: datetime) -> str:
    """``5m ago`` for an RFC 3339 time; ``never`` when there is none."""
    when = parse_time(text)
    if when is None:
        return "never"
    return f"{duration((now - when).total_seconds())} ago"


def pages(page: Any, noun: str) -> str:
    """``page 1/3 · 120 nodes`` and how to get the next page."""
    if not isinstance(page, dict):
        return ""
    current, count, total = page.get("page"), page.get("pages"), page.get("total")
    line = f"page {number(current)}/{number(count)} · {number(total)} {noun}"
    if isinstance(current, int) and isinstance(count, int) and current < count:
        line += f" · next: --page {current + 1}"
    return line


__all__ = ["GAP", "ago", "columns", "duration", "number", "pages", "parse_time", "truncate"]
