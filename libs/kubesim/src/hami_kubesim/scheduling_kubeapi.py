"""A small raw-JSON Kubernetes API client and a list-and-watch cache, used by both loops.

The scheduling loop and the admission dispatcher talk to the API server exactly like any external
client: HTTP requests and chunked watch streams, JSON in and out.  ``KubeApi`` is the request side;
``Informer`` keeps an in-memory copy of one collection current (LIST, then WATCH from the list's
resourceVersion, re-LIST on ``410 Expired`` or a broken stream) and reports every change to a
synchronous handler.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import structlog

__all__ = ["ApiError", "EventHandler", "Informer", "KubeApi", "object_key", "until_ready"]

log = structlog.get_logger(__name__)

EventHandler = Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]
"""``(type, old, new)`` with type ``ADDED``/``MODIFIED``/``DELETED``; ``new`` is the deleted
object's last state on ``DELETED``."""

_GONE = 410


class ApiError(Exception):
    """A non-2xx answer from the API server, with the fields of its ``Status`` body."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    name = metadata.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


class KubeApi:
    """Plain JSON requests against one API server base URL (no authentication)."""

    def __init__(self, base_url: str, *, request_timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self._request("GET", path, params=params)

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body=body)

    async def patch(
        self, path: str, body: Mapping[str, Any], *, content_type: str
    ) -> dict[str, Any]:
        return await self._request("PATCH", path, body=body, content_type=content_type)

    async def list(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Items and the list's ``metadata.resourceVersion``."""
        document = await self.get(path, params)
        items = document.get("items") or []
        version = str((document.get("metadata") or {}).get("resourceVersion") or "")
        return [item for item in items if isinstance(item, dict)], version

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        params: Mapping[str, str] | None = None,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Yield ``(type, object)`` from one watch stream until the server ends it."""
        query = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            **(params or {}),
        }
        # The server ends the stream after timeoutSeconds; the client limit only guards against a
        # server that never does.
        timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)
        async with self._ensure_session().get(
            self.base_url + path, params=query, timeout=timeout
        ) as response:
            if response.status >= 300:
                raise await _api_error(response)
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield _decode_event(line)
            if buffer.strip():
                yield _decode_event(buffer)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self._ensure_session().request(
            method, self.base_url + path, params=params, data=data, headers=headers
        ) as response:
            if response.status >= 300:
                raise await _api_error(response)
            document = await response.json(content_type=None)
        return document if isinstance(document, dict) else {}

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session


class Informer:
    """An always-current copy of one collection, fed by LIST + WATCH."""

    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        name: str,
        on_event: EventHandler | None = None,
        watch_timeout_seconds: int = 300,
        retry_delay: float = 0.5,
    ) -> None:
        self.path = path
        self.name = name
        self.items: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._api = api
        self._on_event = on_event
        self._watch_timeout = watch_timeout_seconds
        self._retry_delay = retry_delay

    async def run(self) -> None:
        """LIST and WATCH forever; errors are logged and followed by a fresh LIST."""
        while True:
            try:
                version = await self._relist()
                while version:
                    version = await self._watch_from(version)
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, ApiError, TimeoutError, ValueError, OSError) as exc:
                log.warning("informer error; relisting", informer=self.name, error=str(exc))
                await asyncio.sleep(self._retry_delay)

    async def _relist(self) -> str:
        items, version = await self._api.list(self.path)
        fresh = {object_key(item): item for item in items}
        for key in list(self.items):
            if key not in fresh:
                self._emit("DELETED", self.items.pop(key), None)
        for key, item in fresh.items():
            old = self.items.get(key)
            self.items[key] = item
            if old is None:
                self._emit("ADDED", None, item)
            elif old != item:
                self._emit("MODIFIED", old, item)
        self.synced.set()
        return version

    async def _watch_from(self, version: str) -> str:
        """Apply one watch stream; return the version to resume from, or "" to relist."""
        async for event_type, obj in self._api.watch(
            self.path, resource_version=version, timeout_seconds=self._watch_timeout
        ):
            if event_type == "ERROR":
                code = obj.get("code")
                if code != _GONE:
                    log.warning("watch error event", informer=self.name, status=obj)
                return ""
            metadata = obj.get("metadata") or {}
            version = str(metadata.get("resourceVersion") or version)
            if event_type == "BOOKMARK":
                continue
            self._apply(event_type, obj)
        return version

    def _apply(self, event_type: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        if event_type == "DELETED":
            old = self.items.pop(key, None)
            self._emit("DELETED", old, obj)
            return
        old = self.items.get(key)
        self.items[key] = obj
        self._emit("ADDED" if old is None else "MODIFIED", old, obj)

    def _emit(
        self, event_type: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        if self._on_event is None:
            return
        if event_type == "DELETED" and new is None:
            new = old
        try:
            self._on_event(event_type, old, new)
        except Exception:
            # A handler bug must not stop the cache from following the server.
            log.exception("informer handler failed", informer=self.name, event=event_type)


async def until_ready(
    task: asyncio.Task[None], ready: asyncio.Event, *, limit: float, what: str
) -> None:
    """Wait for ``ready`` while ``task`` runs: re-raise if the task ends first, ``TimeoutError``
    after ``limit`` seconds."""
    waiter = asyncio.create_task(ready.wait(), name=f"wait-ready-{task.get_name()}")
    done, _ = await asyncio.wait({task, waiter}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    if waiter in done:
        return
    waiter.cancel()
    if task in done:
        task.result()  # re-raise why it stopped
        raise RuntimeError(f"{what}: stopped before it was ready")
    raise TimeoutError(f"{what} not ready within {limit} s")


def _decode_event(line: bytes) -> tuple[str, dict[str, Any]]:
    event = json.loads(line)
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise ValueError(f"malformed watch event: {line[:200]!r}")
    return str(event.get("type")), event["object"]


async def _api_error(response: aiohttp.ClientResponse) -> ApiError:
    text = await response.text()
    try:
        status = json.loads(text)
    except json.JSONDecodeError:
        return ApiError(response.status, text[:500])
    if isinstance(status, dict):
        return ApiError(
            response.status, str(status.get("message", text[:500])), str(status.get("reason", ""))
        )
    return ApiError(response.status, text[:500])
