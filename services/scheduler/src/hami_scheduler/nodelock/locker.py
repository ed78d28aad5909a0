"""The node lock (``hami.io/mutex.lock``) through the API server, with optimistic concurrency.

Bind holds the lock from before the Binding until the device plugin's Allocate releases it, so
the plugin knows which pod it serves.  :meth:`NodeLocker.acquire` makes one decision:

1. the node as the watch cache has it (or as this process last wrote it, when that is newer:
   a burst of binds on one node does not wait for the watch to echo each lock write); a node
   the cache lacks is read with a GET;
2. :func:`~hami_protocol.node.lock.decide_acquire`: no lock → take it; ours → re-enter
   (nothing to write); unreadable → take it over; otherwise the owner pod's state decides,
   read from the caches (:class:`~hami_scheduler.nodelock.owners.LockOwners`, a GET only on a
   miss): gone, terminal, bound elsewhere or done allocating → take it over; still waiting for
   its Allocate on this node → contended at any age (HAMi #3096), *overdue* past the timeout;
   not bound yet → contended until the timeout;
3. the write: ``<RFC3339>,<ns>,<pod>`` in a merge patch carrying the node's
   ``resourceVersion``, so two schedulers (or a plugin releasing meanwhile) cannot both win.
   A 409 means someone else wrote first: the node is read with a GET and the decision made
   again (5 tries, 100 ms doubling with jitter between them, as HAMi).

A contended lock raises :class:`LockContendedError` carrying a :class:`Contention` (who holds
it, since when, whether it is overdue, when age alone frees it); waiting for it is the bind's
business (:mod:`hami_scheduler.nodelock.waits`).  :meth:`NodeLocker.release` deletes the lock only
when :func:`~hami_protocol.node.lock.decide_release` allows it (ours, or a legacy lock), with
the same precondition and the same 409 rule.

Every call names the lock's key by its :class:`~hami_protocol.node.lock_keys.LockRule`
(``hami.io/mutex.lock`` when not given).  Cambricon's ``cambricon.com/dsmlu.lock`` names no pod
and times out after 2 minutes; this process remembers whom it wrote each such value for, so the
owner's state decides for it as for the mutex (``CAMBRICON_DSMLU_ASSIGNED: true`` is its
*done*); a value it did not write (another scheduler's, or one from before a restart) is a lock
naming no pod, freed by age as HAMi frees it, and is never released by a rollback of ours.

Cost: one write per acquire or release, no read unless the caches miss or a write conflicts.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import structlog

from hami_kube.backoff import BackoffPolicy
from hami_kube.errors import ConflictError, KubeError, NotFoundError
from hami_kube.objects import NodeView, key_for
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES, JsonObject
from hami_kube.rest import KubeClient
from hami_kube.timefmt import utc_now
from hami_protocol.durations import format_go_duration
from hami_protocol.errors import DecodeError
from hami_protocol.node.lock import (
    LockAction,
    NodeLock,
    OwnerState,
    ReleaseAction,
    decide_acquire,
    decide_release,
    encode_node_lock,
    is_expired,
    is_overdue,
    owner_to_check,
)
from hami_protocol.node.lock_keys import MUTEX_LOCK, LockRule
from hami_scheduler.nodelock.owners import LockOwners

__all__ = ["Contention", "LockContendedError", "LockError", "NodeLocker", "describe_lock"]

log = structlog.get_logger("hami_scheduler")

_ATTEMPTS: Final = 5
_CONFLICT_BACKOFF: Final = BackoffPolicy(initial=0.1, factor=2.0, cap=1.6, jitter=0.5)


class LockError(Exception):
    """The lock could not be taken (API failure, or too many write conflicts)."""


@dataclass(frozen=True, slots=True)
class Contention:
    """A lock another pod may still need."""

    node: str
    value: str
    """The lock annotation as found."""
    rule: LockRule
    lock: NodeLock
    owner: OwnerState | None
    """``None``: a legacy lock, which names no pod."""
    overdue: bool
    frees_at: datetime | None
    """When age alone frees it (a legacy lock, an owner not bound yet); ``None``: never."""

    @property
    def owner_key(self) -> str:
        return "" if self.lock.legacy else key_for(self.lock.namespace, self.lock.pod)

    def message(self, waited_s: float) -> str:
        """Why the bind gave up, naming the owner (``waited_s``: how long it waited)."""
        waited = format_go_duration(float(round(waited_s)))
        described = describe_lock(self.node, self.lock, self.owner, self.rule)
        return f"{described}; waited {waited}"


def describe_lock(
    node: str, lock: NodeLock, owner: OwnerState | None, rule: LockRule = MUTEX_LOCK
) -> str:
    """``node n1 is locked by ns/pod, waiting for its device plugin since <time>``; another
    key than ``hami.io/mutex.lock`` is named: ``node n1's cambricon.com/dsmlu.lock is held by
    ...``."""
    since = encode_node_lock(NodeLock(lock.acquired))
    locked = f"node {node} is locked" if rule is MUTEX_LOCK else f"node {node}'s {rule.key} is held"
    if lock.legacy:
        return f"{locked} since {since} by a lock that names no pod"
    holder = f"{locked} by {lock.namespace}/{lock.pod}"
    if owner is OwnerState.WAITING:
        return f"{holder}, waiting for its device plugin since {since}"
    if owner is OwnerState.BINDING:
        return f"{holder}, whose bind has not finished, since {since}"
    return f"{holder}, whose state cannot be read, since {since}"


class LockContendedError(LockError):
    """Another pod holds the lock and may still need it."""

    def __init__(self, contention: Contention) -> None:
        super().__init__(
            describe_lock(contention.node, contention.lock, contention.owner, contention.rule)
        )
        self.contention = contention


def _rv(obj: JsonObject) -> int | None:
    try:
        return int(NodeView(obj).resource_version)
    except ValueError:
        return None


class NodeLocker:
    """Takes and releases node locks for pods."""

    def __init__(
        self,
        client: KubeClient,
        *,
        owners: LockOwners,
        cached: Callable[[str], JsonObject | None] = lambda _name: None,
        timeout_s: float = 300.0,
        now: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
        on_action: Callable[[LockAction], None] | None = None,
        on_miss: Callable[[], None] | None = None,
        holders: Callable[[str, LockRule], Sequence[tuple[str, str]]] = lambda _n, _r: (),
    ) -> None:
        """``cached``: the node watch's copy by name; ``on_miss``: a node read with a GET;
        ``holders``: the pods held on a node by the vendors that lock with a rule's key (the
        candidates for owning a lock whose value names no pod)."""
        self._client = client
        self._owners = owners
        self._candidates = holders
        self._cached = cached
        self._timeout = timedelta(seconds=timeout_s)
        self._now = now
        self._rng = rng or random.Random()
        self._on_action = on_action
        self._on_miss = on_miss
        self._written: dict[str, JsonObject] = {}
        self._holders: dict[tuple[str, str], tuple[str, str, str]] = {}
        """(node, key) → (value, namespace, pod) written by this process, for the keys whose
        value names no pod."""

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    def known_node(self, name: str) -> JsonObject | None:
        """The newest copy of node ``name`` this process has (watch, or its own last write).

        resourceVersions are compared as numbers when both are (etcd's are); otherwise the
        watch's copy wins."""
        cached = self._cached(name)
        written = self._written.get(name)
        if written is None:
            return cached
        if cached is not None:
            mine, seen = _rv(written), _rv(cached)
            if mine is None or seen is None or seen >= mine:
                del self._written[name]
                return cached
        return written

    async def _read(self, name: str) -> JsonObject:
        if self._on_miss is not None:
            self._on_miss()
        return await self._client.get(NODES, name)

    async def acquire(
        self, node_name: str, *, namespace: str, pod: str, rule: LockRule = MUTEX_LOCK
    ) -> LockAction:
        """Take the lock ``rule.key`` for ``namespace/pod``; returns what was done.

        Raises :class:`LockContendedError`, or :class:`LockError` (API failure, the node gone,
        too many conflicts).
        """
        conflicts = 0
        current = self.known_node(node_name)
        while True:
            try:
                if current is None:
                    current = await self._read(node_name)
                action = await self._decide(
                    node_name, current, namespace=namespace, pod=pod, rule=rule
                )
                if action is not LockAction.REENTER:
                    value = rule.encode(NodeLock(self._now(), namespace, pod))
                    self._written[node_name] = await patch_metadata(
                        self._client,
                        NODES,
                        node_name,
                        annotations={rule.key: value},
                        resource_version=NodeView(current).resource_version or None,
                    )
                    if not rule.names_owner:
                        self._holders[node_name, rule.key] = (value, namespace, pod)
                if self._on_action is not None:
                    self._on_action(action)
                return action
            except ConflictError as exc:
                conflicts += 1
                if conflicts >= _ATTEMPTS:
                    raise LockError(f"cannot lock node {node_name}: {exc}") from exc
                current = None
                if conflicts > 1:
                    await asyncio.sleep(_CONFLICT_BACKOFF.delay(conflicts - 2, self._rng))
            except NotFoundError:
                raise LockError(f"node {node_name} not found") from None
            except KubeError as exc:
                raise LockError(f"cannot lock node {node_name}: {exc}") from exc

    def as_known(self, node_name: str, rule: LockRule, value: str | None) -> str | None:
        """The value in the mutex's form, naming the pod this process wrote it for where the
        key itself names none — or, written by another process (or before a restart), the one
        pod the caches show waiting for it (:meth:`LockOwners.sole_waiting`) — (``None``: no
        lock; unreadable values are passed on as found)."""
        if value is None or rule.names_owner:
            return value
        holder = self._holders.get((node_name, rule.key))
        if holder is not None and holder[0] != value:
            del self._holders[node_name, rule.key]
            holder = None
        try:
            lock = rule.decode(value)
        except DecodeError:
            return value
        if holder is None:
            owner = self._owners.sole_waiting(
                self._candidates(node_name, rule), node_name, lock, rule
            )
            if owner is None:
                return encode_node_lock(NodeLock(lock.acquired))
            return encode_node_lock(NodeLock(lock.acquired, *owner))
        return encode_node_lock(NodeLock(lock.acquired, holder[1], holder[2]))

    async def _decide(
        self, node_name: str, current: JsonObject, *, namespace: str, pod: str, rule: LockRule
    ) -> LockAction:
        found = NodeView(current).annotations.get(rule.key)
        value = self.as_known(node_name, rule, found)
        now = self._now()
        timeout = rule.timeout_or(self._timeout)
        owner = owner_to_check(value, namespace=namespace, pod=pod, now=now, timeout=timeout)
        state: OwnerState | None = None
        lock: NodeLock | None = None
        if value is not None:
            try:
                lock = MUTEX_LOCK.decode(value)
            except DecodeError:
                lock = None
        if owner is not None and lock is not None:
            state = await self._owners.state(*owner, node_name, lock, rule)
        action = decide_acquire(
            value, namespace=namespace, pod=pod, now=now, timeout=timeout, owner=state
        )
        if action is LockAction.CONTENDED and lock is not None:
            overdue = state is not None and is_overdue(value, now=now, timeout=timeout, owner=state)
            frees_at = None
            if lock.legacy or state is OwnerState.BINDING:
                frees_at = lock.acquired + timeout
                if is_expired(lock, now, timeout):
                    frees_at = now
            raise LockContendedError(
                Contention(node_name, found or "", rule, lock, state, overdue, frees_at)
            )
        return action

    async def release(
        self, node_name: str, *, namespace: str, pod: str, rule: LockRule = MUTEX_LOCK
    ) -> bool:
        """Delete the lock ``rule.key`` if it is ours (or legacy; a key naming no pod: only the
        value this process wrote for this pod); returns whether one was deleted.

        Raises :class:`LockError` when the API keeps failing.
        """
        current = self.known_node(node_name)
        for attempt in range(_ATTEMPTS):
            try:
                if current is None:
                    current = await self._read(node_name)
                found = NodeView(current).annotations.get(rule.key)
                if not self._releasable(node_name, rule, found, namespace=namespace, pod=pod):
                    return False
                self._written[node_name] = await patch_metadata(
                    self._client,
                    NODES,
                    node_name,
                    annotations={rule.key: None},
                    resource_version=NodeView(current).resource_version or None,
                )
                self._holders.pop((node_name, rule.key), None)
                return True
            except NotFoundError:
                return False
            except ConflictError as exc:
                if attempt + 1 >= _ATTEMPTS:
                    raise LockError(f"cannot unlock node {node_name}: {exc}") from exc
                current = None
                if attempt:
                    await asyncio.sleep(_CONFLICT_BACKOFF.delay(attempt - 1, self._rng))
            except KubeError as exc:
                raise LockError(f"cannot unlock node {node_name}: {exc}") from exc
        return False

    def _releasable(
        self, node_name: str, rule: LockRule, found: str | None, *, namespace: str, pod: str
    ) -> bool:
        if found is not None and not rule.names_owner:
            return self._holders.get((node_name, rule.key)) == (found, namespace, pod)
        action = decide_release(found, namespace=namespace, pod=pod)
        return action is ReleaseAction.RELEASE
