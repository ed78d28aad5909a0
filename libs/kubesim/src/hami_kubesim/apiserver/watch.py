"""Watchers and the per-resource fan-out that feeds them.

Every change is offered to the watchers that could care (watchers pinned by an indexed field,
e.g. pods by ``spec.nodeName``, are only offered changes touching that value).  A watcher holds
references to shared, already-encoded object versions, never copies.  A watcher whose backlog
passes its bound is ended with 410 ExpiredError, as the real watch cache drops slow watchers.
A *held* watcher keeps its events queued until released: one client's watch lagging behind the
others' (a busy API server replica, a slow connection), which tests make happen on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

from hami_kubesim.apiserver.errors import ExpiredError, StatusError
from hami_kubesim.apiserver.history import ADDED, DELETED, MODIFIED, Change, Entry
from hami_kubesim.apiserver.selectors import FieldSelector, field_value
from hami_kubesim.objects.resources import ResourceType
from hami_protocol.selectors import LabelSelector

Event = tuple[str, Entry]


class Watcher:
    """One open watch: a bounded backlog of ``(type, entry)`` pairs and a wake-up signal."""

    def __init__(
        self,
        rt: ResourceType,
        *,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int,
        client: str = "",
    ) -> None:
        self.rt = rt
        self.client = client
        """Who opened it (the first word of its User-Agent)."""
        self.held = False
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.limit = limit
        self.pinned = fields.exact(rt.index_field) if rt.index_field else None
        self._initial: deque[Event] = deque()
        self._queue: deque[Event] = deque()
        self._wake = asyncio.Event()
        self.closed = False
        self.error: StatusError | None = None
        self.abort = False

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        labels = obj["metadata"].get("labels") or {}
        if not self.labels.is_everything and not self.labels.matches(labels):
            return False
        return self.fields.empty or self.fields.matches(obj)

    def preload(self, events: list[Event]) -> None:
        """Initial events (synthetic ADDED or replayed history); not counted against the bound."""
        self._initial.extend(events)
        if events:
            self._wake.set()

    def seen_as(self, change: Change) -> str | None:
        """How this watcher sees ``change`` through its selectors: an update that moves an
        object into the selection is ADDED, out of it DELETED; ``None`` if not at all."""
        now = self.matches(change.entry.obj)
        if change.type == MODIFIED and change.prev is not None:
            before = self.matches(change.prev.obj)
            if before and now:
                return MODIFIED
            if before:
                return DELETED
            return ADDED if now else None
        return change.type if now else None

    def offer(self, change: Change) -> None:
        """Queue a live change."""
        if self.closed:
            return
        kind = self.seen_as(change)
        if kind is not None:
            self._push(kind, change.entry)

    def replay(self, changes: list[Change]) -> None:
        """Queue changes replayed from history (not counted against the bound)."""
        for change in changes:
            kind = self.seen_as(change)
            if kind is not None:
                self._initial.append((kind, change.entry))
        if self._initial:
            self._wake.set()

    def _push(self, kind: str, entry: Entry) -> None:
        if len(self._queue) >= self.limit:
            self.close(
                ExpiredError(
                    f"watch of {self.rt.key} ended: the client fell {len(self._queue)} "
                    "events behind; re-list and watch again"
                )
            )
            return
        self._queue.append((kind, entry))
        self._wake.set()

    def close(self, error: StatusError | None = None, *, abort: bool = False) -> None:
        """End the watch: cleanly, with an ERROR event (``error``), or by cutting the stream."""
        if self.closed:
            return
        self.closed = True
        self.error = error
        self.abort = abort
        self._queue.clear()
        self._initial.clear()
        self._wake.set()

    def hold(self) -> None:
        """Keep events queued (nothing drains) until :meth:`release`."""
        self.held = True

    def release(self) -> None:
        self.held = False
        if self.pending:
            self._wake.set()

    def drain(self, max_items: int = 512) -> list[Event]:
        """Take up to ``max_items`` pending events without waiting (none while held)."""
        out: list[Event] = []
        if self.held and not self.closed:
            self._wake.clear()
            return out
        while self._initial and len(out) < max_items:
            out.append(self._initial.popleft())
        while self._queue and len(out) < max_items:
            out.append(self._queue.popleft())
        if not self._initial and not self._queue and not self.closed:
            self._wake.clear()
        return out

    @property
    def pending(self) -> int:
        return len(self._initial) + len(self._queue)

    async def wait(self, seconds: float | None) -> None:
        """Return once there is something to drain, the watch closed, or ``seconds`` passed."""
        if (self.pending and not self.held) or self.closed:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()


class WatchHub:
    """The open watchers of one resource and the fan-out of its changes."""

    def __init__(self, rt: ResourceType) -> None:
        self.rt = rt
        self._general: set[Watcher] = set()
        self._pinned: dict[str, set[Watcher]] = {}

    def __len__(self) -> int:
        return len(self._general) + sum(len(s) for s in self._pinned.values())

    def add(self, watcher: Watcher) -> None:
        if watcher.pinned is None:
            self._general.add(watcher)
        else:
            self._pinned.setdefault(watcher.pinned, set()).add(watcher)

    def remove(self, watcher: Watcher) -> None:
        if watcher.pinned is None:
            self._general.discard(watcher)
            return
        group = self._pinned.get(watcher.pinned)
        if group is not None:
            group.discard(watcher)
            if not group:
                del self._pinned[watcher.pinned]

    def all(self) -> list[Watcher]:
        out = list(self._general)
        for group in self._pinned.values():
            out.extend(group)
        return out

    def dispatch(self, change: Change) -> None:
        if self._pinned and self.rt.index_field is not None:
            keys = {field_value(change.entry.obj, self.rt.index_field)}
            if change.prev is not None:
                keys.add(field_value(change.prev.obj, self.rt.index_field))
            for key in keys:
                for watcher in tuple(self._pinned.get(key, ())):
                    watcher.offer(change)
        for watcher in tuple(self._general):
            watcher.offer(change)
