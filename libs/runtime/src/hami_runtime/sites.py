"""aiohttp sites: bind-address parsing, health routes, the metrics apps."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry


def parse_bind(bind: str, *, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """``host:port``, ``:port`` or ``[v6]:port`` → ``(host, port)``; ``:9395`` binds all hosts."""
    host, sep, port_text = bind.rpartition(":")
    if not sep:
        raise ValueError(f"bind address {bind!r} has no port (want host:port or :port)")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bind address {bind!r} has a non-numeric port") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bind address {bind!r} has port out of range")
    host = host.strip("[]") or default_host
    return host, port


def add_health_routes(app: web.Application, *, ready: Callable[[], bool]) -> None:
    """``/healthz`` answers while the process serves; ``/readyz`` only when ``ready()``."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def metrics_app(registry: CollectorRegistry, *, ready: Callable[[], bool]) -> web.Application:
    """A small app serving ``/metrics`` from ``registry`` plus the health routes.  The text is
    generated on the event loop: for registries that are cheap to collect."""

    async def render() -> bytes:
        return prometheus_client.generate_latest(registry)

    return rendered_metrics_app(render, ready=ready)


def rendered_metrics_app(
    render: Callable[[], Awaitable[bytes]], *, ready: Callable[[], bool]
) -> web.Application:
    """``/metrics`` answered with the exposition text ``render()`` returns (a service whose
    scrape is costly reads and renders in a worker thread there), plus the health routes."""

    async def metrics(_: web.Request) -> web.Response:
        body = await render()
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    add_health_routes(app, ready=ready)
    return app


async def start_site(
    app: web.Application,
    bind: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    max_line_size: int | None = None,
) -> tuple[web.AppRunner, int]:
    """Start serving ``app`` on ``bind``; returns the runner (to clean up) and the bound port.

    Port 0 picks a free port, which tests and the demo read back from the return value.
    ``max_line_size``: the longest request line (and header line) taken, when aiohttp's 8190
    bytes are too few (a GET that carries a document in its query).
    """
    host, port = parse_bind(bind)
    # Passed on to each connection's request handler (aiohttp's RequestHandler).
    handler: dict[str, Any] = {}
    if max_line_size is not None:
        handler["max_line_size"] = max_line_size
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, shutdown_timeout=5.0, **handler
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    bound = port
    # aiohttp exposes no public accessor for the bound port; the runner's addresses have it.
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    return runner, bound


DRAIN_SHARE: Final = 0.4
"""The share of a site's exit bound its requests in flight get to finish (and again to end once
cancelled)."""


@contextlib.asynccontextmanager
async def site(
    app: web.Application,
    bind: str,
    *,
    within: float,
    ssl_context: ssl.SSLContext | None = None,
    max_line_size: int | None = None,
) -> AsyncIterator[int]:
    """Serve ``app`` on ``bind`` for the block; yields the bound port (``:0`` picks one).

    Leaving takes at most ``within`` seconds (pass the lifecycle step's own bound): it stops
    accepting, closes idle keep-alive connections, lets the requests in flight finish for
    :data:`DRAIN_SHARE` of ``within``, then cancels them and waits as long again.  So a client
    that holds a connection or never finishes its request cannot hold the service, and no
    handler outlives the step: the rest of ``within`` is margin, because a step cut off by its
    bound in the middle of aiohttp's shutdown would leave the handlers uncancelled.
    """
    drain_s = DRAIN_SHARE * within
    runner, port = await start_site(app, bind, ssl_context=ssl_context, max_line_size=max_line_size)
    try:
        yield port
    finally:
        for running in runner.sites:
            await running.stop()
        server = runner.server
        if server is not None:
            server.pre_shutdown()
            await server.shutdown(drain_s)
        await runner.cleanup()
