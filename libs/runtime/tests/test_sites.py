"""The shared service runtime: bind parsing and the health/metrics site over a real socket."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from hami_runtime.sites import metrics_app, parse_bind, site, start_site


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        (":9395", ("0.0.0.0", 9395)),
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:443", ("::1", 443)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_parse_bind_accepts_go_style_addresses(bind: str, expected: tuple[str, int]) -> None:
    assert parse_bind(bind) == expected


@pytest.mark.parametrize("bind", ["9395", "host:", "host:port", ":70000", ""])
def test_parse_bind_rejects_garbage_with_the_value_in_the_message(bind: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_bind(bind)


async def test_metrics_site_serves_registry_and_readiness() -> None:
    registry = CollectorRegistry()
    Counter("demo_things", "Things counted.", registry=registry).inc(3)
    ready = {"value": False}
    runner, port = await start_site(
        metrics_app(registry, ready=lambda: ready["value"]), "127.0.0.1:0"
    )
    try:
        assert port > 0
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            async with http.get("/metrics") as resp:
                assert resp.status == 200
                assert "demo_things_total 3.0" in await resp.text()
            async with http.get("/healthz") as resp:
                assert resp.status == 200
            async with http.get("/readyz") as resp:
                assert resp.status == 503
            ready["value"] = True
            async with http.get("/readyz") as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()


async def test_a_site_lets_a_request_in_flight_finish_then_stops() -> None:
    release = asyncio.Event()
    entered = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="done")

    app = web.Application()
    app.router.add_get("/", slow)
    async with aiohttp.ClientSession() as http:
        serving = site(app, "127.0.0.1:0", within=12.0)
        port = await serving.__aenter__()
        request = asyncio.create_task(http.get(f"http://127.0.0.1:{port}/"))
        await entered.wait()
        leaving = asyncio.create_task(serving.__aexit__(None, None, None))
        await asyncio.sleep(0)
        release.set()
        response = await request
        assert await response.text() == "done"
        await leaving
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"http://127.0.0.1:{port}/")


async def test_a_request_that_never_finishes_is_cut_off_after_the_drain() -> None:
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def hang(_: web.Request) -> web.Response:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_get("/", hang)
    async with aiohttp.ClientSession() as http:
        serving = site(app, "127.0.0.1:0", within=0.5)
        port = await serving.__aenter__()
        request = asyncio.create_task(http.get(f"http://127.0.0.1:{port}/"))
        # An idle keep-alive connection beside it must not hold the site either.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await entered.wait()
        started = asyncio.get_running_loop().time()
        await serving.__aexit__(None, None, None)
        assert asyncio.get_running_loop().time() - started < 2.0
        assert cancelled.is_set()
        with pytest.raises(aiohttp.ClientError):
            await request
        writer.close()
        await writer.wait_closed()
        del reader
