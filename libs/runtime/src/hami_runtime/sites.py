"""aiohttp sites: bind-address parsing, health routes, the metrics app."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

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
    """A small app serving ``/metrics`` from ``registry`` plus the health routes."""

    async def metrics(_: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(registry)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    add_health_routes(app, ready=ready)
    return app


async def start_site(
    app: web.Application, bind: str, *, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Start serving ``app`` on ``bind``; returns the runner (to clean up) and the bound port.

    Port 0 picks a free port, which tests and the demo read back from the return value.
    """
    host, port = parse_bind(bind)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
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


@dataclass(slots=True)
class ServingSites:
    """A service's two HTTP sites as :func:`serving_sites` started them."""

    port: int
    metrics_port: int
    _runner: web.AppRunner | None

    async def drain(self, background: Sequence[asyncio.Task[None]] = ()) -> None:
        """Stop accepting and let in-flight requests finish, then cancel ``background``.

        In that order, so no request is cut off by the loops it depends on ending first.
        Metrics and probes stay up until the block ends.
        """
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        for task in background:
            task.cancel()


@contextlib.asynccontextmanager
async def serving_sites(
    app: web.Application,
    bind: str,
    *,
    ssl_context: ssl.SSLContext | None,
    metrics: web.Application,
    metrics_bind: str,
) -> AsyncIterator[ServingSites]:
    """Serve ``metrics`` on ``metrics_bind`` and ``app`` on ``bind`` for the block; both are
    stopped on the way out (``app`` first) whatever ends it."""
    metrics_runner, metrics_port = await start_site(metrics, metrics_bind)
    try:
        runner, port = await start_site(app, bind, ssl_context=ssl_context)
        sites = ServingSites(port=port, metrics_port=metrics_port, _runner=runner)
        try:
            yield sites
        finally:
            await sites.drain()
    finally:
        await metrics_runner.cleanup()
