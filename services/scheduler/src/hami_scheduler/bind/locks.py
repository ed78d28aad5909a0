"""The node locks of one bind: which ones, taken in line and waited for, released last first.

:meth:`BindLocks.rules` names the locks a pod's bind takes (step 4 of
:mod:`~hami_scheduler.bind.service`): the lock of every vendor its app containers ask that has
one, ``hami.io/mutex.lock`` too for ``koordinator.sh/rdma``, each key once, in the sorted order
of the vendors' common words as HAMi takes them — and no NVIDIA (or RDMA) lock on a node whose
device plugin tells pods apart through the kubelet's PodResources API.

:meth:`BindLocks.taken` waits for the bind's turn in the node's line
(:class:`~hami_scheduler.nodelock.waits.LockWaits`), takes each lock through the
:class:`~hami_scheduler.nodelock.locker.NodeLocker`, waits for one another pod still needs
until the bind's deadline, and holds the turn for the block (the Binding); a lock that cannot be
taken releases the ones this bind wrote before it, last first.  A failure is reported through
the bind's ``failed`` (which drops the pod's reservation and records ``BindingFailed``) before
that release, and raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime

import structlog

from hami_kube.objects import NodeView, PodView
from hami_protocol import keys
from hami_protocol.durations import format_go_duration
from hami_protocol.errors import DecodeError
from hami_protocol.keys import NODE_ALLOCATE_IDENTITY
from hami_protocol.node.identity import identity_is_fresh
from hami_protocol.node.lock import LockAction, decode_node_lock
from hami_protocol.node.lock_keys import LockRule, lock_rule
from hami_protocol.request.containers import PodDeviceRequests
from hami_protocol.vendor.table import NVIDIA
from hami_scheduler.bind.upkeep import OverdueLocks
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.joint.hints import KoordRequests
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.nodelock.locker import LockContendedError, LockError, NodeLocker, describe_lock
from hami_scheduler.nodelock.owners import LockOwners
from hami_scheduler.nodelock.waits import LockWaits, Turn
from hami_scheduler.selection.joint_plan import wants_rdma

__all__ = ["BindLocks", "Failed"]

log = structlog.get_logger("hami_scheduler")

Failed = Callable[[PodView, str, str], Exception]
"""``(pod, message, reason)`` → the error to raise, once the bind has undone what it must."""


def _waited(seconds: float) -> str:
    return format_go_duration(float(round(seconds)))


class BindLocks:
    """Takes and releases the node locks of binds (see the module docstring)."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        locker: NodeLocker,
        owners: LockOwners,
        metrics: SchedulerMetrics,
        waits: LockWaits,
        overdue: OverdueLocks | None,
        failed: Failed,
        lock_wait_s: float,
        group_wait_s: float,
        now: Callable[[], datetime],
    ) -> None:
        self._cache = cache
        self._locker = locker
        self._owners = owners
        self._metrics = metrics
        self._waits = waits
        self._overdue = overdue
        self._failed = failed
        self._lock_wait_s = lock_wait_s
        self._group_wait_s = group_wait_s
        self._now = now

    def rules(
        self, node: str, requests: PodDeviceRequests, koord: KoordRequests
    ) -> tuple[LockRule, ...]:
        """The locks this bind takes, in HAMi's order (the vendors' common words sorted)."""
        words = {word for slot in requests.slots if not slot.is_init for word in slot.requests}
        by_word = [(v.common_word, v.node_lock_key) for v in self._cache.vendors]
        if wants_rdma(koord):
            words.add(NVIDIA)
            by_word.append((NVIDIA, keys.NODE_LOCK))
        if NVIDIA in words and self._identifies_without_lock(node):
            words.discard(NVIDIA)
        rules: dict[str, LockRule] = {}
        for _word, key in sorted((w, k) for w, k in by_word if k is not None and w in words):
            if key not in rules:
                rules[key] = lock_rule(key)
        return tuple(rules.values())

    def _identifies_without_lock(self, node: str) -> bool:
        """The node's device plugin tells pods apart through the kubelet's PodResources API
        (``hami.io/node-allocate-identity``, stamped recently): binds need no lock there, and do
        not queue.  A stale stamp (another plugin took over, or ours died) means the lock."""
        known = self._locker.known_node(node)
        value = None if known is None else NodeView(known).annotations.get(NODE_ALLOCATE_IDENTITY)
        return identity_is_fresh(value, self._now())

    @asynccontextmanager
    async def taken(
        self, node: str, pod: PodView, rules: tuple[LockRule, ...], started: float
    ) -> AsyncIterator[tuple[LockRule, ...]]:
        """Take ``rules`` (waiting in line) and keep the node's turn for the block; yields the
        locks this bind wrote (not those it only re-entered)."""
        wait = self._group_wait_s if pod.labels.get(keys.POD_GROUP_LABEL) else self._lock_wait_s
        deadline = started + wait
        async with self._waits.turn(node, deadline=deadline) as turn:
            if turn is None:
                raise self._failed(pod, self._queued(node, started), "lock_wait")
            wrote: list[LockRule] = []
            try:
                for rule in rules:
                    action = await self._lock(turn, node, pod, started, deadline, rule=rule)
                    if action is not LockAction.REENTER:
                        wrote.append(rule)
            except BaseException:
                await self.release(node, pod, tuple(wrote))
                raise
            yield tuple(wrote)

    def _queued(self, node: str, started: float) -> str:
        """Why a bind that never got its turn gave up."""
        waited = _waited(asyncio.get_running_loop().time() - started)
        behind = f"waited {waited} in line behind other binds to it"
        value = self._waits.locks.get(node)
        try:
            lock = decode_node_lock(value) if value is not None else None
        except DecodeError:
            lock = None
        if lock is None:
            return f"node {node} is busy with other binds; {behind}"
        owner = None
        if not lock.legacy:
            owner = self._owners.known(lock.namespace, lock.pod, node, lock)
        return f"{describe_lock(node, lock, owner)}; {behind}"

    async def _lock(
        self,
        turn: Turn,
        node: str,
        pod: PodView,
        started: float,
        deadline: float,
        *,
        rule: LockRule,
    ) -> LockAction:
        loop = asyncio.get_running_loop()
        logged = False
        while True:
            turn.mark()
            try:
                action = await self._locker.acquire(
                    node, namespace=pod.namespace, pod=pod.name, rule=rule
                )
            except LockContendedError as exc:
                contention = exc.contention
                if contention.overdue and self._overdue is not None and contention.lock.pod:
                    self._overdue.seen(node, contention.value, contention.lock, rule)
                now = loop.time()
                if now >= deadline:
                    self._metrics.lock_wait.labels(outcome="expired").observe(now - started)
                    message = contention.message(now - started)
                    raise self._failed(pod, message, "lock_contended") from None
                if not logged:
                    logged = True
                    log.info(
                        "node_lock_waiting",
                        node=node,
                        key=rule.key,
                        pod=pod.key,
                        owner=contention.owner_key,
                    )
                until = deadline
                if contention.frees_at is not None:
                    left = (contention.frees_at - self._now()).total_seconds()
                    until = min(deadline, now + max(left, 0.0) + 0.01)
                await turn.wait(owner=contention.owner_key, until=until)
            except LockError as exc:
                self._metrics.lock_wait.labels(outcome="failed").observe(loop.time() - started)
                self._metrics.api_error("lock_node")
                raise self._failed(pod, str(exc), "lock_failed") from exc
            else:
                self._metrics.lock_wait.labels(outcome="acquired").observe(loop.time() - started)
                return action

    async def release(self, node: str, pod: PodView, wrote: tuple[LockRule, ...]) -> None:
        """Release the locks this bind wrote, last taken first."""
        for rule in reversed(wrote):
            try:
                await self._locker.release(node, namespace=pod.namespace, pod=pod.name, rule=rule)
            except LockError as exc:
                self._metrics.api_error("unlock_node")
                log.warning("unlock_failed", node=node, key=rule.key, pod=pod.key, error=str(exc))
