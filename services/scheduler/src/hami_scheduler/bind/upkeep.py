"""What the extender looks after between requests: overdue node locks and stale pending binds.

**Overdue locks.**  A lock held past its timeout (``--node-lock-timeout``; Cambricon's
``cambricon.com/dsmlu.lock``: 2 minutes) by an owner still waiting for its Allocate on that node
is kept (age alone never hands it to another pod, :mod:`hami_protocol.node.lock`) and made
visible instead: :meth:`OverdueLocks.seen` — called by a bind that meets such a lock, and by
:meth:`OverdueLocks.check` for every lock the watch shows — logs ``node_lock_overdue node=...
key=... pod=... since=...`` and records a Warning Event ``NodeLockOverdue`` on the node naming
the pod (and the key, when not the mutex), once per lock value (per owner and time);
``hami_node_lock_overdue`` is the number of such locks now.  The check reads owners from the
caches only (:meth:`~hami_scheduler.nodelock.owners.LockOwners.known`), never the API.  A
Cambricon lock names no pod: its owner is the pod this process wrote it for, else the one pod
the caches show waiting for it (:meth:`~hami_scheduler.nodelock.owners.LockOwners.sole_waiting`).

:class:`Upkeep` runs both every ``--handshake-interval`` on every replica: the check (only the
leader records Events) and :meth:`~hami_scheduler.bind.pending.PendingBinds.sweep` (a replica that
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
from hami_protocol.node.lock_keys import MUTEX_LOCK, LockRule, lock_rule
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.nodelock.owners import LockOwners

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
        self._current: dict[tuple[str, str], str] = {}
        self._reported: set[tuple[str, str, str]] = set()

    def __len__(self) -> int:
        """Overdue locks now (as last seen by a check or a bind)."""
        return len(self._current)

    def seen(self, node: str, value: str, lock: NodeLock, rule: LockRule = MUTEX_LOCK) -> None:
        """``lock`` (the annotation ``value`` of ``rule.key``, its owner named) on ``node`` is
        overdue: report it once."""
        self._current[node, rule.key] = value
        if (node, rule.key, value) in self._reported:
            return
        self._reported.add((node, rule.key, value))
        owner = f"{lock.namespace}/{lock.pod}"
        since = encode_node_lock(NodeLock(lock.acquired))
        log.warning("node_lock_overdue", node=node, key=rule.key, pod=owner, since=since)
        if self._leading():
            which = "the node lock" if rule is MUTEX_LOCK else f"the node lock {rule.key}"
            timeout = format_go_duration(rule.timeout_or(self._timeout).total_seconds())
            self._events.node_lock_overdue(
                node,
                f"pod {owner} has held {which} since {since}, past the {timeout} timeout, and "
                f"still waits for its device plugin's Allocate; the lock is kept (binds to this "
                f"node wait)",
            )

    def check(
        self,
        locks: Mapping[str, str],
        owners: LockOwners,
        vendor_locks: Mapping[tuple[str, str], str] | None = None,
        known: Callable[[str, LockRule, str], str | None] | None = None,
    ) -> int:
        """Judge every lock: ``locks`` (node → mutex value) and ``vendor_locks`` (``(node,
        key)`` → value), the latter read through ``known`` (the value naming the pod this
        process wrote it for); returns how many locks are overdue."""
        now = self._now()
        # (node, rule, the value as found, the value naming its owner where known)
        found: list[tuple[str, LockRule, str, str | None]] = [
            (node, MUTEX_LOCK, value, value) for node, value in list(locks.items())
        ]
        for (node, key), value in list((vendor_locks or {}).items()):
            rule = lock_rule(key)
            found.append((node, rule, value, value if known is None else known(node, rule, value)))
        current: dict[tuple[str, str], str] = {}
        for node, rule, value, readable in found:
            try:
                lock = decode_node_lock(readable or "")
            except DecodeError:
                continue
            if lock.legacy:
                continue
            state = owners.known(lock.namespace, lock.pod, node, lock, rule)
            timeout = rule.timeout_or(self._timeout)
            if state is OwnerState.WAITING and lock_is_overdue(
                readable, now=now, timeout=timeout, owner=state
            ):
                current[node, rule.key] = value
                self.seen(node, value, lock, rule)
        self._current = current
        self._reported &= {(node, key, value) for (node, key), value in current.items()}
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
        vendor_locks: Mapping[tuple[str, str], str] | None = None,
        known: Callable[[str, LockRule, str], str | None] | None = None,
    ) -> None:
        """``vendor_locks`` and ``known``: see :meth:`OverdueLocks.check`."""
        self._client = client
        self._overdue = overdue
        self._locks = locks
        self._vendor_locks = vendor_locks
        self._known = known
        self._owners = owners
        self._pending = pending
        self._interval_s = interval_s

    async def run_pass(self) -> None:
        self._overdue.check(self._locks, self._owners, self._vendor_locks, self._known)
        await self._pending.sweep(self._client)

    async def run(self) -> None:
        while True:
            try:
                await self.run_pass()
            except Exception:
                # One bad pass must not end the upkeep for good.
                log.exception("upkeep_pass_failed")
            await asyncio.sleep(self._interval_s)
