"""The frame every GPU map page shares, and the dispatch to the view that fills it.

:func:`render_steps` writes the head (the CSS below, the refresh ``<meta>`` while the query asks
for it), the navigation and the meta line (generated when and by whom, the auto-refresh switch,
the same page as JSON), then hands the one list of strings to the page's view
(:mod:`.nodes`, :mod:`.pending`, :mod:`.fit`) to append to.  The map view is a generator
(:mod:`hami_scheduler.gpumap.steps`): it is delegated to with ``yield from`` so that the server
can hand the event loop back between nodes.  The CSS is inline because the CSP allows inline
styles and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_scheduler.gpumap.page.fit import fit_page
from hami_scheduler.gpumap.page.links import (
    JSON_PATHS,
    PATHS,
    REFRESH_DEFAULT_S,
    href,
    kept_query,
    refresh_seconds,
)
from hami_scheduler.gpumap.page.nodes import map_page
from hami_scheduler.gpumap.page.pending import pending_page
from hami_scheduler.gpumap.page.text import esc, text_or, time_of
from hami_scheduler.gpumap.steps import Steps, drain

__all__ = ["render_page", "render_steps"]


_TITLES: Final = {
    "map": "GPU map",
    "pending": "Pending GPU pods",
    "fit": "Would it fit?",
    "error": "Error",
}


_CSS: Final = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;
background:#fff;margin:0 1rem 2rem}
header{border-bottom:1px solid #767676;margin-bottom:.5rem}
nav a{margin-right:1rem}nav a[aria-current]{font-weight:bold;text-decoration:none}
a{color:#0645ad}h1{font-size:1.4rem;margin:.5rem 0}h2{font-size:1.2rem}h3{font-size:1.05rem}
table{border-collapse:collapse;margin:.25rem 0 1rem}caption{text-align:left;font-weight:bold}
th,td{border:1px solid #949494;padding:.2rem .4rem;vertical-align:top;text-align:left}
th{background:#eee}.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{overflow-x:auto}.meta,.muted{color:#4a4a4a}
.bar{display:flex;width:9rem;height:1.1rem;border:1px solid #4a4a4a;background:#f4f4f4}
.bar div{overflow:hidden;white-space:nowrap;font-size:.75rem;line-height:1.1rem;
text-align:center;color:#000;border-right:1px solid #fff}
.s0{background:#9ecae1}.s1{background:#fdae6b}.s2{background:#a1d99b}.s3{background:#bcbddc}
.s4{background:#fdd0a2}.s5{background:#c7e9c0}.s6{background:#d9d9d9}.s7{background:#fcbba1}
.used{background:#6b6b6b!important;color:#fff!important}
.ok{color:#0b6b1f}.bad{color:#a00000;font-weight:bold}.warn{color:#7a4d00;font-weight:bold}
.flag{border:1px solid currentColor;padding:0 .25rem;border-radius:3px}
ul.holders{margin:0;padding-left:1.1rem}td.who{min-width:16rem}th.card{min-width:7rem}td.usage{min-width:10rem}.dots{font-size:.8rem}
form{margin:.5rem 0 1rem}fieldset{display:inline-block;border:1px solid #949494}
label{margin-right:.75rem}input[type=number]{width:6rem}textarea{width:40rem;max-width:95%}
.error{border:2px solid #a00000;padding:.5rem;color:#a00000}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:.1rem 1rem}
dl.summary dt{font-weight:bold}dl.summary dd{margin:0}
"""


def render_page(kind: str, doc: dict[str, Any], query: Mapping[str, str]) -> str:
    """A whole HTML document showing ``doc`` (see the module doc); ``kind`` is ``"map"``,
    ``"pending"``, ``"fit"`` or ``"error"``; ``query`` is the request's query parameters."""
    return drain(render_steps(kind, doc, query))


def render_steps(kind: str, doc: dict[str, Any], query: Mapping[str, str]) -> Steps[str]:
    """:func:`render_page` in steps (:mod:`hami_scheduler.gpumap.steps`): one per node of a map
    page."""
    if kind not in _TITLES:
        kind = "error"
        doc = {"error": "unknown page"}
    out: list[str] = []
    refresh = refresh_seconds(query)
    title = _TITLES[kind]
    out.append('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">')
    out.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    # A data: icon stops browsers asking for /favicon.ico, outside the proxy prefix.
    out.append('<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,">')
    if refresh is not None:
        out.append(f'<meta http-equiv="refresh" content="{refresh}">')
    out.append(f"<title>{esc(title)} · HAMi</title><style>{_CSS}</style></head><body>")
    out.append('<header><nav aria-label="GPU map pages">')
    for target, label in (("map", "Map"), ("pending", "Pending pods"), ("fit", "Would it fit?")):
        current = ' aria-current="page"' if target == kind else ""
        out.append(f'<a href="{esc(PATHS[target])}"{current}>{label}</a>')
    out.append(f"</nav><h1>{esc(title)}</h1>")
    out.append(_page_meta(kind, doc, query, refresh))
    out.append("</header><main>")
    if "error" in doc and kind != "fit":
        out.append(
            f'<p class="error" role="alert">Error: {text_or(doc.get("error"), "unknown")}</p>'
        )
    elif kind == "map":
        yield from map_page(out, doc, query)
    elif kind == "pending":
        pending_page(out, doc, query)
    elif kind == "fit":
        fit_page(out, doc, query)
    out.append("</main></body></html>\n")
    return "".join(out)


def _page_meta(
    kind: str, doc: Mapping[str, Any], query: Mapping[str, str], refresh: int | None
) -> str:
    parts = []
    if doc.get("generatedAt"):
        parts.append(f"Generated at {time_of(doc.get('generatedAt'), None)}")
    if doc.get("leader"):
        parts.append(f"by {esc(doc['leader'])}")
    kept = kept_query(kind, query)
    path = PATHS[kind]
    if refresh is None:
        on = {**kept, "refresh": str(REFRESH_DEFAULT_S)}
        parts.append(
            f'· Auto-refresh off (<a href="{href(path, on)}">turn on, every '
            f"{REFRESH_DEFAULT_S} s</a>)"
        )
    else:
        off = {k: v for k, v in kept.items() if k != "refresh"}
        parts.append(f'· Auto-refresh every {refresh} s (<a href="{href(path, off)}">turn off</a>)')
    if kind in JSON_PATHS:
        plain = {k: v for k, v in kept.items() if k != "refresh"}
        parts.append(f'· <a href="{href(JSON_PATHS[kind], plain)}">this page as JSON</a>')
    return f'<p class="meta">{" ".join(parts)}</p>'
