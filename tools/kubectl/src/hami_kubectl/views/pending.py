"""``kubectl hami pending``: pending GPU pods, longest wait first (as served), each with its
request, the extender's verdict grouped by reason and the Kubernetes-side cause apart (pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hami_kubectl.views.text import ago, columns, duration, number, pages, truncate

_HEADER = ("NAMESPACE", "NAME", "WAITING", "REQUEST", "EXTENDER VERDICT", "KUBERNETES")
_WIDE_HEADER = (
    "NAMESPACE", "NAME", "WAITING", "REQUEST", "POLICY", "NOMINATED", "VERDICT AT",
    "EXTENDER VERDICT", "KUBERNETES",
)  # fmt: skip
_MESSAGE_WIDTH = 60


def _container(request: dict[str, Any], wide: bool) -> str:
    count = number(request.get("count"))
    if request.get("memory") is not None:
        memory = f"{number(request.get('memory'))} MiB"
    elif request.get("memoryPercentage") is not None:
        memory = f"{number(request.get('memoryPercentage'))}% mem"
    else:
        memory = "whole card"
    text = f"{count}×{memory}"
    if request.get("cores"):
        text += f" {number(request.get('cores'))}% cores"
    types = [str(t) for t in request.get("type") or []]
    if types:
        text += f" ({'/'.join(types)})"
    vendor = request.get("vendor")
    if wide and vendor and vendor != "NVIDIA":
        text = f"{vendor} {text}"
    if wide and request.get("name"):
        text = f"{request['name']}: {text}"
    return text


def request_text(item: dict[str, Any], wide: bool = False) -> str:
    containers = (item.get("request") or {}).get("containers") or []
    parts = [_container(c, wide) for c in containers if isinstance(c, dict)]
    return "; ".join(parts) if parts else "-"


def verdict_text(verdict: Any, wide: bool = False) -> str:
    """``0/8 nodes fit: 5 CardInsufficientMemory, 3 CardTypeMismatch``; with ``wide`` each
    reason names its example nodes."""
    if not isinstance(verdict, dict):
        return "not filtered by the extender yet"
    head = f"{number(verdict.get('fitting'))}/{number(verdict.get('nodes'))} nodes fit"
    reasons = []
    for reason in verdict.get("reasons") or []:
        if not isinstance(reason, dict):
            continue
        text = f"{number(reason.get('nodes'))} {reason.get('reason', '?')}"
        examples = [str(e) for e in reason.get("examples") or []]
        if wide and examples:
            text += f" ({', '.join(examples)})"
        reasons.append(text)
    return f"{head}: {', '.join(reasons)}" if reasons else head


def kubernetes_text(cause: Any, wide: bool = False) -> str:
    if not isinstance(cause, dict):
        return "-"
    text = str(cause.get("reason") or "?")
    causes = cause.get("causes")
    message = cause.get("message")
    if isinstance(causes, list):
        # kube-scheduler's message without the GPU scheduler's own reasons (their column).
        text += ": " + (", ".join(str(c) for c in causes) if causes else "none besides GPU")
        if wide and cause.get("preemption"):
            text += f"; preemption: {cause['preemption']}"
    elif message:
        text += f": {message}"
    return " ".join(text.split()) if wide else truncate(text, _MESSAGE_WIDTH)


def _policy(item: dict[str, Any]) -> str:
    policy = item.get("policy")
    if not isinstance(policy, dict):
        return "-"
    return f"node {policy.get('node', '?')}, gpu {policy.get('gpu', '?')}"


def render_pending(document: dict[str, Any], *, wide: bool, now: datetime) -> str:
    items = [i for i in document.get("items") or [] if isinstance(i, dict)]
    lines: list[str] = []
    if not items:
        lines.append("no pending GPU pods")
    else:
        rows: list[list[str]] = [list(_WIDE_HEADER if wide else _HEADER)]
        for item in items:
            verdict = item.get("verdict")
            seconds = item.get("waitingSeconds")
            waiting = duration(float(seconds)) if isinstance(seconds, int | float) else "?"
            common = [str(item.get("namespace", "?")), str(item.get("name", "?")), waiting]
            if wide:
                at = verdict.get("at") if isinstance(verdict, dict) else None
                rows.append([
                    *common,
                    request_text(item, wide=True),
                    _policy(item),
                    str(item.get("nominatedNode") or "-"),
                    ago(at, now) if at else "-",
                    verdict_text(verdict, wide=True),
                    kubernetes_text(item.get("kubernetes"), wide=True),
                ])  # fmt: skip
            else:
                rows.append([
                    *common,
                    request_text(item),
                    verdict_text(verdict),
                    kubernetes_text(item.get("kubernetes")),
                ])  # fmt: skip
        lines.extend(columns(rows))
    paging = pages(document.get("page"), "pending pods")
    if paging:
        lines.append(paging)
    return "\n".join(lines) + "\n"


__all__ = ["kubernetes_text", "render_pending", "request_text", "verdict_text"]
