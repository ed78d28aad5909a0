"""The GPU map's pages in a real browser: headless Chromium loads them from a real socket.

The pages are rendered from hand-built documents (``gpumap_docs``) and served under the path the
API server's service proxy gives them, with the page's Content-Security-Policy, so the tests
show that relative links, forms and paging stay under the prefix and that nothing the CSP forbids
is needed.  Screenshots of the map, the pending view and the fit answer are kept in
``screenshot_dir`` (``build/screenshots/`` by default) for a person to look at.

Without Chromium (not installed, and no root or apt to install it) these tests skip, saying why.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp import web

from hami_kubesim.browser import Browser, Page
from hami_kubesim.testing import start_app
from hami_scheduler.gpumap.page import render_page

from .gpumap_docs import HOSTILE, fit_fits, fit_nowhere, sample_map, sample_pending

# The first test may install Chromium with apt (minutes, once per machine).
pytestmark = pytest.mark.timeout(700)

PREFIX = "/api/v1/namespaces/kube-system/services/hami-scheduler:gpumap/proxy/"
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: probe
spec:
  containers:
  - name: main
    image: cuda
    resources:
      limits:
        nvidia.com/gpu: 1
        nvidia.com/gpumem: 4000
"""


@dataclass
class PageServer:
    """The pages under :data:`PREFIX`; ``requests`` lists every path and query asked for."""

    url: str
    map_doc: dict[str, Any]
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def _fit_doc(query: dict[str, str]) -> dict[str, Any]:
    """A stand-in for the server's probe: the manifest's or the request's answer."""
    if "manifestText" in query:
        if "nvidia.com/gpu" not in query["manifestText"]:
            return {"error": "manifestText: the pod requests no GPU"}
        return fit_fits()
    if not query.get("gpus"):
        return {}
    return fit_nowhere() if int(query.get("memory") or 0) > 24576 else fit_fits()


@pytest.fixture
async def served() -> AsyncIterator[PageServer]:
    server = PageServer("", sample_map())

    async def handle(request: web.Request) -> web.Response:
        query = dict(request.query)
        server.requests.append((request.path, query))
        kind = request.match_info["kind"] or "map"
        if kind == "map":
            doc = server.map_doc
        elif kind == "pending":
            doc = sample_pending()
        else:
            doc = _fit_doc(query)
        return web.Response(
            text=render_page(kind, doc, query),
            content_type="text/html",
            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store"},
        )

    async def unknown(request: web.Request) -> web.Response:
        server.requests.append((request.path, dict(request.query)))
        raise web.HTTPNotFound()

    app = web.Application()
    app.router.add_get(PREFIX + "{kind:(|pending|fit)}", handle)
    app.router.add_route("*", "/{tail:.*}", unknown)
    runner, port = await start_app(app, "127.0.0.1", 0)
    server.url = f"http://127.0.0.1:{port}{PREFIX}"
    try:
        yield server
    finally:
        await runner.cleanup()


def _assert_clean(page: Page, server: PageServer) -> None:
    """Every request stayed under the prefix and succeeded; the CSP refused nothing."""
    assert page.console_errors == []
    assert all(path.startswith(PREFIX) for path, _ in server.requests), server.requests
    assert {r.status for r in page.responses} == {200}, page.responses
    assert all(r.url.startswith(server.url) for r in page.responses)


async def test_the_map_shows_cards_and_holders_under_the_proxy_prefix(
    browser: Browser, served: PageServer, screenshot_dir: Path
) -> None:
    page = await browser.new_page()
    await page.goto(served.url)
    cards = await page.texts("table.cards tbody th[scope=row]")
    assert [c.split()[0] for c in cards] == ["#0", "#1", "#0", "#1"]
    holders = await page.texts("table.cards ul.holders li")
    assert holders[0].split()[0] == "1"  # the number its bar segment carries
    assert "team-a/train-0/main: 6,144 MiB, 30 % cores" in holders[0]
    # The hostile pod name is text on the page, not a script.
    assert f"team-b/{HOSTILE}/main" in holders[1]
    assert await page.evaluate("document.scripts.length") == 0
    assert "used: no data" in holders[1]
    assert "⚠ over limit" in holders[2]
    memory = await page.texts("table.cards tbody tr td:nth-of-type(3)")
    assert memory[0].startswith("1\n2\n3\n12288/24576 MiB")  # numbered segments, then numbers
    widths = await page.evaluate(
        "Array.from(document.querySelectorAll('table.cards .bar'))[0]"
        ".children[0].getBoundingClientRect().width"
    )
    bar = await page.evaluate(
        "document.querySelector('table.cards .bar').getBoundingClientRect().width"
    )
    assert widths / bar == pytest.approx(0.25, abs=0.02)  # 6144 of 24576 MiB, drawn to scale
    assert "⚠ fragmented" in (await page.texts("dl.summary"))[0]
    await page.screenshot(screenshot_dir / "gpumap-map.png")
    # Auto-refresh: off until asked; the link turns it on (a meta refresh) and off again.
    await page.click_and_wait("header a[href*='refresh=30']")
    assert parse_qs(urlsplit(await page.url()).query) == {"refresh": ["30"]}
    assert await page.evaluate("document.querySelector('meta[http-equiv=refresh]').content") == (
        "30"
    )
    await page.click_and_wait("header p.meta a")
    assert await page.url() == served.url
    # The nav's relative links stay under the prefix.
    await page.click_and_wait("nav a[href='./pending']")
    assert await page.url() == served.url + "pending"
    _assert_clean(page, served)


