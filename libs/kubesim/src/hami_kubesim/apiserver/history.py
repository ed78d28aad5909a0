"""Stored object versions and the per-resource ring buffer of changes that watches replay."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


def clone(value: Any) -> Any:
    """Deep copy of JSON data (much faster than ``copy.deepcopy`` for plain dicts and lists)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def encode(obj: Any) -> bytes:
    """Compact JSON, as the API server writes it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Entry:
    """One version of one object.  ``obj`` holds no ``kind``/``apiVersion`` (list items carry
    none) and is never mutated once stored; its JSON is encoded once, on first use, and shared
    by every reader and watcher."""

    __slots__ = ("_item", "_wire", "obj", "rv")

    def __init__(self, obj: dict[str, Any], rv: int) -> None:
        self.obj = obj
        self.rv = rv
        self._item: bytes | None = None
        self._wire: bytes | None = None

    def item_json(self) -> bytes:
        if self._item is None:
            self._item = encode(self.obj)
        return self._item

    def wire_json(self, prefix: bytes) -> bytes:
        """The object with ``kind`` and ``apiVersion`` (``prefix`` from the resource type)."""
        if self._wire is None:
            item = self.item_json()
            self._wire = prefix + item[1:] if len(item) > 2 else prefix[:-1] + b"}"
        return self._wire


@dataclass(frozen=True, slots=True)
class Change:
    """One write: ``entry`` is the new state (for DELETED the last state, stamped with the
    deletion's resourceVersion); ``prev`` the state before, for selector transitions."""

    type: str
    entry: Entry
    prev: Entry | None

    @property
    def rv(self) -> int:
        return self.entry.rv


class History:
    """The last ``capacity`` changes of one resource.  ``floor`` is the newest resourceVersion
    whose changes may be gone: a watch from an older version gets 410 Expired."""

    def __init__(self, capacity: int) -> None:
        self._events: deque[Change] = deque(maxlen=max(1, capacity))
        self.floor = 0

    def __len__(self) -> int:
        return len(self._events)

    def append(self, change: Change) -> None:
        if len(self._events) == self._events.maxlen:
            self.floor = max(self.floor, self._events[0].rv)
        self._events.append(change)

    def since(self, rv: int) -> list[Change] | None:
        """Changes after ``rv`` in order, or ``None`` when some of them are no longer held."""
        if rv < self.floor:
            return None
        out: list[Change] = []
        for change in reversed(self._events):
            if change.rv <= rv:
                break
            out.append(change)
        out.reverse()
        return out

    def compact(self, rv: int) -> None:
        """Forget changes up to ``rv`` (like etcd compaction reaching the watch cache)."""
        while self._events and self._events[0].rv <= rv:
            self._events.popleft()
        self.floor = max(self.floor, rv)

    def resize(self, capacity: int) -> None:
        events = list(self._events)
        keep = events[-max(1, capacity) :]
        if len(keep) < len(events):
            self.floor = max(self.floor, events[len(events) - len(keep) - 1].rv)
        self._events = deque(keep, maxlen=max(1, capacity))
