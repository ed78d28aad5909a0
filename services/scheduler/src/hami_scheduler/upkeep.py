"""What the extender looks after between requests: overdue node locks and stale pending binds.

**Overdue locks.**  A lock held past ``--node-lock-timeout`` by an owner still waiting for its
Allocate on that node is kept (age alone never hands it to another pod,
:mod:`hami_protocol.node.lock`) and made visible instead: :meth:`OverdueLocks.seen` — called by
a bind that meets such a lock, and by :meth:`OverdueLocks.check` for every locked node the
watch shows — logs ``node_lock_overdue node=... pod=... since=...`` and records a Warning Event
``NodeLockOverdue`` on the node naming the pod, once per lock value (per owner and time);
``hami_node_lock_overdue`` is the number of such locks now.  The check reads owners from the
caches only (:meth:`~hami_scheduler.nodelock.owners.LockOwners.known`), never the API.

:class:`Upkeep` runs both every ``--handshake-interval`` on every replica: the check (only the
leader records Events) and :meth:`~hami_scheduler.pending.PendingBinds.sweep` (a replica that
lost the lead sweeps what it kept while leading).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import structlog

from hami_kube.rest import KubeClient
from hami_kube.timefmt import utc_now
from hami_protocol.durations import format_go_duration
from hami_protocol.errors import DecodeError
from hami_protocol.node.lock import NodeLock, OwnerState, decode_node_lock, encode_node_lock
from hami_protocol.node.lock import is_overdue as lock_is_overdue
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.nodelock.owners import LockOwners
from hami_scheduler.pending import PendingBinds

__all__ = ["OverdueLocks", "Upkeep"]

log = structlog.get_logger("hami_scheduler")


class OverdueLocks:
    """Reports overdue locks once each (see the module docstring)."""

    def __init__(
        self,
        events: SchedulerEvents,
        *,
        timeout: timedelta,
        leading: Callable[[], bool] = lambda: True,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self._events = events
        self._timeout = timeout
        self._leading = leading
        self._now = now
        self._current: dict[str, str] = {}
        self._reported: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        """Overdue locks now (as last seen by a check or a bind)."""
        return len(self._current)

    def seen(self, node: str, value: str, lock: NodeLock) -> None:
        """``lock`` (the annotation ``value``) on ``node`` is overdue: report it once."""
        self._current[node] = value
        if (node, value) in self._reported:
            return
        self._reported.add((node, value))
        owner = f"{lock.namespace}/{lock.pod}"
        since = encode_node_lock(NodeLock(lock.acquired))
        log.warning("node_lock_overdue", node=node, pod=owner, since=since)
        if self._leading():
            self._events.node_lock_overdue(
                node,
                f"pod {owner} has held the node lock since {since}, past the "
                f"{format_go_duration(self._timeout.total_seconds())} timeout, and still waits "
                f"for its device plugin's Allocate; the lock is kept (binds to this node wait)",
            )

    def check(self, locks: Mapping[str, str], owners: LockOwners) -> int:
        """Judge every locked node; returns how many locks are overdue."""
        now = self._now()
        current: dict[str, str] = {}
        for node, value in list(locks.items()):
            try:
                lock = decode_node_lock(value)
            except DecodeError:
                continue
            if lock.legacy:
                continue
            state = owners.known(lock.namespace, lock.pod, node, lock)
            if state is OwnerState.WAITING and lock_is_overdue(
                value, now=now, timeout=self._timeout, owner=state
            ):
                current[node] = value
                self.seen(node, value, lock)
        self._current = current
        self._reported &= set(current.items())
        return len(current)


class Upkeep:
    """Every ``interval_s``: the overdue check and the pending-bind sweep."""

    def __init__(
        self,
        *,
        client: KubeClient,
        overdue: OverdueLocks,
        locks: Mapping[str, str],
        owners: LockOwners,
        pending: PendingBinds,
        interval_s: float,
    ) -> None:
        self._client = client
        self._overdue = overdue
        self._locks = locks
        self._owners = owners
        self._pending = pending
        self._interval_s = interval_s

    async def run_pass(self) -> None:
        self._overdue.check(self._locks, self._owners)
        await self._pending.sweep(self._client)

    async def run(self) -> None:
        while True:
            try:
                await self.run_pass()
            except Exception:
                # One bad pass must not end the upkeep for good.
                log.exception("upkeep_pass_failed")
            await asyncio.sleep(self._interval_s)
