"""The API server's service proxy over HTTP: resolve the backend (:mod:`..proxy`), forward the
request and stream the answer back, as k8s.io/apimachinery's ``UpgradeAwareHandler`` and proxy
``Transport`` do for ``services/proxy``.

Forwarded: the method, the cleaned path, the raw query and the body; every request header except
the hop-by-hop ones, ``Host`` and ``Authorization`` (kube-apiserver's authentication filter
removes the user's credentials before any handler runs); ``X-Forwarded-For`` gets the client's
address appended, and ``X-Forwarded-Uri``/``-Host``/``-Proto`` say where the request came in.
Answered: the backend's status, its headers less the hop-by-hop ones, its body as it arrives
(no decompression).  A backend that cannot be reached is a 503 ``error trying to reach service:
...`` (the proxy ``Transport``'s error); ``https`` backends are dialled without verifying their
certificate, as kube-apiserver's proxy transport does.
"""

from __future__ import annotations

import ssl
from typing import Final
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.apiserver.proxy import (
    Location,
    ProxyRequest,
    backend_path,
    locate,
    split_scheme_name_port,
)
from hami_kubesim.apiserver.selectors import label_selector_from_query
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.objects.resources import ENDPOINT_SLICES, SERVICES
from hami_kubesim.objects.services import SERVICE_NAME_LABEL

_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED: Final = _HOP_BY_HOP | {"host", "authorization", "content-length"}
_DIAL_TIMEOUT_S: Final = 30.0
"""kube-apiserver's proxy dialer gives up connecting after 30 s."""


def parse_proxy_path(path: str) -> ProxyRequest | None:
    """``ProxyRequest`` for a raw (still percent-encoded) URL path naming a Service's proxy
    subresource; ``None`` for any other path."""
    parts = path.split("/")
    # ['', 'api', 'v1', 'namespaces', ns, 'services', id, 'proxy', ...]
    if len(parts) < 8 or parts[1:4] != ["api", "v1", "namespaces"] or parts[5] != "services":
        return None
    if parts[7] != "proxy" or not parts[4] or not parts[6]:
        return None
    rest = parts[8:]
    return ProxyRequest(
        namespace=unquote(parts[4]),
        service_id=unquote(parts[6]),
        path=None if not rest else unquote("/".join(rest)),
    )


def resolve(server: ApiServer, target: ProxyRequest) -> Location:
    """The backend for ``target``, read from the store (raises the API server's error)."""
    split = split_scheme_name_port(target.service_id)
    name = split[1] if split else ""
    entry = server.store.find(SERVICES, target.namespace, name) if name else None
    slices = []
    if name:
        selector = label_selector_from_query(f"{SERVICE_NAME_LABEL}={name}")
        page = server.store.select(ENDPOINT_SLICES, namespace=target.namespace, labels=selector)
        slices = [e.obj for e in page.entries]
    return locate(target.service_id, service=entry.obj if entry else None, slices=slices)


def _request_headers(request: web.Request) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict(
        (k, v) for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED
    )
    client = request.remote or ""
    prior = request.headers.get("X-Forwarded-For")
    if client:
        headers["X-Forwarded-For"] = f"{prior}, {client}" if prior else client
    headers["X-Forwarded-Uri"] = request.rel_url.raw_path
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    return headers


class ServiceProxy:
    """Forwards proxied requests; owns one client session, closed with the application."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=insecure, force_close=True),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=_DIAL_TIMEOUT_S),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(
        self, request: web.Request, target: ProxyRequest, location: Location
    ) -> web.StreamResponse:
        raw_query = request.rel_url.raw_query_string
        if target.path is None and request.method in ("GET", "HEAD"):
            # ``proxyRedirectsforRootPath``: relative links only work below ``proxy/``.
            query = f"?{raw_query}" if raw_query else ""
            return web.Response(
                status=301, headers={"Location": f"{request.rel_url.raw_path}/{query}"}
            )
        url = URL.build(
            scheme=location.scheme,
            host=location.host,
            port=location.port,
            path=backend_path(target.path),
            query_string=raw_query,
            encoded=False,
        )
        body = request.content if request.body_exists else None
        try:
            upstream = await self._client().request(
                request.method,
                url,
                headers=_request_headers(request),
                data=body,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            message = f"error trying to reach service: {_dial_error(location, exc)}"
            raise StatusError(503, message) from exc
        async with upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers.add(key, value)
            await response.prepare(request)
            if request.method != "HEAD":
                try:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                except (TimeoutError, aiohttp.ClientError):
                    # The answer has started: all a proxy can do is end it early.
                    if request.transport is not None:
                        request.transport.close()
                    return response
            await response.write_eof()
            return response


def _dial_error(location: Location, exc: BaseException) -> str:
    """Go's wording for the common dial failures, so clients match on what they know."""
    where = f"dial tcp {location.authority}:{location.port}"
    cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(cause, ConnectionRefusedError):
        return f"{where}: connect: connection refused"
    if isinstance(cause, TimeoutError):
        return f"{where}: i/o timeout"
    return f"{where}: {cause}"


__all__ = ["ServiceProxy", "parse_proxy_path", "resolve"]
