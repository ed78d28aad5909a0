"""``kubectl hami fit``: where the request fits now, or the dimension that binds (pure)."""

from __future__ import annotations

from typing import Any

from hami_kubectl.views.text import columns, number


def _device(device: dict[str, Any], wide: bool) -> str:
    ident = str(device.get("id") or "?")
    if not wide and len(ident) > 12:
        ident = ident[:12] + "…"
    return f"{ident} {number(device.get('memory'))} MiB {number(device.get('cores'))}%"


def _reasons(document: dict[str, Any]) -> list[str]:
    rows = [["REASON", "NODES", "EXAMPLES"]]
    for reason in document.get("reasons") or []:
        if isinstance(reason, dict):
            examples = ", ".join(str(e) for e in reason.get("examples") or []) or "-"
            rows.append([str(reason.get("reason", "?")), number(reason.get("nodes")), examples])
    return columns(rows) if len(rows) > 1 else []


def render_fit(document: dict[str, Any], *, wide: bool) -> str:
    placements = [p for p in document.get("placements") or [] if isinstance(p, dict)]
    lines: list[str] = []
    if document.get("fits"):
        count = len(placements)
        lines.append(f"fits now on {count} node{'s' if count != 1 else ''} (best first):")
        rows = [["NODE", "DEVICES"]]
        for placement in placements:
            devices = [d for d in placement.get("devices") or [] if isinstance(d, dict)]
            rows.append([
                str(placement.get("node", "?")),
                ", ".join(_device(d, wide) for d in devices) or "-",
            ])  # fmt: skip
        lines.extend(columns(rows))
        if wide:
            reasons = _reasons(document)
            if reasons:
                lines += ["", "elsewhere:", *reasons]
    else:
        binding = document.get("binding")
        if isinstance(binding, dict):
            lines.append(
                f"does not fit anywhere now: {binding.get('reason', '?')} binds "
                f"({number(binding.get('nodes'))} nodes)"
            )
        else:
            lines.append("does not fit anywhere now")
        lines.extend(_reasons(document))
    return "\n".join(lines) + "\n"


__all__ = ["render_fit"]
