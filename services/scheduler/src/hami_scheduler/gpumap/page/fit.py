"""The "would it fit?" view: the two probe forms (a request by its numbers, or a pod manifest's raw
text) and the answer — where it fits, best first, or why it fits nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_scheduler.gpumap.page.links import hidden_refresh
from hami_scheduler.gpumap.page.text import as_list, as_map, esc, mib, pct, reason_lines, text_or

__all__ = ["fit_page"]


def fit_page(out: list[str], doc: Mapping[str, Any], query: Mapping[str, str]) -> None:
    def field(name: str, label: str, kind: str = "number", hint: str = "") -> str:
        extra = ' min="0"' if kind == "number" else ""
        return (
            f'<label>{label} <input type="{kind}" name="{name}"{extra} '
            f'value="{esc(query.get(name, ""))}" placeholder="{esc(hint)}"></label>'
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
        + hidden_refresh(query)
        + '<button type="submit">Check</button></fieldset></form>'
    )
    out.append(
        '<form method="get" action="./fit"><fieldset><legend>Or a pod manifest</legend>'
        '<label for="manifestText">Pod YAML or JSON</label><br>'
        '<textarea id="manifestText" name="manifestText" rows="10" cols="80" spellcheck="false">'
        f"{esc(query.get('manifestText', ''))}</textarea><br>"
        f'{hidden_refresh(query)}<button type="submit">Check manifest</button>'
        "</fieldset></form>"
        '<p class="muted">A dry run through the scheduler\'s own selection: nothing is written '
        "or reserved.</p></section>"
    )
    out.append('<section aria-labelledby="answer"><h2 id="answer">Answer</h2>')
    if "error" in doc:
        out.append(
            f'<p class="error" role="alert">Error: {text_or(doc.get("error"), "unknown")}</p>'
        )
    elif "fits" not in doc:
        out.append("<p>Fill in a request or paste a manifest above.</p>")
    elif doc.get("fits"):
        _placements(out, [as_map(p) for p in as_list(doc.get("placements"))])
    else:
        binding = as_map(doc.get("binding"))
        out.append('<p class="answer"><span class="bad flag">✗ fits nowhere now</span>')
        if binding:
            out.append(
                f"; binding dimension: <strong>{text_or(binding.get('reason'), '?')}</strong> on "
                f"{text_or(binding.get('nodes'), '?')} nodes"
            )
        out.append(f".</p><p>Every reason:<br>{reason_lines(as_list(doc.get('reasons')))}</p>")
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
            f"{text_or(d.get('id'), '?')}: {mib(d.get('memory'))}, {pct(d.get('cores'))} cores"
            for d in (as_map(x) for x in as_list(placement.get("devices")))
        )
        out.append(
            f'<tr><td class="num">{rank}</td><th scope="row">{text_or(placement.get("node"), "?")}'
            f"</th><td>{cards or 'no cards listed'}</td></tr>"
        )
    out.append("</tbody></table>")
