"""One table row per card of the map view: vendor and mode, health, memory and core bars split by
holder, shares, the holders, and the usage the vGPU monitors measured.

A DRA card (``mode: "dra"``) says in words that kube-scheduler's allocator places on it, counts
its claims instead of shares, and lists each holder as ``namespace/claim → pods``.

Colour never carries meaning alone: each bar segment carries its holder's ordinal, the same one
the holder list shows, and the numbers are written beside every bar.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from hami_scheduler.gpumap.page.text import as_list, as_map, esc, flag, mib, number, pct, text_or

__all__ = ["MAX_SHARE_DOTS", "card_row"]

DRA_MODE: Final = "dra"


MAX_SHARE_DOTS: Final = 20
"""More shares than this (some vendors count 100 per card) print as text only."""
_SEGMENT_COLOURS: Final = 8
"""As many as the stylesheet's ``.s0`` to ``.s7`` (:mod:`.shell`); holders past them reuse them."""


def card_row(out: list[str], device: Mapping[str, Any]) -> None:
    memory, cores, shares = (
        as_map(device.get("memory")),
        as_map(device.get("cores")),
        as_map(device.get("shares")),
    )
    holders = [as_map(h) for h in as_list(device.get("holders"))]
    out.append(
        f'<tr><th scope="row" class="card">#{text_or(device.get("index"), "?")} '
        f"{text_or(device.get('type'), '')}"
        f'<br><small class="muted">{text_or(device.get("id"), "")}</small></th>'
        f"<td>{text_or(device.get('vendor'), '?')}<br>{_mode(device)}"
    )
    raw = device.get("raw")
    if raw is not None:
        dumped = json.dumps(raw, indent=1, sort_keys=True, default=str)
        out.append(
            f"<details><summary>raw registration (vendor not decoded)</summary>"
            f"<pre>{esc(dumped)}</pre></details>"
        )
    out.append(f"</td><td>{flag(device.get('health') is not False, 'healthy', 'unhealthy')}")
    if device.get("numa") is not None:
        out.append(f"<br>NUMA {esc(device['numa'])}")
    out.append("</td><td>")
    out.append(
        _bar(memory.get("total"), [(h.get("memory"), i) for i, h in enumerate(holders)], "memory")
    )
    out.append(
        f"{text_or(memory.get('allocated'), '?')}/{text_or(memory.get('total'), '?')} MiB"
        f"<br>free {mib(memory.get('free'))}</td><td>"
    )
    out.append(
        _bar(cores.get("total"), [(h.get("cores"), i) for i, h in enumerate(holders)], "cores")
    )
    out.append(
        f"{text_or(cores.get('allocated'), '?')}/{text_or(cores.get('total'), '?')} %"
        f"<br>free {pct(cores.get('free'))}</td><td>"
    )
    used, total = number(shares.get("used")), number(shares.get("total"))
    if device.get("mode") == DRA_MODE:
        out.append(f"{text_or(shares.get('used'), '?')} claims")
        total = None
    else:
        out.append(f"{text_or(shares.get('used'), '?')}/{text_or(shares.get('total'), '?')} used")
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


def _mode(device: Mapping[str, Any]) -> str:
    mode = device.get("mode")
    if mode != DRA_MODE:
        return text_or(mode, "unknown mode")
    about = as_map(device.get("dra"))
    text = "DRA (kube-scheduler)"
    if about.get("published") is False:
        text += ' <span class="warn flag">⚠ no longer published</span>'
    return f'{text}<br><small class="muted">{text_or(about.get("device"), "")}</small>'


def _who(holder: Mapping[str, Any]) -> str:
    if "claim" not in holder:
        return "/".join(str(holder.get(k) or "?") for k in ("namespace", "pod", "container"))
    pods = [str(as_map(p).get("name") or "?") for p in as_list(holder.get("pods"))]
    claim = f"{holder.get('namespace') or '?'}/{holder.get('claim') or '?'}"
    return f"{claim} → {', '.join(pods) or 'no pod'}"


def _bar(total: object, pieces: list[tuple[object, int]], what: str) -> str:
    """A bar of holder segments (width = share of ``total``), numbered like the holder list."""
    whole = number(total)
    if whole is None or whole <= 0:
        return ""
    segments = []
    for amount, index in pieces:
        n = number(amount)
        if n is None or n <= 0:
            continue
        width = min(n / whole * 100, 100)
        segments.append(
            f'<div class="s{index % _SEGMENT_COLOURS}" style="width:{width:.2f}%" '
            f'title="holder {index + 1}">{index + 1}</div>'
        )
    return (
        f'<div class="bar" role="img" aria-label="{esc(what)} split by holder; '
        f'numbers below">{"".join(segments)}</div>'
    )


def _holder(out: list[str], holder: Mapping[str, Any], index: int) -> None:
    who = _who(holder)
    out.append(
        f'<li value="{index + 1}"><span class="s{index % _SEGMENT_COLOURS}">&nbsp;{index + 1}&nbsp;'
        f"</span> <strong>{esc(who)}</strong>: {mib(holder.get('memory'))}, "
        f"{pct(holder.get('cores'))} cores, priority {text_or(holder.get('priority'), 'none')}; "
    )
    usage = holder.get("usage")
    if not isinstance(usage, Mapping):
        out.append('used: <span class="muted">no data</span></li>')
        return
    limit = usage.get("memoryLimit")
    of = "" if number(limit) is None else f" of {mib(limit)}"
    out.append(
        f"used {mib(usage.get('memoryUsed'))}{of}, utilization {pct(usage.get('utilization'))}"
    )
    if usage.get("overLimit"):
        out.append(' <span class="bad flag">⚠ over limit</span>')
    out.append("</li>")


def _device_usage(usage: object, memory: Mapping[str, Any]) -> str:
    if not isinstance(usage, Mapping):
        return '<span class="muted">no data</span>'
    used = number(usage.get("memoryUsed"))
    text = (
        f"memory {mib(usage.get('memoryUsed'))} used, utilization {pct(usage.get('utilization'))}"
    )
    allocated, total = number(memory.get("allocated")), number(memory.get("total"))
    if used is not None and total is not None and used > total:
        text += ' <span class="bad flag">⚠ over the card\'s memory</span>'
    elif used is not None and allocated is not None and used > allocated:
        text += ' <span class="warn flag">⚠ more than allocated (use outside the scheduler?)</span>'
    utilization = number(usage.get("utilization"))
    if utilization is not None and utilization > 100:
        text += ' <span class="bad flag">⚠ utilization over 100 %</span>'
    if usage.get("source"):
        text += f'<br><small class="muted">source: {esc(usage["source"])}</small>'
    return text
