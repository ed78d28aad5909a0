"""The GPU map's HTML pages (hami_scheduler.gpumap.page), read back with the stdlib parser."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

from hami_scheduler.gpumap.page import render_page

from .gpumap_docs import (
    HOSTILE,
    fit_fits,
    fit_nowhere,
    pending_item,
    sample_map,
    sample_pending,
)

VOID = {"meta", "input", "br", "link", "img", "hr", "wbr", "col", "area", "base", "source"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Element | None
    content: list[Element | str] = field(default_factory=list)

    @property
    def children(self) -> list[Element]:
        return [c for c in self.content if isinstance(c, Element)]

    def all_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)

    def find_all(self, tag: str) -> list[Element]:
        found = [c for c in self.children if c.tag == tag]
        for c in self.children:
            found.extend(c.find_all(tag))
        return found

    def ancestors(self) -> list[Element]:
        up, node = [], self.parent
        while node is not None:
            up.append(node)
            node = node.parent
        return up


class Tree(HTMLParser):
    """A small DOM: enough to find elements, their attributes and their text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.current = self.root
        self.doctype: str | None = None
        self.feed(text)
        self.close()

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.content.append(element)
        if tag not in VOID:
            self.current = element

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None, f"stray </{tag}>"
        assert node.parent is not None, f"stray </{tag}>"
        self.current = node.parent

    def handle_data(self, data: str) -> None:
        self.current.content.append(data)


