"""``KubeClient``: raw-JSON REST calls and watch streams over a kubernetes-asyncio ``ApiClient``.

Objects go in and come out as plain decoded JSON dicts; no generated model classes (importing
this module imports nothing of kubernetes-asyncio: see :mod:`hami_kube.config`). Every request
goes through ``ApiClient.call_api(..., _preload_content=False)``, which adds the configured
authentication (bearer token with refresh, client certificates via the TLS context) and returns
the raw aiohttp response; this module reads the body itself and maps non-2xx answers to
``hami_kube.errors``. Watches read the chunked body line by line (one WatchEvent per line).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import structlog

from hami_kube.config import KubeSettings, create_api_client
from hami_kube.errors import TransportError, api_error
from hami_kube.objects import ObjectView
from hami_kube.ratelimit import TokenBucket
from hami_kube.resources import JsonObject, Resource

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

log = structlog.get_logger(__name__)

JSON = "application/json"

QueryValue = str | int | bool
Query = Mapping[str, QueryValue | None]


class PatchType(StrEnum):
    """PATCH content types the API server accepts."""

    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"


WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
WATCH_EVENT_TYPES: frozenset[str] = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream: ``type`` and the object (a ``Status`` for ERROR)."""

    type: WatchEventType
    object: JsonObject


