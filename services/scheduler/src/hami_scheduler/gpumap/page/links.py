"""The GPU map pages' links and GET forms: where each page is, and what it carries over.

The pages are served under port-forwards, the API server's service proxy and Ingress sub-paths,
so every link and form action is relative (:data:`PATHS`).  Filters, paging and auto-refresh
live in the query alone (no scripts: the CSP forbids them), so each page's links keep the
parameters listed in :data:`KEPT`, and each form keeps ``refresh`` in a hidden field (a GET form
replaces the whole query).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlencode

from hami_scheduler.gpumap.page.text import as_map, esc, number, text_or

__all__ = [
    "JSON_PATHS",
    "KEPT",
    "PATHS",
    "REFRESH_DEFAULT_S",
    "REFRESH_MAX_S",
    "REFRESH_MIN_S",
    "hidden_refresh",
    "href",
    "kept_query",
    "paging",
    "per_page_field",
    "refresh_seconds",
]


REFRESH_MIN_S: Final = 5
REFRESH_MAX_S: Final = 3600
REFRESH_DEFAULT_S: Final = 30


PATHS: Final = {"map": "./", "pending": "./pending", "fit": "./fit", "error": "./"}
JSON_PATHS: Final = {"map": "./api/v1/map", "pending": "./api/v1/pending", "fit": "./api/v1/fit"}
KEPT: Final = {
    "map": ("node", "vendor", "fragmented", "perPage", "page"),
    "pending": ("namespace", "perPage", "page"),
    "fit": ("gpus", "memory", "memoryPercentage", "cores", "type", "vendor", "manifestText"),
    "error": (),
}
"""The query parameters each page carries over into its own links (filters, paging, probe)."""


def href(path: str, params: Mapping[str, str]) -> str:
    """An escaped relative URL: ``path`` plus the non-empty ``params``."""
    query = urlencode([(k, v) for k, v in params.items() if v != ""])
    return esc(f"{path}?{query}" if query else path)


def kept_query(kind: str, query: Mapping[str, str]) -> dict[str, str]:
    kept = {k: query[k] for k in KEPT.get(kind, ()) if k in query}
    if "refresh" in query:
        kept["refresh"] = query["refresh"]
    return kept


def refresh_seconds(query: Mapping[str, str]) -> int | None:
    raw = query.get("refresh")
    if raw is None:
        return None
    try:
        seconds = int(raw)
    except ValueError:
        seconds = REFRESH_DEFAULT_S
    return min(max(seconds, REFRESH_MIN_S), REFRESH_MAX_S)


def hidden_refresh(query: Mapping[str, str]) -> str:
    """Forms keep auto-refresh as it was (a form's GET replaces the whole query)."""
    if "refresh" not in query:
        return ""
    return f'<input type="hidden" name="refresh" value="{esc(query["refresh"])}">'


def paging(out: list[str], kind: str, doc: Mapping[str, Any], query: Mapping[str, str]) -> None:
    page = as_map(doc.get("page"))
    current, pages = number(page.get("page")) or 1, number(page.get("pages")) or 1
    kept = kept_query(kind, query)
    links = []
    if current > 1:
        links.append(
            f'<a href="{href(PATHS[kind], {**kept, "page": str(int(current) - 1)})}"'
            ' rel="prev">← previous</a>'
        )
    if current < pages:
        links.append(
            f'<a href="{href(PATHS[kind], {**kept, "page": str(int(current) + 1)})}"'
            ' rel="next">next →</a>'
        )
    out.append(
        f'<nav aria-label="pages"><p>Page {int(current)} of {int(pages)} '
        f"({text_or(page.get('total'), '?')} matching) {' '.join(links)}</p></nav>"
    )


def per_page_field(query: Mapping[str, str]) -> str:
    value = esc(query.get("perPage", ""))
    return (
        '<label>Per page <input type="number" name="perPage" min="1" max="500" '
        f'value="{value}" placeholder="50"></label>'
    )
