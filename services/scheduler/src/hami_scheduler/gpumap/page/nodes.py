"""The map view: the cluster summary, the node filter and one section per node of the page.

A generator (:mod:`hami_scheduler.gpumap.steps`) that yields after each node, so that a map page
of hundreds of cards never holds the extender's event loop for long; each node's cards are
written by :mod:`.cards`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hami_scheduler.gpumap.page.cards import card_row
from hami_scheduler.gpumap.page.links import hidden_refresh, paging, per_page_field
from hami_scheduler.gpumap.page.text import (
    as_list,
    as_map,
    esc,
    flag,
    mib,
    parse_time,
    pct,
    text_or,
    time_of,
)
from hami_scheduler.gpumap.steps import Steps

__all__ = ["map_page"]


def map_page(out: list[str], doc: Mapping[str, Any], query: Mapping[str, str]) -> Steps[None]:
    now = parse_time(doc.get("generatedAt"))
    cluster = as_map(doc.get("cluster"))
    memory, cores = as_map(cluster.get("memory")), as_map(cluster.get("cores"))
    out.append('<section aria-labelledby="cluster"><h2 id="cluster">Cluster</h2>')
    out.append('<dl class="summary">')
    out.append(
        f"<dt>Nodes</dt><dd>{text_or(cluster.get('nodes'), '?')} "
        f"with {text_or(cluster.get('devices'), '?')} devices</dd>"
    )
    for label, dim, unit in (("Memory", memory, mib), ("Cores", cores, pct)):
        out.append(
            f"<dt>{label}</dt><dd>{unit(dim.get('allocated'))} allocated of "
            f"{unit(dim.get('total'))}; free {unit(dim.get('free'))} in total, "
            f"largest free on one card {unit(dim.get('largestFree'))}</dd>"
        )
    _dra_figures(out, as_map(cluster.get("dra")), as_map(doc.get("dra")))
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
        f'<label>Node name contains <input name="node" value="{esc(query.get("node", ""))}">'
        "</label>"
        f'<label>Vendor/type contains <input name="vendor" '
        f'value="{esc(query.get("vendor", ""))}"></label>'
    )
    checked = " checked" if query.get("fragmented") in ("1", "true", "on") else ""
    out.append(
        f'<label><input type="checkbox" name="fragmented" value="1"{checked}> only fragmented'
        f"</label>{per_page_field(query)}{hidden_refresh(query)}"
        '<button type="submit">Show</button></fieldset></form>'
    )
    paging(out, "map", doc, query)
    nodes = as_list(doc.get("nodes"))
    if not nodes:
        out.append("<p>No nodes match.</p>")
    for node in nodes:
        _node(out, as_map(node), now)
        yield
    if nodes:
        paging(out, "map", doc, query)
    out.append("</section>")


def _dra_figures(out: list[str], figures: Mapping[str, Any], state: Mapping[str, Any]) -> None:
    """The DRA cards' own totals (kube-scheduler places on them, not this extender), or why
    they are not shown."""
    if state and state.get("watched") is False:
        out.append(
            f'<dt>DRA</dt><dd><span class="warn flag">⚠ DRA GPUs not shown</span>: '
            f"{text_or(state.get('reason'), 'not watched')}</dd>"
        )
        return
    if not figures.get("devices"):
        return
    memory = as_map(figures.get("memory"))
    out.append(
        f"<dt>DRA</dt><dd>{text_or(figures.get('devices'), '?')} devices placed by "
        f"kube-scheduler: {mib(memory.get('allocated'))} allocated of {mib(memory.get('total'))},"
        f" free {mib(memory.get('free'))}, largest on one card {mib(memory.get('largestFree'))}"
        " (not counted above)</dd>"
    )


def _pools(pools: list[Any]) -> str:
    """``, pool d generation 3`` per pool the node's DRA cards are published in."""
    named = (as_map(pool) for pool in pools)
    return "".join(
        f", pool {text_or(p.get('pool'), '?')} generation {text_or(p.get('generation'), '?')}"
        for p in named
    )


def _node(out: list[str], node: Mapping[str, Any], now: datetime | None) -> None:
    name = text_or(node.get("name"), "?")
    health = str(node.get("health") or "Unknown")
    free = as_map(node.get("free"))
    out.append(f'<section class="node"><h3>Node {name} ')
    if health == "Healthy":
        out.append(flag(True, "Healthy", ""))
    else:
        out.append(flag(False, "", health))
    out.append("</h3><p>")
    dra = as_map(node.get("dra"))
    dra_only = bool(dra) and not node.get("vendors")
    if dra_only:
        # No register annotation to date: the cards come from the node agent's ResourceSlice.
        out.append(f"GPUs published by ResourceSlice (DRA){_pools(as_list(dra.get('pools')))}")
        if node.get("registeredAt") is not None:
            out.append(f"; last registration {time_of(node.get('registeredAt'), now)}")
    else:
        out.append(f"Last registration {time_of(node.get('registeredAt'), now)}")
    if node.get("handshake") is not None:
        out.append(f"; handshake <code>{esc(node['handshake'])}</code>")
    if not dra_only:
        # The extender's free figures; a DRA-only node has none, and "0 MiB free" would read
        # as a full node.
        out.append(
            f". Free memory {mib(free.get('memory'))} in total, largest on one card "
            f"{mib(free.get('largestMemory'))}; free cores {pct(free.get('cores'))}, largest "
            f"{pct(free.get('largestCores'))}"
        )
    out.append(".")
    if node.get("fragmented"):
        out.append(' <span class="warn flag">⚠ fragmented</span>')
    if dra:
        memory = as_map(dra.get("memory"))
        apart = "" if dra_only else ", not counted above"
        out.append(
            f" DRA cards (placed by kube-scheduler{apart}): free "
            f"{mib(memory.get('free'))} of {mib(memory.get('total'))}, largest on one card "
            f"{mib(memory.get('largestFree'))}."
        )
    policy = as_map(node.get("policy"))
    if policy:
        text = ", ".join(f"{k} {v}" for k, v in policy.items())
        out.append(f" Policy: {esc(text)}.")
    monitor = node.get("monitor")
    if isinstance(monitor, Mapping):
        if monitor.get("error"):
            out.append(
                f' Measured usage: <span class="muted">no data</span> — {esc(monitor["error"])}.'
            )
        else:
            out.append(f" Measured usage read {time_of(monitor.get('at'), now)}.")
    out.append("</p>")
    devices = as_list(node.get("devices"))
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
        card_row(out, as_map(device))
    out.append("</tbody></table></div></section>")
