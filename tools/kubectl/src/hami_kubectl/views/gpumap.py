"""``kubectl hami map``: a line per node, then a row per card with the pods holding it; the
cluster's free capacity (largest piece beside total) last (pure).

A DRA card (``mode: "dra"``, placed by kube-scheduler) counts its claims instead of shares and
shows each holder as ``namespace/claim→pods``; its figures stay out of the node's and the
cluster's free capacity, as in the document, and are printed apart."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hami_kubectl.views.text import ago, columns, number, pages

_HEADER = ("GPU", "TYPE", "MEMORY(MiB)", "CORES", "SHARES", "HOLDERS")
_WIDE_HEADER = (
    "GPU", "TYPE", "VENDOR", "MODE", "NUMA", "MEMORY(MiB)", "CORES", "SHARES", "USED", "ID",
    "HOLDERS",
)  # fmt: skip


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ratio(block: Any, suffix: str = "") -> str:
    block = _dict(block)
    return f"{number(block.get('allocated'))}/{number(block.get('total'))}{suffix}"


def _claim_name(holder: dict[str, Any]) -> str:
    pods = [str(_dict(p).get("name") or "?") for p in holder.get("pods") or []]
    return f"{holder.get('namespace', '?')}/{holder.get('claim')}→{','.join(pods) or '-'}"


def _holder(holder: dict[str, Any], wide: bool) -> str:
    if "claim" in holder:
        name = _claim_name(holder)
    else:
        name = f"{holder.get('namespace', '?')}/{holder.get('pod', '?')}"
    if not wide:
        return f"{name}({number(holder.get('memory'))} MiB)"
    container = holder.get("container")
    if container:
        name += f"/{container}"
    parts = [f"{number(holder.get('memory'))} MiB", f"{number(holder.get('cores'))}%"]
    usage = _dict(holder.get("usage"))
    if usage:
        used = usage.get("memoryUsed")
        parts.append("used " + (f"{number(used)} MiB" if used is not None else "no data"))
        if usage.get("overLimit"):
            parts.append("OVER LIMIT")
    return f"{name}({', '.join(parts)})"


def _usage(device: dict[str, Any]) -> str:
    usage = device.get("usage")
    if not isinstance(usage, dict):
        return "no data"
    used, util = usage.get("memoryUsed"), usage.get("utilization")
    memory = f"{number(used)} MiB" if used is not None else "no data"
    busy = f"{number(util)}%" if util is not None else "no data"
    return f"{memory}, {busy}"


def _card_row(device: dict[str, Any], wide: bool) -> list[str]:
    label = f"GPU{number(device.get('index'))}"
    if device.get("health") is False:
        label += " (unhealthy)"
    holders = [_holder(h, wide) for h in device.get("holders") or [] if isinstance(h, dict)]
    holder_text = ", ".join(holders) if holders else "-"
    shares = _dict(device.get("shares"))
    share_text = f"{number(shares.get('used'))}/{number(shares.get('total'))}"
    if device.get("mode") == "dra":
        share_text = f"{number(shares.get('used'))} claims"
    memory, cores = _ratio(device.get("memory")), _ratio(device.get("cores"), "%")
    kind = str(device.get("type") or "?")
    if not wide:
        return [f"  {label}", kind, memory, cores, share_text, holder_text]
    raw = device.get("raw")
    if isinstance(raw, dict) and raw:
        holder_text += "  raw: " + ", ".join(f"{k}={v}" for k, v in sorted(raw.items()))
    return [
        f"  {label}",
        kind,
        str(device.get("vendor") or "?"),
        str(device.get("mode") or "?"),
        number(device.get("numa")),
        memory,
        cores,
        share_text,
        _usage(device),
        str(device.get("id") or "?"),
        holder_text,
    ]


def _node_line(node: dict[str, Any], now: datetime) -> str:
    free = _dict(node.get("free"))
    parts = [
        str(node.get("name", "?")),
        str(node.get("health") or "?"),
        f"registered {ago(node.get('registeredAt'), now)}"
        if node.get("vendors") or not node.get("dra")
        else "DRA only (placed by kube-scheduler)",
        f"free {number(free.get('memory'))} MiB (largest on one card "
        f"{number(free.get('largestMemory'))} MiB)",
        f"cores free {number(free.get('cores'))}% (largest {number(free.get('largestCores'))}%)",
    ]
    if node.get("fragmented"):
        parts.append("FRAGMENTED")
    dra = _dict(node.get("dra"))
    if dra:
        parts.append(_dra_free(dra))
    return " · ".join(parts)


def _dra_free(dra: dict[str, Any]) -> str:
    memory = _dict(dra.get("memory"))
    return (
        f"DRA {number(dra.get('devices'))} GPUs, free {number(memory.get('free'))} MiB "
        f"(largest {number(memory.get('largestFree'))} MiB)"
    )


def cluster_line(cluster: Any) -> str:
    cluster = _dict(cluster)
    memory, cores = _dict(cluster.get("memory")), _dict(cluster.get("cores"))
    dra = _dict(cluster.get("dra"))
    fragmented = "FRAGMENTED" if cluster.get("fragmented") else "not fragmented"
    return (
        f"cluster: {number(cluster.get('nodes'))} nodes, {number(cluster.get('devices'))} GPUs"
        f" · memory {_ratio(memory)} MiB allocated, free {number(memory.get('free'))} MiB"
        f" (largest piece {number(memory.get('largestFree'))} MiB)"
        f" · cores {_ratio(cores, '%')} allocated, free {number(cores.get('free'))}%"
        f" (largest {number(cores.get('largestFree'))}%) · {fragmented}"
        + (f" · {_dra_free(dra)}" if number(dra.get("devices")) not in ("?", "0") else "")
    )


def render_map(document: dict[str, Any], *, wide: bool, now: datetime) -> str:
    nodes = [n for n in document.get("nodes") or [] if isinstance(n, dict)]
    lines: list[str] = []
    if not nodes:
        lines.append("no nodes match")
    else:
        rows: list[list[str]] = [list(_WIDE_HEADER if wide else _HEADER)]
        owners: list[int] = []  # the node of each card row
        for index, node in enumerate(nodes):
            for device in node.get("devices") or []:
                if isinstance(device, dict):
                    rows.append(_card_row(device, wide))
                    owners.append(index)
        aligned = columns([[f"  {rows[0][0]}", *rows[0][1:]], *rows[1:]])
        lines.append(aligned[0])
        cards = iter(zip(owners, aligned[1:], strict=True))
        pending = next(cards, None)
        for index, node in enumerate(nodes):
            lines.append(_node_line(node, now))
            while pending is not None and pending[0] == index:
                lines.append(pending[1])
                pending = next(cards, None)
            if not node.get("devices"):
                lines.append("  (no GPUs registered)")
    lines.append("")
    lines.append(cluster_line(document.get("cluster")))
    state = _dict(document.get("dra"))
    if state.get("watched") is False and state.get("reason"):
        lines.append(f"DRA GPUs not shown: {state['reason']}")
    paging = pages(document.get("page"), "nodes")
    if paging:
        lines.append(paging)
    return "\n".join(lines) + "\n"


__all__ = ["cluster_line", "render_map"]
