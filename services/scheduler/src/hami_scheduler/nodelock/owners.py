"""Where the pod a node lock names stands (:class:`~hami_protocol.node.lock.OwnerState`), from
what this process already knows; one GET only when it knows nothing.

:meth:`LockOwners.state`, in order:

1. a pod this process is binding right now (between its lock write and the end of its
   Binding) → ``BINDING``;
2. the pod watch's copy (bound pods carrying an allocation; the slimmed copy keeps
   ``spec.nodeName``, the phase when terminal, ``deletionTimestamp``, ``hami.io/bind-phase``
   and ``hami.io/bind-time``) → its state.  A state that would *free* the lock (terminal,
   elsewhere, finished) is trusted only when the copy's ``bind-time`` is not older than the
   lock (less ``_SLACK_S``): a lock taken after that pod was bound belongs to a newer pod of
   the same name (deleted and created again) whose events the watch has not delivered yet;
3. a pod this process bound to this node less than ``recent_ttl_s`` (5 s) ago, not seen by the
   pod watch since → ``WAITING`` (its Binding's watch event is on its way).  Not longer: a watch
   that lost events (dropped, compacted, relisted after the pod was gone) never shows a pod
   deleted meanwhile, and its lock would be kept for nothing — after the grace, step 4 asks;
4. otherwise a GET (counted by ``on_miss``): NotFound → ``GONE``, an error → ``UNKNOWN``.

Staleness in 2 and 3 can only err towards waiting (a pod never returns from finished,
terminal or bound elsewhere to waiting), which costs time, never another pod's devices.
:meth:`LockOwners.known` is 1–3 alone, for the periodic overdue check (no reads).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Final

from hami_kube.errors import KubeError, NotFoundError
from hami_kube.objects import PodView, key_for, object_key
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol import keys
from hami_protocol.node.lock import NodeLock, OwnerState, owner_state
from hami_protocol.node.lock_keys import MUTEX_LOCK, LockRule

__all__ = ["LockOwners"]

_SLACK_S: Final = 2.0
"""Clock and rounding slack between a lock's time and its owner's ``bind-time`` (both whole
seconds, written one after the other by the same bind)."""


def _state_of(pod: PodView, node: str, rule: LockRule) -> OwnerState:
    return owner_state(
        exists=True,
        node=node,
        bound_to=pod.node_name,
        phase=pod.phase,
        deleting=pod.deleting,
        allocated=rule.allocated(pod.annotations),
    )


def _bound_at(pod: PodView) -> float | None:
    try:
        return float(pod.annotations.get(keys.BIND_TIME, ""))
    except ValueError:
        return None


class LockOwners:
    """See the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        *,
        pods: Callable[[str], JsonObject | None],
        on_miss: Callable[[], None] | None = None,
        recent_ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``pods``: the pod watch's copy by ``namespace/name`` key."""
        self._client = client
        self._pods = pods
        self._on_miss = on_miss
        self._recent_ttl_s = recent_ttl_s
        self._clock = clock
        self._binding: dict[str, int] = {}
        self._recent: dict[str, tuple[str, float]] = {}

    @contextmanager
    def binding(self, namespace: str, pod: str) -> Iterator[None]:
        """Marks ``namespace/pod`` as being bound by this process for the block."""
        key = key_for(namespace, pod)
        self._binding[key] = self._binding.get(key, 0) + 1
        try:
            yield
        finally:
            left = self._binding[key] - 1
            if left:
                self._binding[key] = left
            else:
                del self._binding[key]

    def bound(self, namespace: str, pod: str, node: str) -> None:
        """This process's Binding of ``namespace/pod`` to ``node`` succeeded."""
        self._recent[key_for(namespace, pod)] = (node, self._clock())

    def pod_event(self, obj: JsonObject, *, deleted: bool) -> None:
        """The pod watch delivered an event for this pod: its copy is the source from now on."""
        if self._recent:
            self._recent.pop(object_key(obj), None)

    def node_event(self, obj: JsonObject, *, deleted: bool) -> None:
        """Nodes do not change what is known of owners."""

    def sole_waiting(
        self, candidates: Iterable[tuple[str, str]], node: str, lock: NodeLock, rule: LockRule
    ) -> tuple[str, str] | None:
        """Among ``candidates`` (``(namespace, pod)`` held on ``node``), the one pod that can
        own ``lock`` — known to wait for its Allocate there, bound when the lock was taken or
        later — if exactly one can; from the caches only.

        A key whose value names no pod (Cambricon's) is known to its writer only; another
        replica, or this process after a restart, finds the owner this way instead of freeing
        a waiting pod's lock by age."""
        found: list[tuple[str, str]] = []
        for namespace, pod in candidates:
            owned = NodeLock(lock.acquired, namespace, pod)
            if self.known(namespace, pod, node, owned, rule) is not OwnerState.WAITING:
                continue
            cached = self._pods(key_for(namespace, pod))
            bound_at = None if cached is None else _bound_at(PodView(cached))
            if bound_at is not None and bound_at < lock.acquired.timestamp() - _SLACK_S:
                continue
            found.append((namespace, pod))
        return found[0] if len(found) == 1 else None

    def known(
        self, namespace: str, pod: str, node: str, lock: NodeLock, rule: LockRule = MUTEX_LOCK
    ) -> OwnerState | None:
        """The owner's state from what this process knows (1–3 above); ``None``: unknown.
        ``rule``: the lock's key, which says how its plugin marks the owner done."""
        key = key_for(namespace, pod)
        if key in self._binding:
            return OwnerState.BINDING
        cached = self._pods(key)
        if cached is not None:
            view = PodView(cached)
            state = _state_of(view, node, rule)
            if not state.frees_the_lock:
                return state
            bound_at = _bound_at(view)
            if bound_at is not None and bound_at >= lock.acquired.timestamp() - _SLACK_S:
                return state
        recent = self._recent.get(key)
        if recent is not None:
            where, when = recent
            if self._clock() - when > self._recent_ttl_s:
                del self._recent[key]
            elif where == node:
                return OwnerState.WAITING
        return None

    async def state(
        self, namespace: str, pod: str, node: str, lock: NodeLock, rule: LockRule = MUTEX_LOCK
    ) -> OwnerState:
        """The owner's state: :meth:`known`, else one GET."""
        state = self.known(namespace, pod, node, lock, rule)
        if state is not None:
            return state
        if self._on_miss is not None:
            self._on_miss()
        try:
            found = PodView(await self._client.get(PODS, pod, namespace=namespace))
        except NotFoundError:
            return OwnerState.GONE
        except KubeError:
            return OwnerState.UNKNOWN
        return _state_of(found, node, rule)
