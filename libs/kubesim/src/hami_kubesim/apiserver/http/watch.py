"""The HTTP watch stream: newline-delimited ``{"type":...,"object":...}`` events in a chunked
200 response, with bookmarks, ``timeoutSeconds`` and errors delivered in-stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from hami_kubesim.apiserver.errors import BadRequestError
from hami_kubesim.apiserver.history import BOOKMARK, Entry, encode
from hami_kubesim.apiserver.http.routing import Target
from hami_kubesim.apiserver.metrics import client_name
from hami_kubesim.apiserver.selectors import label_selector_from_query, parse_field_selector
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.objects import tables
from hami_kubesim.objects.resources import ResourceType

IDLE_CHECK_S = 5.0  # how often an idle stream looks for a vanished client
_TYPES = {
    t: f'{{"type":"{t}","object":'.encode()
    for t in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
}


def event_line(kind: str, entry: Entry, prefix: bytes) -> bytes:
    return _TYPES[kind] + entry.wire_json(prefix) + b"}\n"


class _TableEvents:
    """Watch events rendered as one-row Tables (``kubectl get -w``)."""

    def __init__(self, rt: ResourceType, include_object: str) -> None:
        self.rt = rt
        self.include_object = include_object
        self.headers = True

    def line(self, kind: str, entry: Entry, prefix: bytes) -> bytes:
        if kind == BOOKMARK:
            return event_line(kind, entry, prefix)
        body = tables.table(
            self.rt,
            [entry.obj],
            resource_version=entry.obj["metadata"].get("resourceVersion", ""),
            include_object=self.include_object,
            headers=self.headers,
        )
        self.headers = False
        return _TYPES[kind] + encode(body) + b"}\n"


def _bookmark(rv: int, prefix: bytes) -> bytes:
    return event_line(BOOKMARK, Entry({"metadata": {"resourceVersion": str(rv)}}, rv), prefix)


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.lower() in ("true", "1", "")


async def serve_watch(
    request: web.Request,
    server: ApiServer,
    target: Target,
    *,
    on_start: Callable[[], None] | None = None,
) -> web.StreamResponse:
    """Serve one watch until it ends; ``on_start`` is called once its 200 answer has begun."""
    rt, query = target.rt, request.query
    labels = label_selector_from_query(query.get("labelSelector"))
    fields = parse_field_selector(query.get("fieldSelector"), rt.field_labels)
    timeout: float | None = None
    if query.get("timeoutSeconds"):
        try:
            timeout = float(int(query["timeoutSeconds"])) or None  # 0: the server's default
        except ValueError as exc:
            raise BadRequestError(f"invalid timeoutSeconds: {query['timeoutSeconds']}") from exc
    bookmarks = bool(_flag(query.get("allowWatchBookmarks")))
    watcher = server.watches.open(
        rt,
        namespace=target.namespace,
        labels=labels,
        fields=fields,
        resource_version=query.get("resourceVersion"),
        send_initial_events=_flag(query.get("sendInitialEvents")),
        allow_bookmarks=bookmarks,
        client=client_name(request.headers.get("User-Agent")),
    )
    resp = web.StreamResponse(
        status=200,
        headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"},
    )
    resp.enable_chunked_encoding()
    prefix = rt.wire_prefix
    render = event_line
    if "as=Table" in request.headers.get("Accept", ""):
        render = _TableEvents(rt, query.get("includeObject", "Metadata")).line
    clock = asyncio.get_running_loop()  # the loop's time: what its waits below are measured in
    start = clock.time()
    deadline = start + timeout if timeout is not None else None
    interval = server.bookmark_interval
    next_bookmark = start + interval if bookmarks else None
    final_bookmark = None  # one bookmark shortly before the deadline, as the watch cache does
    if bookmarks and deadline is not None and timeout is not None:
        final_bookmark = deadline - min(2.0, timeout / 4)
    try:
        await resp.prepare(request)
        if on_start is not None:
            on_start()
        while True:
            batch = watcher.drain()
            if batch:
                await resp.write(b"".join(render(kind, entry, prefix) for kind, entry in batch))
            if watcher.closed and not watcher.pending:
                if watcher.abort:
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                if watcher.error is not None:
                    await resp.write(_TYPES["ERROR"] + encode(watcher.error.status()) + b"}\n")
                break
            now = clock.time()
            if deadline is not None and now >= deadline:
                break
            if batch:
                continue  # a busy stream drains its backlog before anything else
            due = [t for t in (next_bookmark, final_bookmark) if t is not None]
            if due and now >= min(due):
                await resp.write(_bookmark(server.store.rv, prefix))
                if final_bookmark is not None and now >= final_bookmark:
                    final_bookmark = None
                if next_bookmark is not None and now >= next_bookmark:
                    next_bookmark = now + interval
                continue
            waits = [IDLE_CHECK_S, *(t - now for t in due)]
            if deadline is not None:
                waits.append(deadline - now)
            await watcher.wait(max(0.0, min(waits)))
            if request.transport is None or request.transport.is_closing():
                break
        await resp.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        server.watches.close(watcher)
    return resp
