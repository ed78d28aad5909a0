"""The shared service runtime: bind parsing and the health/metrics site over a real socket."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from hami_runtime.sites import metrics_app, parse_bind, serving_sites, start_site


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


async def test_serving_sites_drain_stops_the_app_first_then_the_background() -> None:
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    metrics = metrics_app(CollectorRegistry(), ready=lambda: True)
    background = asyncio.create_task(asyncio.Event().wait(), name="loop")
    async with (
        serving_sites(
            app, "127.0.0.1:0", ssl_context=None, metrics=metrics, metrics_bind="127.0.0.1:0"
        ) as sites,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"http://127.0.0.1:{sites.port}/") as response:
            assert await response.text() == "hi"
        await sites.drain([background])
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"http://127.0.0.1:{sites.port}/")
        # Probes and metrics stay up until the block ends.
        async with http.get(f"http://127.0.0.1:{sites.metrics_port}/healthz") as response:
            assert response.status == 200
        await asyncio.sleep(0)
        assert background.cancelled()
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"http://127.0.0.1:{sites.metrics_port}/healthz")
