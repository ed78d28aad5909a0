"""A small aiohttp client for the calls the kubelet stand-in and cluster mode make.

Plain JSON over the API server's HTTP API: get, create, merge-patch (objects and their status
subresource), delete, and a list-then-watch stream that re-lists after ``410 Expired`` or a lost
connection. Failures surface as :class:`hami_kubesim.errors.ApiError` with the server's code,
reason and message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import aiohttp

from hami_kubesim.errors import ApiError

MERGE_PATCH = "application/merge-patch+json"
_REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)
_WATCH_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10)
_WATCH_SECONDS = 300
_MAX_BACKOFF = 2.0


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """``type`` is ``SYNC`` for a fresh list (``objects`` holds every item), else a watch type."""

    type: str
    obj: dict[str, Any]
    objects: tuple[dict[str, Any], ...] = ()


def pod_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


def node_path(name: str, subresource: str = "") -> str:
    path = f"/api/v1/nodes/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


class KubeApi:
    """JSON requests against one API server; use as an async context manager."""

    def __init__(self, *, base_url: str) -> None:
        self._base = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(timeout=_REQUEST_TIMEOUT)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeApi used outside 'async with'")
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self._open().request(
            method, self._base + path, data=data, headers=headers, params=params
        ) as response:
            text = await response.text()
            return _decode(response.status, text)

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def merge_patch_retrying(
        self, path: str, body: Mapping[str, Any], *, attempts: int = 10
    ) -> dict[str, Any] | None:
        """Merge-patch, retrying what a kubelet's status manager retries (5xx, 429, lost
        connections) with backoff; ``None`` when the object is gone (404)."""
        delay = 0.05
        for attempt in range(attempts):
            try:
                return await self.merge_patch(path, body)
            except ApiError as error:
                if error.code == 404:
                    return None
                if (error.code < 500 and error.code != 429) or attempt == attempts - 1:
                    raise
            except (aiohttp.ClientError, OSError, TimeoutError):
                if attempt == attempts - 1:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF)
        return None

    async def delete(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return await self.request("DELETE", path, body=body)

    async def list_and_watch(
        self, collection: str, *, field_selector: str = ""
    ) -> AsyncIterator[WatchEvent]:
        """List ``collection`` then watch it, forever; a ``SYNC`` event follows every (re)list.

        Re-lists after ``410 Expired`` and after a failed request; re-watches from the last
        resourceVersion seen when a stream ends normally.
        """
        backoff = 0.05
        while True:
            try:
                params = {"fieldSelector": field_selector} if field_selector else {}
                listing = await self.request("GET", collection, params=params)
                version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
                yield WatchEvent("SYNC", listing, tuple(listing.get("items") or []))
                backoff = 0.05
                expired = False
                while not expired:
                    async for event in self._watch(collection, params, version):
                        if event.type == "ERROR":
                            expired = True
                            break
                        new_version = (event.obj.get("metadata") or {}).get("resourceVersion")
                        version = str(new_version or version)
                        if event.type != "BOOKMARK":
                            yield event
            except (aiohttp.ClientError, ApiError, TimeoutError, ValueError):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)

    async def _watch(
        self, collection: str, params: Mapping[str, str], version: str | None
    ) -> AsyncIterator[WatchEvent]:
        query = {
            **params,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(_WATCH_SECONDS),
        }
        if version:
            query["resourceVersion"] = version
        async with self._open().get(
            self._base + collection, params=query, timeout=_WATCH_TIMEOUT
        ) as response:
            if response.status != 200:
                _decode(response.status, await response.text())
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        raw = json.loads(line)
                        yield WatchEvent(str(raw.get("type", "")), raw.get("object") or {})


def _decode(status: int, text: str) -> dict[str, Any]:
    """The JSON body of a 2xx reply, else :class:`ApiError` from the server's Status."""
    try:
        body = json.loads(text) if text else {}
    except ValueError:
        body = {"message": text}
    if not isinstance(body, dict):
        body = {"message": text}
    if 200 <= status < 300:
        return body
    raise ApiError(
        status,
        str(body.get("message", text)),
        reason=str(body["reason"]) if "reason" in body else None,
        details=body.get("details"),
    )