async def test_filters_and_paging_stay_under_the_prefix(
    browser: Browser, served: PageServer
) -> None:
    served.map_doc = copy.deepcopy(served.map_doc)
    served.map_doc["page"] = {"page": 1, "perPage": 2, "total": 6, "pages": 3}
    page = await browser.new_page()
    await page.goto(served.url)
    await page.fill("input[name=node]", "node-")
    await page.click_and_wait("main form button")
    assert served.requests[-1] == (PREFIX, {"node": "node-", "vendor": "", "perPage": ""})
    await page.click_and_wait("a[rel=next]")
    assert served.requests[-1] == (PREFIX, {"node": "node-", "page": "2"})
    _assert_clean(page, served)


async def test_pending_pods_show_their_reasons(
    browser: Browser, served: PageServer, screenshot_dir: Path
) -> None:
    page = await browser.new_page()
    await page.goto(served.url + "pending")
    pods = await page.texts("table.pending tbody th[scope=row]")
    assert pods == ["team-a/big-job", f"team-b/{HOSTILE}", "team-a/short-wait"]
    verdicts = await page.texts("table.pending tbody td:nth-of-type(3)")
    assert "9 nodes: CardInsufficientMemory (node-a, node-b, …)" in verdicts[0]
    assert "not yet filtered by the GPU scheduler" in verdicts[2]
    causes = await page.texts("table.pending tbody td:nth-of-type(4)")
    assert causes[0] == "Unschedulable: 0/12 nodes are available"
    await page.screenshot(screenshot_dir / "gpumap-pending.png")
    _assert_clean(page, served)


async def test_the_fit_form_answers_a_request_and_a_manifest(
    browser: Browser, served: PageServer, screenshot_dir: Path
) -> None:
    page = await browser.new_page()
    await page.goto(served.url + "fit")
    assert "Fill in a request" in (await page.texts("main"))[0]
    await page.fill("input[name=gpus]", "1")
    await page.fill("input[name=memory]", "4000")
    await page.fill("input[name=cores]", "30")
    await page.click_and_wait("form:nth-of-type(1) button")
    path, query = served.requests[-1]
    assert path == PREFIX + "fit"
    assert {k: v for k, v in query.items() if v} == {"gpus": "1", "memory": "4000", "cores": "30"}
    assert (await page.texts("p.answer"))[0].startswith("✓ fits now on 2 node(s)")
    assert await page.texts("table.placements th[scope=row]") == ["node-a", "node-c"]
    await page.screenshot(screenshot_dir / "gpumap-fit.png")

    await page.fill("input[name=memory]", "40000")
    await page.click_and_wait("form:nth-of-type(1) button")
    answer = (await page.texts("p.answer"))[0]
    assert "binding dimension: CardInsufficientMemory on 9 nodes" in answer

    # The manifest form sends the raw text; the server reads it (no script encodes it).
    await page.fill("textarea[name=manifestText]", MANIFEST)
    await page.click_and_wait("form:nth-of-type(2) button")
    assert served.requests[-1] == (PREFIX + "fit", {"manifestText": MANIFEST.replace("\n", "\r\n")})
    assert (await page.texts("p.answer"))[0].startswith("✓ fits now")
    await page.fill("textarea[name=manifestText]", "kind: Pod")
    await page.click_and_wait("form:nth-of-type(2) button")
    assert await page.texts("[role=alert]") == ["Error: manifestText: the pod requests no GPU"]
    assert await page.evaluate("document.querySelector('textarea').value") == "kind: Pod"
    _assert_clean(page, served)
