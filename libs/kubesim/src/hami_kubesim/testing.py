"""Run the emulated API server inside a test (or any asyncio program) on a real socket.

async with running_apiserver() as sim:
    api = CoreV1Api(sim.api_client())
    ...
    sim.server.inject_error("create", "pods", code=500, times=1)
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from hami_kubesim.apiserver.hooks import MutatingAdmission
from hami_kubesim.apiserver.http.app import create_app
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.objects.services import endpoint_slice, selectorless_service


def api_client(url: str) -> Any:
    """A ``kubernetes_asyncio`` ``ApiClient`` talking plain HTTP to ``url``; close it with
    ``await client.close()``."""
    from kubernetes_asyncio import client

    config = client.Configuration(host=url)
    config.verify_ssl = False
    return client.ApiClient(configuration=config)


@dataclass
class RunningApiServer:
    """A served :class:`ApiServer`: ``url`` is plain http, ``server`` the in-memory object."""

    url: str
    server: ApiServer
    host: str
    port: int
    _clients: list[Any] = field(default_factory=list)

    def api_client(self) -> Any:
        """A ``kubernetes_asyncio`` ``ApiClient`` for this server, closed on exit."""
        client = api_client(self.url)
        self._clients.append(client)
        return client

    async def close_clients(self) -> None:
        for client in self._clients:
            await client.close()
        self._clients.clear()


async def start_app(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port`` (0 picks a free port); returns the runner and the port."""
    # handler_cancellation: a watch whose client went away ends at once, not at its next write.
    runner = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=5.0, handler_cancellation=True
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, int(bound)


def format_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@asynccontextmanager
async def running_apiserver(
    *,
    history: int = 10_000,
    admission: MutatingAdmission | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    bookmark_interval: float = 60.0,
    watch_queue_limit: int = 10_000,
    server: ApiServer | None = None,
) -> AsyncIterator[RunningApiServer]:
    """Serve an :class:`ApiServer` (a new one unless ``server`` is given) for the duration of the
    block; open watch streams are ended cleanly on exit."""
    api = server or ApiServer(
        history=history,
        admission=admission,
        bookmark_interval=bookmark_interval,
        watch_queue_limit=watch_queue_limit,
    )
    runner, bound = await start_app(create_app(api), host, port)
    running = RunningApiServer(format_url(host, bound), api, host, bound)
    try:
        yield running
    finally:
        await running.close_clients()
        api.shutdown()
        await runner.cleanup()


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    within: float = 10.0,
    what: str = "",
    interval: float | None = None,
) -> None:
    """Poll ``condition`` (a plain or an async check) until it holds; fail the test with an
    ``AssertionError`` naming ``what`` once ``within`` seconds have passed without it holding.

    The condition is always checked at least once, and once more after the deadline has passed,
    so a slow event loop does not turn a met condition into a failure.  It is checked every
    ``interval`` seconds: by default 10 ms, longer for long waits (at most about a thousand
    checks, at most one a second), which keeps a wait of minutes in virtual time cheap.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    step = interval if interval is not None else min(max(0.01, within / 1000), 1.0)
    while True:
        late = loop.time() > deadline
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if late:
            detail = f": {what}" if what else ""
            raise AssertionError(f"condition not met within {within}s{detail}")
        await asyncio.sleep(step)


async def publish_service(
    server: ApiServer,
    *,
    namespace: str,
    name: str,
    ports: Mapping[str, int],
    backends: Sequence[Mapping[str, int]],
    address: str = "127.0.0.1",
) -> None:
    """Create the Service ``namespace/name`` with the named ``ports`` (name → Service port) and
    one EndpointSlice per backend (``<name>-<i>``: one ready endpoint at ``address`` with that
    backend's ports, name → local port), so the API server's service proxy reaches the backends.

    Each backend gets a slice of its own because a slice's ports apply to all its endpoints, and
    local backends share one address on different ports."""
    await server.create("services", selectorless_service(namespace, name, ports))
    for index, backend in enumerate(backends):
        await server.create(
            "endpointslices",
            endpoint_slice(namespace, name, f"{name}-{index}", address, backend),
        )


def write_kubeconfig(
    path: Path, server_url: str, *, token: str = "kubesim", context: str = "kubesim"
) -> Path:
    """A kubeconfig file for clients that take one (``kubectl``, ``kubectl hami``) pointing at
    the API server ``server_url`` (plain http) as a token user; kubesim checks no credentials,
    the token only makes the client send one.  Returns ``path``."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


async def http_json(
    url: str, method: str, path: str, body: Any = None, *, content_type: str = ""
) -> tuple[int, dict[str, Any]]:
    """One plain HTTP request to the API server at ``url``: the status code and the decoded
    JSON body (a ``Status`` for errors), for tests that check exact wire shapes and messages.
    A ``body`` is sent as JSON (``content_type`` overrides, e.g. a merge patch)."""
    import aiohttp

    headers = {"Content-Type": content_type} if content_type else {}
    data = None if body is None else json.dumps(body)
    if data is not None and not content_type:
        headers["Content-Type"] = "application/json"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url + path, data=data, headers=headers) as resp,
    ):
        decoded = await resp.json(content_type=None)
    return resp.status, decoded if isinstance(decoded, dict) else {"value": decoded}
