"""Reading the GPU map's query parameters: bounded numbers, flags, paging, and the errors a
client gets back (HTTP 400 with ``{"error": "..."}`` naming the parameter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from hami_kube.timefmt import format_time

__all__ = [
    "API_VERSION",
    "DEFAULT_PAGE",
    "DEFAULT_PER_PAGE",
    "MAX_PER_PAGE",
    "Page",
    "QueryError",
    "document",
    "flag",
    "moment",
    "number",
    "page_of",
    "text",
]

API_VERSION: Final = "gpumap.hami.io/v1"
DEFAULT_PER_PAGE: Final = 50
MAX_PER_PAGE: Final = 500
MAX_TEXT: Final = 253
"""The longest filter text taken (a DNS subdomain: the longest node or namespace name)."""


class QueryError(ValueError):
    """A query parameter (or a manifest) that cannot be read; the message says which and why."""


def text(query: Mapping[str, str], name: str) -> str:
    """A free-text filter (``""``: unset), stripped and bounded."""
    value = query.get(name, "").strip()
    if len(value) > MAX_TEXT:
        raise QueryError(f"{name}: at most {MAX_TEXT} characters")
    return value


def number(
    query: Mapping[str, str], name: str, *, low: int = 0, high: int = 2**31 - 1
) -> int | None:
    """A whole number in ``[low, high]``; ``None`` when the parameter is absent or empty."""
    raw = query.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw, 10)
    except ValueError:
        raise QueryError(f"{name}: not a whole number: {raw[:40]!r}") from None
    if not low <= value <= high:
        raise QueryError(f"{name}: must be between {low} and {high}, not {value}")
    return value


_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


def flag(query: Mapping[str, str], name: str) -> bool:
    raw = query.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise QueryError(f"{name}: want 1 or 0, not {raw[:40]!r}")


@dataclass(frozen=True, slots=True)
class Page:
    page: int
    per_page: int

    @classmethod
    def read(cls, query: Mapping[str, str]) -> Page:
        page = number(query, "page", low=1) or 1
        per_page = number(query, "perPage", low=1, high=MAX_PER_PAGE) or DEFAULT_PER_PAGE
        return cls(page, per_page)


DEFAULT_PAGE: Final = Page(1, DEFAULT_PER_PAGE)


def page_of(items: Sequence[Any], page: Page) -> tuple[Sequence[Any], dict[str, int]]:
    """The page's slice of ``items`` and the ``page`` object of the documents (a page past the
    end is empty, not an error: the list may have shrunk since the link was made)."""
    total = len(items)
    pages = max((total + page.per_page - 1) // page.per_page, 1)
    start = (page.page - 1) * page.per_page
    info = {"page": page.page, "perPage": page.per_page, "total": total, "pages": pages}
    return items[start : start + page.per_page], info


def moment(unix: float) -> str:
    """Unix seconds as RFC 3339 (UTC)."""
    return format_time(datetime.fromtimestamp(unix, UTC))


def document(kind: str, now: datetime, replica: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every document starts with (``replica``: who answers, see ``server``)."""
    return {"apiVersion": API_VERSION, "kind": kind, "generatedAt": format_time(now), **replica}
