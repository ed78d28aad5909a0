"""Binds that need a node's lock, in line per node, woken by the extender's own watch events.

HAMi fails a bind that meets a lock another pod holds, and kube-scheduler backs the pod off
for seconds to minutes (HAMi #810, #1130, a 40-pod Job taking 15–30 min in #1367).  Here the
bind waits instead:

* :meth:`LockWaits.turn` puts a bind in the node's line (FIFO; the asyncio loop is the only
  writer, so the order is the order of arrival).  Only the line's head tries the lock; it keeps
  its turn through its Binding, so the next bind meets the lock this one wrote;
* a head that finds the lock contended waits (:meth:`Turn.wait`) until the watch reports a
  change that may free it — any event of that node (the plugin deleting the lock, someone
  taking it over) or of the owner pod (its ``bind-phase``, phase or deletion), delivered
  through :meth:`LockWaits.node_event` / :meth:`LockWaits.pod_event` — or until the moment
  age alone frees it, then decides again from the caches.  The others keep their places;
* every wait is bounded by the bind's deadline: ``--node-lock-wait`` (20 s) from the bind's
  arrival, which leaves the lock write and the Binding inside kube-scheduler's 30 s extender
  ``httpTimeout``.

Nothing here polls the API server: a wake-up costs one decision over the cached node and pod.
:attr:`LockWaits.locks` (node → ``hami.io/mutex.lock`` value, from the node watch) and
:attr:`LockWaits.vendor_locks` (the other vendors' lock keys, Cambricon's) are what the periodic
overdue check walks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from hami_kube.objects import NodeView, object_key
from hami_kube.resources import JsonObject
from hami_protocol.keys import NODE_LOCK
from hami_protocol.node.lock_keys import VENDOR_LOCK_KEYS

__all__ = ["LockWaits", "Turn"]


class _Line:
    __slots__ = ("changed", "head_waiting", "owner", "queue")

    def __init__(self) -> None:
        self.queue: deque[asyncio.Future[None]] = deque()
        self.changed = asyncio.Event()
        self.owner = ""
        self.head_waiting = False


class Turn:
    """The head of a node's line: decides, and waits for a change when contended."""

    def __init__(self, waits: LockWaits, node: str, line: _Line) -> None:
        self._waits = waits
        self._node = node
        self._line = line

    def mark(self) -> None:
        """Call before deciding: a change reported after this wakes the next :meth:`wait`."""
        self._line.changed.clear()

    async def wait(self, *, owner: str, until: float) -> None:
        """Until a change of the node or of pod ``owner`` (``namespace/name``; ``""``: none)
        is reported, or the loop's clock reaches ``until``."""
        line = self._line
        self._waits.watch_owner(self._node, line, owner)
        line.head_waiting = True
        try:
            async with asyncio.timeout_at(until):
                await line.changed.wait()
        except TimeoutError:
            pass
        finally:
            line.head_waiting = False
            self._waits.watch_owner(self._node, line, "")


class LockWaits:
    """Per node: the line of binds and what wakes its head (see the module docstring)."""

    def __init__(self) -> None:
        self._lines: dict[str, _Line] = {}
        self._owners: dict[str, set[str]] = {}
        self.locks: dict[str, str] = {}
        """Node → its ``hami.io/mutex.lock`` value, as the node watch last showed it."""
        self.vendor_locks: dict[tuple[str, str], str] = {}
        """``(node, key)`` → the value of a vendor's own lock key (:data:`VENDOR_LOCK_KEYS`)."""

    # -- watch events (a CacheListener) --------------------------------------------------
    def node_event(self, obj: JsonObject, *, deleted: bool) -> None:
        view = NodeView(obj)
        name = view.name
        value = None if deleted else view.annotations.get(NODE_LOCK)
        if value is None:
            self.locks.pop(name, None)
        else:
            self.locks[name] = value
        for key in VENDOR_LOCK_KEYS:
            held = None if deleted else view.annotations.get(key)
            if held is None:
                self.vendor_locks.pop((name, key), None)
            else:
                self.vendor_locks[name, key] = held
        line = self._lines.get(name)
        if line is not None:
            line.changed.set()

    def pod_event(self, obj: JsonObject, *, deleted: bool) -> None:
        nodes = self._owners.get(object_key(obj))
        for node in list(nodes or ()):
            line = self._lines.get(node)
            if line is not None:
                line.changed.set()

    def watch_owner(self, node: str, line: _Line, owner: str) -> None:
        if line.owner:
            nodes = self._owners.get(line.owner)
            if nodes is not None:
                nodes.discard(node)
                if not nodes:
                    del self._owners[line.owner]
        line.owner = owner
        if owner:
            self._owners.setdefault(owner, set()).add(node)

    # -- the lines -----------------------------------------------------------------------
    def waiting(self) -> Mapping[str, int]:
        """Node → binds waiting for its lock (in line behind the head, and the head itself
        while it waits for a contended lock)."""
        counts: dict[str, int] = {}
        for node, line in self._lines.items():
            count = len(line.queue) - (0 if line.head_waiting else 1)
            if count > 0:
                counts[node] = count
        return counts

    def ahead(self, node: str) -> int:
        """Binds in ``node``'s line now (a newcomer would be behind all of them)."""
        line = self._lines.get(node)
        return 0 if line is None else len(line.queue)

    @asynccontextmanager
    async def turn(self, node: str, *, deadline: float) -> AsyncIterator[Turn | None]:
        """Wait for this bind's turn at ``node``'s lock until the loop's clock reaches
        ``deadline`` and hold it for the block; ``None`` when the deadline came first."""
        line = self._lines.get(node)
        if line is None:
            line = self._lines[node] = _Line()
        me: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line.queue.append(me)
        if len(line.queue) == 1:
            me.set_result(None)
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await me
            except TimeoutError:
                turn = None
            else:
                turn = Turn(self, node, line)
            yield turn
        finally:
            head = line.queue[0] is me
            line.queue.remove(me)
            if head and line.queue and not line.queue[0].done():
                line.queue[0].set_result(None)
            if not line.queue:
                self.watch_owner(node, line, "")
                del self._lines[node]
