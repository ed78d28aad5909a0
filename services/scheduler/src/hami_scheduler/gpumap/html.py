"""The GPU map's HTML pages, rendered on the server from the JSON documents the API serves.

``render_page(kind, doc, query)`` turns one document of ``docs/gpumap.md`` (``GpuMap``,
``PendingGpuPods``, ``FitProbe`` or ``{"error": ...}``) into a whole HTML5 page.  Pure: no I/O, no
clock (times shown are relative to the document's own ``generatedAt``).

Why it looks the way it does:

- The page is served under ``kubectl port-forward``, the API server's service proxy
  (``/api/v1/namespaces/<ns>/services/<svc>:gpumap/proxy/``) and Ingress sub-paths, so every
  link and form action is relative (``./``, ``./pending``, ``./fit``); none starts with ``/``.
- The CSP allows inline styles and nothing else (no scripts, no outside fetches), so bars are
  inline-styled ``div``s, refresh is ``<meta http-equiv="refresh">`` (only while the query
  carries ``refresh=``; a link turns it on and off), filters and paging are GET forms and links,
  and the manifest form submits its raw text as ``manifestText`` (base64 would need a script).
- Every value comes from cluster objects (pod names, annotations) and is escaped; numbers too,
  since a document is only as typed as the code that built it.
- Colour never carries meaning alone: every status has a word and a symbol beside it, every bar
  its numbers in text, and each holder's segment carries the holder's ordinal.
- Cost is linear in the document (one list of strings joined once); the server pages nodes, so
  a 5,000-node cluster costs what one page of it costs, and renders in steps (``render_steps``,
  one per node) so that a filter never waits for a whole page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from html import escape
from typing import Any, Final
from urllib.parse import urlencode

from hami_scheduler.gpumap.steps import Steps, drain

__all__ = ["render_page", "render_steps"]

REFRESH_MIN_S: Final = 5
REFRESH_MAX_S: Final = 3600
REFRESH_DEFAULT_S: Final = 30
MAX_SHARE_DOTS: Final = 20
"""More shares than this (some vendors count 100 per card) print as text only."""
_SEGMENT_COLOURS: Final = 8

_PATHS: Final = {"map": "./", "pending": "./pending", "fit": "./fit", "error": "./"}
_JSON_PATHS: Final = {"map": "./api/v1/map", "pending": "./api/v1/pending", "fit": "./api/v1/fit"}
_KEPT: Final = {
    "map": ("node", "vendor", "fragmented", "perPage", "page"),
    "pending": ("namespace", "perPage", "page"),
    "fit": ("gpus", "memory", "memoryPercentage", "cores", "type", "vendor", "manifestText"),
    "error": (),
}
"""The query parameters each page carries over into its own links (filters, paging, probe)."""
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


# --- small pieces ---------------------------------------------------------------------------------


def _e(value: object) -> str:
    """Escaped text of any value (``None`` is the caller's business: see :func:`_or`)."""
    if isinstance(value, int):  # most values on a page: nothing to escape
        return str(value)
    return escape(str(value), quote=True)


def _or(value: object, missing: str = "no data") -> str:
    return missing if value is None else _e(value)


def _d(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _l(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _n(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _mib(value: object) -> str:
    n = _n(value)
    return "no data" if n is None else f"{n:,.0f} MiB"


def _pct(value: object) -> str:
    n = _n(value)
    return "no data" if n is None else f"{n:g} %"


def _href(path: str, params: Mapping[str, str]) -> str:
    """An escaped relative URL: ``path`` plus the non-empty ``params``."""
    query = urlencode([(k, v) for k, v in params.items() if v != ""])
    return _e(f"{path}?{query}" if query else path)


def _kept(kind: str, query: Mapping[str, str]) -> dict[str, str]:
    kept = {k: query[k] for k in _KEPT.get(kind, ()) if k in query}
    if "refresh" in query:
        kept["refresh"] = query["refresh"]
    return kept


def _refresh_seconds(query: Mapping[str, str]) -> int | None:
    raw = query.get("refresh")
    if raw is None:
        return None
    try:
        seconds = int(raw)
    except ValueError:
        seconds = REFRESH_DEFAULT_S
    return min(max(seconds, REFRESH_MIN_S), REFRESH_MAX_S)


def _when(timestamp: object, now: datetime | None) -> str:
    """``<time>`` with the raw timestamp, and its age against the document's ``generatedAt``."""
    if not isinstance(timestamp, str) or not timestamp:
        return "never"
    text = f'<time datetime="{_e(timestamp)}">{_e(timestamp)}</time>'
    then = _parse_time(timestamp)
    if now is None or then is None:
        return text
    return f"{text} ({_duration((now - then).total_seconds())} before this page)"


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _duration(seconds: object) -> str:
    n = _n(seconds)
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


def _flag(ok: bool, good: str, bad: str) -> str:
    """A status as a word and a symbol, coloured too (never colour alone)."""
    if ok:
        return f'<span class="ok">✓ {_e(good)}</span>'
    return f'<span class="bad flag">✗ {_e(bad)}</span>'


def _reasons(reasons: Iterable[Any]) -> str:
    """``k nodes: Reason (node-a, node-b, …)``, one line per reason."""
    lines = []
    for item in reasons:
        r = _d(item)
        examples = [str(x) for x in _l(r.get("examples"))]
        count = _n(r.get("nodes"))
        more = ", …" if count is not None and count > len(examples) else ""
        listed = f" ({_e(', '.join(examples))}{more})" if examples else ""
        noun = "node" if count == 1 else "nodes"
        lines.append(f"{_or(r.get('nodes'), '?')} {noun}: {_or(r.get('reason'), '?')}{listed}")
    return "<br>".join(lines) if lines else "no reasons recorded"


# --- page frame -----------------------------------------------------------------------------------


def render_page(kind: str, doc: dict[str, Any], query: Mapping[str, str]) -> str:
    """A whole HTML document showing ``doc`` (see the module doc); ``kind`` is ``"map"``,
    ``"pending"``, ``"fit"`` or ``"error"``; ``query`` is the request's query parameters."""
    return drain(render_steps(kind, doc, query))


def render_steps(kind: str, doc: dict[str, Any], query: Mapping[str, str]) -> Steps[str]:
    """:func:`render_page` in steps (:mod:`.steps`): one per node of a map page."""
    if kind not in _TITLES:
        kind = "error"
        doc = {"error": "unknown page"}
    out: list[str] = []
    refresh = _refresh_seconds(query)
    title = _TITLES[kind]
    out.append('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">')
    out.append('<meta name="viewport" content="width=device-width, initial-scale=1">')
    # A data: icon stops browsers asking for /favicon.ico, outside the proxy prefix.
    out.append('<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,">')
    if refresh is not None:
        out.append(f'<meta http-equiv="refresh" content="{refresh}">')
    out.append(f"<title>{_e(title)} · HAMi</title><style>{_CSS}</style></head><body>")
    out.append('<header><nav aria-label="GPU map pages">')
    for target, label in (("map", "Map"), ("pending", "Pending pods"), ("fit", "Would it fit?")):
        current = ' aria-current="page"' if target == kind else ""
        out.append(f'<a href="{_e(_PATHS[target])}"{current}>{label}</a>')
    out.append(f"</nav><h1>{_e(title)}</h1>")
    out.append(_page_meta(kind, doc, query, refresh))
    out.append("</header><main>")
    if "error" in doc and kind != "fit":
        out.append(f'<p class="error" role="alert">Error: {_or(doc.get("error"), "unknown")}</p>')
    elif kind == "map":
        yield from _map_page(out, doc, query)
    elif kind == "pending":
        _pending_page(out, doc, query)
    elif kind == "fit":
        _fit_page(out, doc, query)
    out.append("</main></body></html>\n")
    return "".join(out)


def _page_meta(
    kind: str, doc: Mapping[str, Any], query: Mapping[str, str], refresh: int | None
) -> str:
    parts = []
    if doc.get("generatedAt"):
        parts.append(f"Generated at {_when(doc.get('generatedAt'), None)}")
    if doc.get("leader"):
        parts.append(f"by {_e(doc['leader'])}")
    kept = _kept(kind, query)
    path = _PATHS[kind]
    if refresh is None:
        on = {**kept, "refresh": str(REFRESH_DEFAULT_S)}
        parts.append(
            f'· Auto-refresh off (<a href="{_href(path, on)}">turn on, every '
            f"{REFRESH_DEFAULT_S} s</a>)"
        )
    else:
        off = {k: v for k, v in kept.items() if k != "refresh"}
        parts.append(
            f'· Auto-refresh every {refresh} s (<a href="{_href(path, off)}">turn off</a>)'
        )
    if kind in _JSON_PATHS:
        plain = {k: v for k, v in kept.items() if k != "refresh"}
        parts.append(f'· <a href="{_href(_JSON_PATHS[kind], plain)}">this page as JSON</a>')
    return f'<p class="meta">{" ".join(parts)}</p>'


def _hidden_refresh(query: Mapping[str, str]) -> str:
    """Forms keep auto-refresh as it was (a form's GET replaces the whole query)."""
    if "refresh" not in query:
        return ""
    return f'<input type="hidden" name="refresh" value="{_e(query["refresh"])}">'


def _paging(out: list[str], kind: str, doc: Mapping[str, Any], query: Mapping[str, str]) -> None:
    page = _d(doc.get("page"))
    current, pages = _n(page.get("page")) or 1, _n(page.get("pages")) or 1
    kept = _kept(kind, query)
    links = []
    if current > 1:
        links.append(
            f'<a href="{_href(_PATHS[kind], {**kept, "page": str(int(current) - 1)})}"'
            ' rel="prev">← previous</a>'
        )
    if current < pages:
        links.append(
            f'<a href="{_href(_PATHS[kind], {**kept, "page": str(int(current) + 1)})}"'
            ' rel="next">next →</a>'
        )
    out.append(
        f'<nav aria-label="pages"><p>Page {int(current)} of {int(pages)} '
        f"({_or(page.get('total'), '?')} matching) {' '.join(links)}</p></nav>"
    )


def _per_page_field(query: Mapping[str, str]) -> str:
    value = _e(query.get("perPage", ""))
    return (
        '<label>Per page <input type="number" name="perPage" min="1" max="500" '
        f'value="{value}" placeholder="50"></label>'
    )


# --- the map --------------------------------------------------------------------------------------


def _map_page(out: list[str], doc: Mapping[str, Any], query: Mapping[str, str]) -> Steps[None]:
    now = _parse_time(doc.get("generatedAt"))
    cluster = _d(doc.get("cluster"))
    memory, cores = _d(cluster.get("memory")), _d(cluster.get("cores"))
    out.append('<section aria-labelledby="cluster"><h2 id="cluster">Cluster</h2>')
    out.append('<dl class="summary">')
    out.append(
        f"<dt>Nodes</dt><dd>{_or(cluster.get('nodes'), '?')} "
        f"with {_or(cluster.get('devices'), '?')} devices</dd>"
    )
    for label, dim, unit in (("Memory", memory, _mib), ("Cores", cores, _pct)):
        out.append(
            f"<dt>{label}</dt><dd>{unit(dim.get('allocated'))} allocated of "
            f"{unit(dim.get('total'))}; free {unit(dim.get('free'))} in total, "
            f"largest free on one card {unit(dim.get('largestFree'))}</dd>"
        )
    fragmented = bool(cluster.get("fragmented"))
    out.append(
        "<dt>Fragmentation</dt><dd>"
        + (
            '<span class="warn flag">⚠ fragmented</span>: the free total would hold a typical '
            "request, but no single card's free memory does"
            if fragmented
            else '<span class="ok">✓ not fragmented</span>'
        )
        + "</dd></dl></section>"
    )
    out.append('<section aria-labelledby="nodes"><h2 id="nodes">Nodes</h2>')
    out.append('<form method="get" action="./" role="search"><fieldset><legend>Filter</legend>')
    out.append(
        f'<label>Node name contains <input name="node" value="{_e(query.get("node", ""))}">'
        "</label>"
        f'<label>Vendor/type contains <input name="vendor" '
        f'value="{_e(query.get("vendor", ""))}"></label>'
    )
    checked = " checked" if query.get("fragmented") in ("1", "true", "on") else ""
    out.append(
        f'<label><input type="checkbox" name="fragmented" value="1"{checked}> only fragmented'
        f"</label>{_per_page_field(query)}{_hidden_refresh(query)}"
        '<button type="submit">Show</button></fieldset></form>'
    )
    _paging(out, "map", doc, query)
    nodes = _l(doc.get("nodes"))
    if not nodes:
        out.append("<p>No nodes match.</p>")
    for node in nodes:
        _node(out, _d(node), now)
        yield
    if nodes:
        _paging(out, "map", doc, query)
    out.append("</section>")


def _node(out: list[str], node: Mapping[str, Any], now: datetime | None) -> None:
    name = _or(node.get("name"), "?")
    health = str(node.get("health") or "Unknown")
    free = _d(node.get("free"))
    out.append(f'<section class="node"><h3>Node {name} ')
    if health == "Healthy":
        out.append(_flag(True, "Healthy", ""))
    else:
        out.append(_flag(False, "", health))
    out.append("</h3><p>")
    out.append(f"Last registration {_when(node.get('registeredAt'), now)}")
    if node.get("handshake") is not None:
        out.append(f"; handshake <code>{_e(node['handshake'])}</code>")
    out.append(
        f". Free memory {_mib(free.get('memory'))} in total, largest on one card "
        f"{_mib(free.get('largestMemory'))}; free cores {_pct(free.get('cores'))}, largest "
        f"{_pct(free.get('largestCores'))}."
    )
    if node.get("fragmented"):
        out.append(' <span class="warn flag">⚠ fragmented</span>')
    policy = _d(node.get("policy"))
    if policy:
        text = ", ".join(f"{k} {v}" for k, v in policy.items())
        out.append(f" Policy: {_e(text)}.")
    monitor = node.get("monitor")
    if isinstance(monitor, Mapping):
        if monitor.get("error"):
            out.append(
                f' Measured usage: <span class="muted">no data</span> — {_e(monitor["error"])}.'
            )
        else:
            out.append(f" Measured usage read {_when(monitor.get('at'), now)}.")
    out.append("</p>")
    devices = _l(node.get("devices"))
    if not devices:
        out.append("<p>No devices registered.</p></section>")
        return
    out.append(
        f'<div class="scroll"><table class="cards"><caption>Cards of {name}</caption><thead><tr>'
        '<th scope="col">Card</th><th scope="col">Vendor, mode</th><th scope="col">Health</th>'
        '<th scope="col">Memory allocated</th><th scope="col">Cores allocated</th>'
        '<th scope="col">Shares</th><th scope="col">Holders</th>'
        '<th scope="col">Measured usage</th></tr></thead><tbody>'
    )
    for device in devices:
        _card(out, _d(device))
    out.append("</tbody></table></div></section>")


def _card(out: list[str], device: Mapping[str, Any]) -> None:
    memory, cores, shares = (
        _d(device.get("memory")),
        _d(device.get("cores")),
        _d(device.get("shares")),
    )
    holders = [_d(h) for h in _l(device.get("holders"))]
    out.append(
        f'<tr><th scope="row" class="card">#{_or(device.get("index"), "?")} '
        f"{_or(device.get('type'), '')}"
        f'<br><small class="muted">{_or(device.get("id"), "")}</small></th>'
        f"<td>{_or(device.get('vendor'), '?')}<br>{_or(device.get('mode'), 'unknown mode')}"
    )
    raw = device.get("raw")
    if raw is not None:
        dumped = json.dumps(raw, indent=1, sort_keys=True, default=str)
        out.append(
            f"<details><summary>raw registration (vendor not decoded)</summary>"
            f"<pre>{_e(dumped)}</pre></details>"
        )
    out.append(f"</td><td>{_flag(device.get('health') is not False, 'healthy', 'unhealthy')}")
    if device.get("numa") is not None:
        out.append(f"<br>NUMA {_e(device['numa'])}")
    out.append("</td><td>")
    out.append(
        _bar(memory.get("total"), [(h.get("memory"), i) for i, h in enumerate(holders)], "memory")
    )
    out.append(
        f"{_or(memory.get('allocated'), '?')}/{_or(memory.get('total'), '?')} MiB"
        f"<br>free {_mib(memory.get('free'))}</td><td>"
    )
    out.append(
        _bar(cores.get("total"), [(h.get("cores"), i) for i, h in enumerate(holders)], "cores")
    )
    out.append(
        f"{_or(cores.get('allocated'), '?')}/{_or(cores.get('total'), '?')} %"
        f"<br>free {_pct(cores.get('free'))}</td><td>"
    )
    used, total = _n(shares.get("used")), _n(shares.get("total"))
    out.append(f"{_or(shares.get('used'), '?')}/{_or(shares.get('total'), '?')} used")
    if used is not None and total is not None and 0 < total <= MAX_SHARE_DOTS:
        dots = "●" * min(int(used), int(total)) + "○" * max(int(total) - int(used), 0)
        out.append(f'<br><span class="dots" aria-hidden="true">{dots}</span>')
    out.append('</td><td class="who">')
    if holders:
        out.append('<ul class="holders">')
        for i, holder in enumerate(holders):
            _holder(out, holder, i)
        out.append("</ul>")
    else:
        out.append("none")
    out.append(f'</td><td class="usage">{_device_usage(device.get("usage"), memory)}</td></tr>')


def _bar(total: object, pieces: list[tuple[object, int]], what: str) -> str:
    """A bar of holder segments (width = share of ``total``), numbered like the holder list."""
    whole = _n(total)
    if whole is None or whole <= 0:
        return ""
    segments = []
    for amount, index in pieces:
        n = _n(amount)
        if n is None or n <= 0:
            continue
        width = min(n / whole * 100, 100)
        segments.append(
            f'<div class="s{index % _SEGMENT_COLOURS}" style="width:{width:.2f}%" '
            f'title="holder {index + 1}">{index + 1}</div>'
        )
    return (
        f'<div class="bar" role="img" aria-label="{_e(what)} split by holder; '
        f'numbers below">{"".join(segments)}</div>'
    )


def _holder(out: list[str], holder: Mapping[str, Any], index: int) -> None:
    who = "/".join(str(holder.get(k) or "?") for k in ("namespace", "pod", "container"))
    out.append(
        f'<li value="{index + 1}"><span class="s{index % _SEGMENT_COLOURS}">&nbsp;{index + 1}&nbsp;'
        f"</span> <strong>{_e(who)}</strong>: {_mib(holder.get('memory'))}, "
        f"{_pct(holder.get('cores'))} cores, priority {_or(holder.get('priority'), 'none')}; "
    )
    usage = holder.get("usage")
    if not isinstance(usage, Mapping):
        out.append('used: <span class="muted">no data</span></li>')
        return
    limit = usage.get("memoryLimit")
    of = "" if _n(limit) is None else f" of {_mib(limit)}"
    out.append(
        f"used {_mib(usage.get('memoryUsed'))}{of}, utilization {_pct(usage.get('utilization'))}"
    )
    if usage.get("overLimit"):
        out.append(' <span class="bad flag">⚠ over limit</span>')
    out.append("</li>")


def _device_usage(usage: object, memory: Mapping[str, Any]) -> str:
    if not isinstance(usage, Mapping):
        return '<span class="muted">no data</span>'
    used = _n(usage.get("memoryUsed"))
    text = (
        f"memory {_mib(usage.get('memoryUsed'))} used, utilization {_pct(usage.get('utilization'))}"
    )
    allocated, total = _n(memory.get("allocated")), _n(memory.get("total"))
    if used is not None and total is not None and used > total:
        text += ' <span class="bad flag">⚠ over the card\'s memory</span>'
    elif used is not None and allocated is not None and used > allocated:
        text += ' <span class="warn flag">⚠ more than allocated (use outside the scheduler?)</span>'
    utilization = _n(usage.get("utilization"))
    if utilization is not None and utilization > 100:
        text += ' <span class="bad flag">⚠ utilization over 100 %</span>'
    if usage.get("source"):
        text += f'<br><small class="muted">source: {_e(usage["source"])}</small>'
    return text


# --- pending pods ---------------------------------------------------------------------------------


def _pending_page(out: list[str], doc: Mapping[str, Any], query: Mapping[str, str]) -> None:
    out.append('<form method="get" action="./pending" role="search"><fieldset>')
    out.append(
        "<legend>Filter</legend>"
        f'<label>Namespace <input name="namespace" value="{_e(query.get("namespace", ""))}">'
        f"</label>{_per_page_field(query)}{_hidden_refresh(query)}"
        '<button type="submit">Show</button></fieldset></form>'
    )
    _paging(out, "pending", doc, query)
    items = [_d(item) for item in _l(doc.get("items"))]
    if not items:
        out.append("<p>No GPU pod is pending.</p>")
        return
    # The server sorts; sorting again (stable, one page) keeps the page right whatever built it.
    items.sort(key=lambda item: -(_n(item.get("waitingSeconds")) or 0))
    out.append(
        '<div class="scroll"><table class="pending"><caption>Pending GPU pods, longest wait first'
        '</caption><thead><tr><th scope="col">Waiting</th><th scope="col">Pod</th>'
        '<th scope="col">Request</th><th scope="col">GPU scheduler verdict</th>'
        '<th scope="col">Kubernetes causes</th><th scope="col">Policy</th>'
        '<th scope="col">Nominated node</th></tr></thead><tbody>'
    )
    for item in items:
        out.append(
            f'<tr><td class="num">{_duration(item.get("waitingSeconds"))}'
            f'<br><small class="muted">since {_when(item.get("since"), None)}</small></td>'
            f'<th scope="row">{_or(item.get("namespace"), "?")}/{_or(item.get("name"), "?")}</th>'
            f"<td>{_request(_d(item.get('request')))}</td>"
            f"<td>{_verdict(item.get('verdict'))}</td>"
            f"<td>{_kubernetes(item.get('kubernetes'))}</td>"
            f"<td>{_policy(_d(item.get('policy')))}</td>"
            f"<td>{_or(item.get('nominatedNode'), 'none')}</td></tr>"
        )
    out.append("</tbody></table></div>")


def _request(request: Mapping[str, Any]) -> str:
    lines = []
    for item in _l(request.get("containers")):
        c = _d(item)
        if c.get("memory") is not None:
            memory = _mib(c.get("memory"))
        elif c.get("memoryPercentage") is not None:
            memory = f"{_pct(c.get('memoryPercentage'))} of memory"
        else:
            memory = "whole card memory"
        text = (
            f"{_or(c.get('name'), '?')}: {_or(c.get('count'), '?')} × {_or(c.get('vendor'), 'GPU')}"
            f" of {memory}, {_pct(c.get('cores'))} cores"
        )
        types = [str(t) for t in _l(c.get("type"))]
        if types:
            text += f", type {_e(', '.join(types))}"
        uuids = [str(u) for u in _l(c.get("uuid"))]
        if uuids:
            text += f", cards {_e(', '.join(uuids))}"
        lines.append(text)
    return "<br>".join(lines) if lines else "?"


def _verdict(verdict: object) -> str:
    if not isinstance(verdict, Mapping):
        return '<span class="muted">not yet filtered by the GPU scheduler</span>'
    fitting, considered = _n(verdict.get("fitting")), verdict.get("nodes")
    head = f"{_or(fitting, '?')} of {_or(considered, '?')} nodes fit"
    if fitting == 0:
        head = f'<span class="bad">✗ {head}</span>'
    else:
        head = f'<span class="ok">✓ {head}</span> (waiting on the rest of scheduling)'
    at = verdict.get("at")
    when = f'<br><small class="muted">checked {_when(at, None)}</small>' if at else ""
    return f"{head}<br>{_reasons(_l(verdict.get('reasons')))}{when}"


def _kubernetes(kubernetes: object) -> str:
    if not isinstance(kubernetes, Mapping):
        return '<span class="muted">none reported</span>'
    reason = _or(kubernetes.get("reason"), "")
    causes = kubernetes.get("causes")
    if not isinstance(causes, list):
        # Gates, another scheduler: one message, no histogram to split.
        message = _or(kubernetes.get("message"), "")
        return f"<strong>{reason}</strong>{': ' if reason and message else ''}{message}"
    # kube-scheduler's message without what the GPU scheduler said (its own column).
    listed = (
        "<ul>" + "".join(f"<li>{_e(cause)}</li>" for cause in causes) + "</ul>"
        if causes
        else '<p class="muted">none besides the GPU scheduler\'s</p>'
    )
    preemption = kubernetes.get("preemption")
    tail = f"<p>preemption: {_e(preemption)}</p>" if preemption else ""
    return f"<strong>{reason}</strong>{listed}{tail}"


def _policy(policy: Mapping[str, Any]) -> str:
    if not policy:
        return "default"
    return f"node {_or(policy.get('node'), '?')}, GPU {_or(policy.get('gpu'), '?')}"


# --- would it fit? --------------------------------------------------------------------------------


def _fit_page(out: list[str], doc: Mapping[str, Any], query: Mapping[str, str]) -> None:
    def field(name: str, label: str, kind: str = "number", hint: str = "") -> str:
        extra = ' min="0"' if kind == "number" else ""
        return (
            f'<label>{label} <input type="{kind}" name="{name}"{extra} '
            f'value="{_e(query.get(name, ""))}" placeholder="{_e(hint)}"></label>'
        )

    out.append('<section aria-labelledby="ask"><h2 id="ask">Ask</h2>')
    out.append(
        '<form method="get" action="./fit"><fieldset><legend>A request</legend>'
        + field("gpus", "GPUs", hint="1")
        + field("memory", "Memory per GPU (MiB)")
        + field("memoryPercentage", "or memory %")
        + field("cores", "Cores %")
        + field("type", "Card type", "text", "e.g. A100")
        + field("vendor", "Vendor", "text", "NVIDIA")
        + _hidden_refresh(query)
        + '<button type="submit">Check</button></fieldset></form>'
    )
    out.append(
        '<form method="get" action="./fit"><fieldset><legend>Or a pod manifest</legend>'
        '<label for="manifestText">Pod YAML or JSON</label><br>'
        '<textarea id="manifestText" name="manifestText" rows="10" cols="80" spellcheck="false">'
        f"{_e(query.get('manifestText', ''))}</textarea><br>"
        f'{_hidden_refresh(query)}<button type="submit">Check manifest</button>'
        "</fieldset></form>"
        '<p class="muted">A dry run through the scheduler\'s own selection: nothing is written '
        "or reserved.</p></section>"
    )
    out.append('<section aria-labelledby="answer"><h2 id="answer">Answer</h2>')
    if "error" in doc:
        out.append(f'<p class="error" role="alert">Error: {_or(doc.get("error"), "unknown")}</p>')
    elif "fits" not in doc:
        out.append("<p>Fill in a request or paste a manifest above.</p>")
    elif doc.get("fits"):
        _placements(out, [_d(p) for p in _l(doc.get("placements"))])
    else:
        binding = _d(doc.get("binding"))
        out.append('<p class="answer"><span class="bad flag">✗ fits nowhere now</span>')
        if binding:
            out.append(
                f"; binding dimension: <strong>{_or(binding.get('reason'), '?')}</strong> on "
                f"{_or(binding.get('nodes'), '?')} nodes"
            )
        out.append(f".</p><p>Every reason:<br>{_reasons(_l(doc.get('reasons')))}</p>")
    out.append("</section>")


def _placements(out: list[str], placements: list[Mapping[str, Any]]) -> None:
    out.append(
        f'<p class="answer"><span class="ok flag">✓ fits now</span> on {len(placements)} '
        "node(s), best first.</p>"
    )
    out.append(
        '<table class="placements"><caption>Where it fits</caption><thead><tr>'
        '<th scope="col">Rank</th><th scope="col">Node</th><th scope="col">Cards</th>'
        "</tr></thead><tbody>"
    )
    for rank, placement in enumerate(placements, start=1):
        cards = "<br>".join(
            f"{_or(d.get('id'), '?')}: {_mib(d.get('memory'))}, {_pct(d.get('cores'))} cores"
            for d in (_d(x) for x in _l(placement.get("devices")))
        )
        out.append(
            f'<tr><td class="num">{rank}</td><th scope="row">{_or(placement.get("node"), "?")}'
            f"</th><td>{cards or 'no cards listed'}</td></tr>"
        )
    out.append("</tbody></table>")