def pages(query: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Every page, each showing :data:`HOSTILE` somewhere (the fit answers in their query)."""
    q = query or {}
    asked = {**q, "type": HOSTILE}
    return [
        ("map", render_page("map", sample_map(), q)),
        ("pending", render_page("pending", sample_pending(), q)),
        ("fit", render_page("fit", fit_fits(), asked)),
        ("fit", render_page("fit", fit_nowhere(), asked)),
        ("fit", render_page("fit", {"error": HOSTILE}, q)),
        ("error", render_page("error", {"error": HOSTILE}, q)),
    ]


HOSTILE_QUERY = {
    "node": HOSTILE,
    "vendor": HOSTILE,
    "namespace": HOSTILE,
    "manifestText": HOSTILE,
    "type": HOSTILE,
    "page": "2",
    "refresh": HOSTILE,
}


@pytest.mark.parametrize("query", [{}, HOSTILE_QUERY], ids=["plain", "hostile-query"])
def test_every_value_is_escaped_and_the_document_is_well_formed(query: dict[str, str]) -> None:
    for kind, text in pages(query):
        tree = Tree(text)
        assert tree.doctype == "doctype html", kind
        assert not tree.root.find_all("script"), kind
        assert tree.current is tree.root, f"{kind}: unclosed elements"
        # The hostile value comes back, whole, as text or as an attribute's value.
        values = [v for e in _walk(tree.root) for v in e.attrs.values()]
        assert HOSTILE in [*values, tree.root.all_text()] or HOSTILE in tree.root.all_text(), kind
        assert "<script>" not in text, kind
        for element in _walk(tree.root):
            assert not any(name.startswith("on") for name in element.attrs), (kind, element)


def test_the_hostile_query_is_kept_as_form_values_not_markup() -> None:
    tree = Tree(render_page("map", sample_map(), HOSTILE_QUERY))
    node_field = [i for i in tree.root.find_all("input") if i.attrs.get("name") == "node"]
    assert node_field[0].attrs["value"] == HOSTILE
    fit = Tree(render_page("fit", {}, HOSTILE_QUERY))
    (textarea,) = fit.root.find_all("textarea")
    assert textarea.all_text() == HOSTILE


@pytest.mark.parametrize("query", [{}, HOSTILE_QUERY, {"refresh": "30"}])
def test_every_url_is_relative(query: dict[str, str]) -> None:
    for kind, text in pages(query):
        for absolute in ('href="/', 'src="http', 'action="/', "url("):
            assert absolute not in text, kind
        for element in _walk(Tree(text).root):
            for name in ("href", "src", "action", "formaction"):
                if name in element.attrs:
                    value = element.attrs[name]
                    assert value.startswith("./") or value == "data:,", (kind, name, value)


def test_tables_have_captions_and_column_and_row_headers() -> None:
    tables = 0
    for kind, text in pages():
        for table in Tree(text).root.find_all("table"):
            tables += 1
            assert table.find_all("caption"), kind
            heads = table.find_all("thead")[0].find_all("th")
            assert heads, kind
            assert all(th.attrs.get("scope") == "col" for th in heads), kind
            for row in table.find_all("tbody")[0].find_all("tr"):
                assert any(th.attrs.get("scope") == "row" for th in row.find_all("th")), kind
    assert tables >= 4  # two nodes' cards, the pending table, the placements


def test_every_form_field_has_a_label() -> None:
    for kind, text in pages({"refresh": "30"}):
        tree = Tree(text)
        label_for = {label.attrs.get("for") for label in tree.root.find_all("label")}
        for field_ in tree.root.find_all("input") + tree.root.find_all("textarea"):
            if field_.attrs.get("type") == "hidden":
                continue
            labelled = any(a.tag == "label" for a in field_.ancestors())
            assert labelled or field_.attrs.get("id") in label_for, (kind, field_.attrs)
        for form in tree.root.find_all("form"):
            assert form.attrs["method"] == "get", kind


def _card_rows(text: str) -> dict[str, Element]:
    """The map's card rows by their row header's text (``#0 NVIDIA A10 GPU-…`` → ``node/index``)."""
    rows = {}
    for section in Tree(text).root.find_all("section"):
        if "node" not in section.attrs.get("class", ""):
            continue
        node_name = section.find_all("h3")[0].all_text().split()[1]
        for row in section.find_all("tbody")[0].find_all("tr"):
            index = row.find_all("th")[0].all_text().split()[0]
            rows[f"{node_name}/{index}"] = row
    return rows


def test_the_map_shows_each_card_its_holders_numbers_and_free_remainder() -> None:
    rows = _card_rows(render_page("map", sample_map(), {}))
    assert set(rows) == {"node-a/#0", "node-a/#1", "node-b/#0", "node-b/#1"}
    cells = [td.all_text() for td in rows["node-a/#0"].find_all("td")]
    vendor, health, memory, cores, shares, holders, _usage = cells
    assert "NVIDIA" in vendor
    assert "hami-core" in vendor
    assert "healthy" in health
    assert "12288/24576 MiB" in memory
    assert "free 12,288 MiB" in memory
    assert "60/100 %" in cores
    assert "3/10 used" in shares
    assert "team-a/train-0/main: 6,144 MiB, 30 % cores, priority 0" in holders
    assert f"team-b/{HOSTILE}/main" in holders
    assert "used 5,000 MiB, utilization 80 %" in holders
    # The bar: one numbered segment per holder, sized by its share of the card.
    bars = rows["node-a/#0"].find_all("td")[2].find_all("div")
    segments = [d for d in bars if "style" in d.attrs]
    assert [s.all_text() for s in segments] == ["1", "2", "3"]
    assert segments[0].attrs["style"] == "width:25.00%"


def test_missing_usage_reads_no_data_and_over_limit_is_flagged_in_words() -> None:
    rows = _card_rows(render_page("map", sample_map(), {}))
    holders = rows["node-a/#0"].find_all("td")[5].find_all("li")
    assert "used: no data" in holders[1].all_text()  # usage null: not 0
    assert "⚠ over limit" in holders[2].all_text()
    assert "⚠ over limit" not in holders[0].all_text()
    assert rows["node-a/#1"].find_all("td")[6].all_text() == "no data"
    assert "13,000 MiB used" in rows["node-a/#0"].find_all("td")[6].all_text()
    assert "more than allocated" in rows["node-a/#0"].find_all("td")[6].all_text()


def test_health_unknown_vendors_and_fragmentation_are_words_not_colour() -> None:
    text = render_page("map", sample_map(), {})
    rows = _card_rows(text)
    assert "✗ unhealthy" in rows["node-b/#0"].find_all("td")[1].all_text()
    unknown = rows["node-b/#1"].find_all("td")[0]
    assert "Acme-NPU" in unknown.all_text()
    assert "acme-share" in unknown.all_text()
    assert '"devmem": 32768' in unknown.find_all("pre")[0].all_text()
    tree = Tree(text)
    headings = [h.all_text() for h in tree.root.find_all("h3")]
    assert headings == ["Node node-a ✓ Healthy", "Node node-b ✗ Unhealthy"]
    assert "⚠ fragmented" in tree.root.find_all("dl")[0].all_text()
    assert "largest free on one card 24,576 MiB" in tree.root.find_all("dl")[0].all_text()
    assert "Last registration 2026-11-29T09:59:18Z (42 s before this page)" in text.replace(
        '<time datetime="2026-11-29T09:59:18Z">2026-11-29T09:59:18Z</time>',
        "2026-11-29T09:59:18Z",
    )


def test_pending_pods_longest_wait_first_with_grouped_verdicts_and_kubernetes_apart() -> None:
    tree = Tree(render_page("pending", sample_pending(), {}))
    rows = tree.root.find_all("tbody")[0].find_all("tr")
    pods = [row.find_all("th")[0].all_text() for row in rows]
    assert pods == ["team-a/big-job", f"team-b/{HOSTILE}", "team-a/short-wait"]
    waited, request, verdict, kubernetes, policy, nominated = (
        td.all_text() for td in rows[0].find_all("td")
    )
    assert waited.startswith("1 h 6 min")
    assert "main: 2 × NVIDIA of 20,000 MiB, 50 % cores, type A100" in request
    assert "✗ 0 of 12 nodes fit" in verdict
    assert "9 nodes: CardInsufficientMemory (node-a, node-b, …)" in verdict
    assert "3 nodes: CardTypeMismatch (node-c, node-d, node-e)" in verdict
    assert kubernetes == "Unschedulable: 0/12 nodes are available"
    assert policy == "node binpack, GPU spread"
    assert nominated == "node-a"
    last = [td.all_text() for td in rows[2].find_all("td")]
    assert "not yet filtered by the GPU scheduler" in last[2]
    assert last[3] == "none reported"


def test_a_pod_fitting_some_nodes_says_so() -> None:
    verdict: dict[str, Any] = {"at": None, "nodes": 3, "fitting": 2, "reasons": []}
    doc = {**sample_pending(), "items": [pending_item("p", 5, verdict=verdict)]}
    text = Tree(render_page("pending", doc, {})).root.all_text()
    assert "✓ 2 of 3 nodes fit" in text


def test_the_fit_page_answers_where_or_what_binds() -> None:
    fits = Tree(render_page("fit", fit_fits(), {"gpus": "1", "memory": "4000"}))
    assert "✓ fits now on 2 node(s)" in fits.root.all_text()
    rows = fits.root.find_all("table")[0].find_all("tbody")[0].find_all("tr")
    assert [r.find_all("th")[0].all_text() for r in rows] == ["node-a", "node-c"]
    assert "GPU-0001-uuid: 4,000 MiB, 30 % cores" in rows[0].all_text()
    gpus = [i for i in fits.root.find_all("input") if i.attrs.get("name") == "gpus"]
    assert gpus[0].attrs["value"] == "1"
    nowhere = Tree(render_page("fit", fit_nowhere(), {})).root.all_text()
    assert "✗ fits nowhere now; binding dimension: CardInsufficientMemory on 9 nodes" in nowhere
    assert "3 nodes: NodeInsufficientDevice (node-c, …)" in nowhere
    empty = Tree(render_page("fit", {}, {})).root.all_text()
    assert "Fill in a request or paste a manifest above." in empty
    error = Tree(render_page("fit", {"error": "manifest line 3: bad"}, {}))
    alerts = [p for p in error.root.find_all("p") if p.attrs.get("role") == "alert"]
    assert alerts[0].all_text() == "Error: manifest line 3: bad"
    forms = error.root.find_all("form")
    assert [f.attrs["action"] for f in forms] == ["./fit", "./fit"]
    assert any(t.attrs["name"] == "manifestText" for t in error.root.find_all("textarea"))


def test_refresh_only_when_asked_and_a_link_toggles_it() -> None:
    off = render_page("pending", sample_pending(), {"namespace": "team-a"})
    assert 'http-equiv="refresh"' not in off
    assert 'href="./pending?namespace=team-a&amp;refresh=30">turn on' in off
    on = render_page("pending", sample_pending(), {"namespace": "team-a", "refresh": "10"})
    assert '<meta http-equiv="refresh" content="10">' in on
    assert 'href="./pending?namespace=team-a">turn off' in on
    assert '<input type="hidden" name="refresh" value="10">' in on
    clamped = render_page("map", sample_map(), {"refresh": "1"})
    assert '<meta http-equiv="refresh" content="5">' in clamped


def test_paging_links_keep_the_filters() -> None:
    doc = sample_map()
    doc["page"] = {"page": 2, "perPage": 2, "total": 6, "pages": 3}
    text = render_page("map", doc, {"node": "gpu a", "page": "2", "perPage": "2", "x": "y"})
    assert 'href="./?node=gpu+a&amp;perPage=2&amp;page=1" rel="prev"' in text
    assert 'href="./?node=gpu+a&amp;perPage=2&amp;page=3" rel="next"' in text
    assert "Page 2 of 3 (6 matching)" in text
    assert 'href="./api/v1/map?node=gpu+a&amp;perPage=2&amp;page=2">this page as JSON' in text


def test_navigation_marks_the_current_page() -> None:
    for kind, path in (("map", "./"), ("pending", "./pending"), ("fit", "./fit")):
        nav = Tree(render_page(kind, {}, {})).root.find_all("nav")[0]
        current = [a.attrs["href"] for a in nav.find_all("a") if "aria-current" in a.attrs]
        assert current == [path]


def test_odd_documents_render_rather_than_fail() -> None:
    odd: list[tuple[str, dict[str, Any]]] = [
        ("map", {}),
        ("map", {"nodes": [{"devices": [{"memory": None, "holders": [{}], "usage": {}}]}]}),
        ("map", {"nodes": ["x"], "cluster": "y", "page": None}),
        ("pending", {"items": [{}, None, {"verdict": {"reasons": [{}]}}]}),
        ("fit", {"fits": True, "placements": [{}]}),
        ("nonsense", {}),
    ]
    for kind, doc in odd:
        assert Tree(render_page(kind, doc, {})).root.find_all("main")


def _walk(element: Element) -> list[Element]:
    found = [element]
    for child in element.children:
        found.extend(_walk(child))
    return found


def test_rendering_is_linear_in_the_page() -> None:
    from .gpumap_docs import large_map

    small = render_page("map", large_map(5), {})
    big = render_page("map", large_map(50), {})
    # No per-node cost beyond the node's own markup: 10× the nodes, about 10× the bytes.
    assert 9 < len(big) / len(small) < 11
    assert len(re.findall(r'<tr><th scope="row" class="card">', big)) == 50 * 8