def _query_pairs(query: Query | None) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for key, value in (query or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            pairs.append((key, "true" if value else "false"))
        else:
            pairs.append((key, str(value)))
    return pairs


def _decode_object(data: bytes, *, method: str, path: str) -> JsonObject:
    if not data.strip():
        return {}
    try:
        decoded = json.loads(data)
    except ValueError as exc:
        raise TransportError(f"{method} {path}: response is not JSON") from exc
    if not isinstance(decoded, dict):
        raise TransportError(f"{method} {path}: response is not a JSON object")
    return decoded


def parse_watch_line(line: bytes) -> WatchEvent | None:
    """Decode one watch-stream line; None for a blank line. Raises TransportError on garbage."""
    if not line.strip():
        return None
    try:
        decoded = json.loads(line)
    except ValueError as exc:
        raise TransportError("watch stream line is not JSON") from exc
    if not isinstance(decoded, dict):
        raise TransportError("watch stream line is not a JSON object")
    kind = decoded.get("type")
    obj = decoded.get("object")
    if kind not in WATCH_EVENT_TYPES or not isinstance(obj, dict):
        raise TransportError(f"watch stream line is not a WatchEvent (type {str(kind)[:32]!r})")
    event_type: WatchEventType = kind
    return WatchEvent(type=event_type, object=obj)


class KubeClient:
    """Typed raw-JSON access to the API server. Cheap to share; owns nothing but a reference."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        request_timeout_s: float = 30.0,
        rate_limiter: TokenBucket | None = None,
        watch_read_margin_s: float = 30.0,
    ) -> None:
        self._api = api_client
        self._timeout = request_timeout_s
        self._limiter = rate_limiter
        self._watch_margin = watch_read_margin_s

    @property
    def api_client(self) -> ApiClient:
        return self._api

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    # -- plumbing ----------------------------------------------------------------------------
    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None,
        body: Any,
        content_type: str,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        if self._limiter is not None:
            await self._limiter.acquire()
        headers = {"Accept": JSON, "Content-Type": content_type}
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=_query_pairs(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout_s: float | None = None,
    ) -> JsonObject:
        """Send one request and return the decoded JSON object of a 2xx answer.

        Raises an ``ApiError`` subclass for non-2xx answers and ``TransportError`` when no usable
        answer arrived.
        """
        timeout = aiohttp.ClientTimeout(total=timeout_s or self._timeout)
        response = await self._send(
            method, path, query=query, body=body, content_type=content_type, client_timeout=timeout
        )
        try:
            async with response:
                data = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if not 200 <= status < 300:
            raise api_error(status, data, method=method, path=path)
        return _decode_object(data, method=method, path=path)

    # -- verbs -------------------------------------------------------------------------------
    async def get(
        self, resource: Resource, name: str, *, namespace: str | None = None
    ) -> JsonObject:
        return await self.request("GET", resource.object_path(name, namespace))

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> JsonObject:
        """The List object (``items`` and ``metadata.resourceVersion``)."""
        query: dict[str, QueryValue | None] = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "resourceVersion": resource_version,
            "limit": limit,
            "continue": continue_token,
        }
        return await self.request("GET", resource.collection_path(namespace), query=query)

    async def create(
        self, resource: Resource, obj: Mapping[str, Any], *, namespace: str | None = None
    ) -> JsonObject:
        """POST ``obj``; the namespace defaults to ``obj.metadata.namespace``."""
        target = namespace if namespace is not None else ObjectView(obj).namespace or None
        return await self.request(
            "POST", resource.collection_path(target if resource.namespaced else None), body=obj
        )

    async def replace(
        self, resource: Resource, obj: Mapping[str, Any], *, subresource: str | None = None
    ) -> JsonObject:
        """PUT ``obj`` at its own path; its ``metadata.resourceVersion`` is the precondition."""
        view = ObjectView(obj)
        path = resource.object_path(view.name, view.namespace or None, subresource)
        return await self.request("PUT", path, body=obj)

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> JsonObject:
        path = resource.object_path(name, namespace, subresource)
        return await self.request("PATCH", path, body=body, content_type=patch_type.value)

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        """DELETE with optional ``uid``/``resourceVersion`` preconditions."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {
            key: value
            for key, value in (("uid", uid), ("resourceVersion", resource_version))
            if value is not None
        }
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return await self.request("DELETE", resource.object_path(name, namespace), body=options)

    async def post_subresource(
        self,
        resource: Resource,
        name: str,
        subresource: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
    ) -> JsonObject:
        """POST to a subresource, e.g. ``pods/{name}/binding``."""
        return await self.request(
            "POST", resource.object_path(name, namespace, subresource), body=body
        )

    @asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Open a watch; yields an iterator of events that ends when the server ends the stream.

        A non-2xx answer raises its ``ApiError``; an ERROR event is yielded like any other (the
        caller decides, e.g. re-list on 410). A broken stream raises ``TransportError``.
        """
        query: dict[str, QueryValue | None] = {
            "watch": True,
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": True if allow_bookmarks else None,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        path = resource.collection_path(namespace)
        read_timeout = None if timeout_seconds is None else timeout_seconds + self._watch_margin
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self._timeout, sock_connect=self._timeout, sock_read=read_timeout
        )
        response = await self._send(
            "GET", path, query=query, body=None, content_type=JSON, client_timeout=timeout
        )
        async with response:
            if not 200 <= response.status < 300:
                try:
                    data = await response.read()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    raise TransportError(f"GET {path} (watch): {exc}") from exc
                raise api_error(response.status, data, method="GET", path=path)
            yield _events(response, path)


async def _events(response: aiohttp.ClientResponse, path: str) -> AsyncIterator[WatchEvent]:
    while True:
        try:
            line = await response.content.readline()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise TransportError(f"watch {path} broke: {type(exc).__name__}: {exc}") from exc
        if not line:
            return
        event = parse_watch_line(line)
        if event is not None:
            yield event


@asynccontextmanager
async def open_client(
    settings: KubeSettings,
    *,
    environ: Mapping[str, str] | None = None,
    service_account: Path | None = None,
) -> AsyncIterator[KubeClient]:
    """A ``KubeClient`` for ``settings`` whose underlying ``ApiClient`` closes on exit.

    ``environ`` and ``service_account``: as :func:`hami_kube.config.load_configuration` takes
    them (the process environment and the pod's service-account directory by default).
    """
    api = await create_api_client(settings, environ, service_account=service_account)
    limiter = TokenBucket(settings.qps, settings.burst) if settings.qps > 0 else None
    try:
        yield KubeClient(api, request_timeout_s=settings.request_timeout_s, rate_limiter=limiter)
    finally:
        await api.close()


__all__ = [
    "JSON",
    "WATCH_EVENT_TYPES",
    "KubeClient",
    "PatchType",
    "Query",
    "QueryValue",
    "WatchEvent",
    "WatchEventType",
    "open_client",
    "parse_watch_line",
]
