"""The pending-pods view: one row per pending GPU pod, longest wait first — what it asks for, what
the GPU scheduler's filter said of it, what Kubernetes reported besides, and its policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_scheduler.gpumap.page.links import hidden_refresh, paging, per_page_field
from hami_scheduler.gpumap.page.text import (
    as_list,
    as_map,
    duration,
    esc,
    mib,
    number,
    pct,
    reason_lines,
    text_or,
    time_of,
)

__all__ = ["pending_page"]


def pending_page(out: list[str], doc: Mapping[str, Any], query: Mapping[str, str]) -> None:
    out.append('<form method="get" action="./pending" role="search"><fieldset>')
    out.append(
        "<legend>Filter</legend>"
        f'<label>Namespace <input name="namespace" value="{esc(query.get("namespace", ""))}">'
        f"</label>{per_page_field(query)}{hidden_refresh(query)}"
        '<button type="submit">Show</button></fieldset></form>'
    )
    paging(out, "pending", doc, query)
    items = [as_map(item) for item in as_list(doc.get("items"))]
    if not items:
        out.append("<p>No GPU pod is pending.</p>")
        return
    # The server sorts; sorting again (stable, one page) keeps the page right whatever built it.
    items.sort(key=lambda item: -(number(item.get("waitingSeconds")) or 0))
    out.append(
        '<div class="scroll"><table class="pending"><caption>Pending GPU pods, longest wait first'
        '</caption><thead><tr><th scope="col">Waiting</th><th scope="col">Pod</th>'
        '<th scope="col">Request</th><th scope="col">GPU scheduler verdict</th>'
        '<th scope="col">Kubernetes causes</th><th scope="col">Policy</th>'
        '<th scope="col">Nominated node</th></tr></thead><tbody>'
    )
    for item in items:
        out.append(
            f'<tr><td class="num">{duration(item.get("waitingSeconds"))}'
            f'<br><small class="muted">since {time_of(item.get("since"), None)}</small></td>'
            f'<th scope="row">{text_or(item.get("namespace"), "?")}/'
            f"{text_or(item.get('name'), '?')}</th>"
            f"<td>{_request(as_map(item.get('request')))}</td>"
            f"<td>{_verdict(item.get('verdict'))}</td>"
            f"<td>{_kubernetes(item.get('kubernetes'))}</td>"
            f"<td>{_policy(as_map(item.get('policy')))}</td>"
            f"<td>{text_or(item.get('nominatedNode'), 'none')}</td></tr>"
        )
    out.append("</tbody></table></div>")


def _request(request: Mapping[str, Any]) -> str:
    lines = []
    for item in as_list(request.get("containers")):
        c = as_map(item)
        if c.get("memory") is not None:
            memory = mib(c.get("memory"))
        elif c.get("memoryPercentage") is not None:
            memory = f"{pct(c.get('memoryPercentage'))} of memory"
        else:
            memory = "whole card memory"
        text = (
            f"{text_or(c.get('name'), '?')}: {text_or(c.get('count'), '?')} × "
            f"{text_or(c.get('vendor'), 'GPU')}"
            f" of {memory}, {pct(c.get('cores'))} cores"
        )
        types = [str(t) for t in as_list(c.get("type"))]
        if types:
            text += f", type {esc(', '.join(types))}"
        uuids = [str(u) for u in as_list(c.get("uuid"))]
        if uuids:
            text += f", cards {esc(', '.join(uuids))}"
        lines.append(text)
    return "<br>".join(lines) if lines else "?"


def _verdict(verdict: object) -> str:
    if not isinstance(verdict, Mapping):
        return '<span class="muted">not yet filtered by the GPU scheduler</span>'
    fitting, considered = number(verdict.get("fitting")), verdict.get("nodes")
    head = f"{text_or(fitting, '?')} of {text_or(considered, '?')} nodes fit"
    if fitting == 0:
        head = f'<span class="bad">✗ {head}</span>'
    else:
        head = f'<span class="ok">✓ {head}</span> (waiting on the rest of scheduling)'
    at = verdict.get("at")
    when = f'<br><small class="muted">checked {time_of(at, None)}</small>' if at else ""
    return f"{head}<br>{reason_lines(as_list(verdict.get('reasons')))}{when}"


def _kubernetes(kubernetes: object) -> str:
    if not isinstance(kubernetes, Mapping):
        return '<span class="muted">none reported</span>'
    reason = text_or(kubernetes.get("reason"), "")
    causes = kubernetes.get("causes")
    if not isinstance(causes, list):
        # Gates, another scheduler: one message, no histogram to split.
        message = text_or(kubernetes.get("message"), "")
        return f"<strong>{reason}</strong>{': ' if reason and message else ''}{message}"
    # kube-scheduler's message without what the GPU scheduler said (its own column).
    listed = (
        "<ul>" + "".join(f"<li>{esc(cause)}</li>" for cause in causes) + "</ul>"
        if causes
        else '<p class="muted">none besides the GPU scheduler\'s</p>'
    )
    preemption = kubernetes.get("preemption")
    tail = f"<p>preemption: {esc(preemption)}</p>" if preemption else ""
    return f"<strong>{reason}</strong>{listed}{tail}"


def _policy(policy: Mapping[str, Any]) -> str:
    if not policy:
        return "default"
    return f"node {text_or(policy.get('node'), '?')}, GPU {text_or(policy.get('gpu'), '?')}"
