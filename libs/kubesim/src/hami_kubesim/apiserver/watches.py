"""The API server's open watches: how one starts (the current state replayed as ADDED, or the
changes since a resourceVersion, or 410 Expired / 504 when those are gone or not yet there),
which clients' watches are held back, how they are dropped or closed; and :class:`LocalWatch`,
the in-process iterator over one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hami_kubesim.apiserver.errors import BadRequestError, StatusError
from hami_kubesim.apiserver.history import ADDED, BOOKMARK, Entry
from hami_kubesim.apiserver.selectors import FieldSelector
from hami_kubesim.apiserver.store import Store
from hami_kubesim.apiserver.watch import Watcher
from hami_kubesim.objects.resources import ResourceType
from hami_protocol.selectors import EVERYTHING, LabelSelector

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class OpenWatches:
    """Every open watch of one server, and the ``(resource, client)`` pairs held back."""

    def __init__(self, store: Store, *, limit: int) -> None:
        self.store = store
        self.limit = limit
        """A watch whose backlog passes this many events is ended with 410 Expired."""
        self._watchers: set[Watcher] = set()
        self._held: set[tuple[str, str]] = set()
        """``(resource key, client)`` whose watches :meth:`hold` holds."""

    def open(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        resource_version: str | None = None,
        send_initial_events: bool | None = None,
        allow_bookmarks: bool = False,
        client: str = "",
    ) -> Watcher:
        """Start a watch as the API server does: no resourceVersion (or ``"0"``) first replays
        the current state as ADDED; a specific one replays only later changes, or ends at once
        with 410 Expired when those changes are no longer held."""
        watcher = Watcher(
            rt,
            namespace=namespace,
            labels=labels or EVERYTHING,
            fields=fields or FieldSelector(),
            limit=self.limit,
            client=client,
        )
        if (rt.key, client) in self._held:
            watcher.hold()
        rv_text = resource_version or ""
        if rv_text not in ("", "0") and not rv_text.isdigit():
            raise BadRequestError(f'resourceVersion: Invalid value: "{rv_text}": must be a number')
        initial = send_initial_events is True or (
            send_initial_events is None and rv_text in ("", "0")
        )
        if initial:
            page = self.store.select(
                rt, namespace=namespace, labels=watcher.labels, fields=watcher.fields
            )
            events = [(ADDED, e) for e in page.entries]
            if send_initial_events and allow_bookmarks:
                marker = {
                    "metadata": {
                        "resourceVersion": str(page.rv),
                        "annotations": {INITIAL_EVENTS_END: "true"},
                    }
                }
                events.append((BOOKMARK, Entry(marker, page.rv)))
            watcher.preload(events)
        elif rv_text not in ("", "0"):
            start = int(rv_text)
            if start > self.store.rv:
                watcher.close(
                    StatusError(
                        504,
                        f"Too large resource version: {start}, current: {self.store.rv}",
                        reason="Timeout",
                        details={
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                )
                return watcher
            history = self.store.history(rt)
            changes = history.since(start)
            if changes is None:
                watcher.close(
                    StatusError(
                        410,
                        f"too old resource version: {start} ({history.floor})",
                        reason="Expired",
                    )
                )
                return watcher
            watcher.replay(changes)
        self.store.hubs[rt.key].add(watcher)
        self._watchers.add(watcher)
        return watcher

    def close(self, watcher: Watcher) -> None:
        self.store.hubs[watcher.rt.key].remove(watcher)
        self._watchers.discard(watcher)
        watcher.close()

    def hold(self, rt: ResourceType, client: str) -> int:
        """Hold ``client``'s watches of ``rt``, open and to come; how many open ones it holds."""
        self._held.add((rt.key, client))
        held = [w for w in self._watchers if w.rt is rt and w.client == client]
        for watcher in held:
            watcher.hold()
        return len(held)

    def release(self) -> None:
        """Deliver what every held watch kept, and hold no more."""
        self._held.clear()
        for watcher in list(self._watchers):
            watcher.release()

    def drop(self, rt: ResourceType | None, mode: str) -> int:
        """End the open watches of ``rt`` (None: all) the ``mode`` way; how many ended."""
        dropped = 0
        for watcher in list(self._watchers):
            if rt is not None and watcher.rt is not rt:
                continue
            error = (
                StatusError(410, "too old resource version: watch dropped", reason="Expired")
                if mode == "expire"
                else None
            )
            watcher.close(error, abort=mode == "abort")
            self.store.hubs[watcher.rt.key].remove(watcher)
            self._watchers.discard(watcher)
            dropped += 1
        return dropped

    def shutdown(self) -> None:
        """End every open watch cleanly (server stopping)."""
        for watcher in list(self._watchers):
            self.close(watcher)


@dataclass(frozen=True, slots=True)
class LocalWatchEvent:
    """One event of an in-process watch; ``object`` carries ``kind`` and ``apiVersion``."""

    type: str
    object: dict[str, Any]


class LocalWatch:
    """An in-process watch: ``async for event in watch`` (an ERROR event ends it); close with
    :meth:`aclose` or ``async with``."""

    def __init__(self, watches: OpenWatches, watcher: Watcher) -> None:
        self._watches = watches
        self._watcher = watcher
        self._buffer: list[tuple[str, Entry]] = []
        self._done = False

    def __aiter__(self) -> LocalWatch:
        return self

    async def __anext__(self) -> LocalWatchEvent:
        watcher = self._watcher
        while not self._buffer:
            if self._done:
                raise StopAsyncIteration
            self._buffer = watcher.drain()
            if self._buffer:
                break
            if watcher.closed:
                self._done = True
                await self.aclose()
                if watcher.error is not None:
                    return LocalWatchEvent("ERROR", watcher.error.status())
                raise StopAsyncIteration
            await watcher.wait(None)
        kind, entry = self._buffer.pop(0)
        return LocalWatchEvent(kind, json.loads(entry.wire_json(watcher.rt.wire_prefix)))

    async def aclose(self) -> None:
        self._watches.close(self._watcher)

    async def __aenter__(self) -> LocalWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
