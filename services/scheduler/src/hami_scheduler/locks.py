"""The node lock (``hami.io/mutex.lock``) through the API server, with optimistic concurrency.

Bind holds the lock from before the Binding until the device plugin's Allocate releases it, so
the plugin knows which pod it serves.  :meth:`NodeLocker.acquire`:

1. reads the node (the caller's fresh copy first) and decides with
   :func:`~hami_protocol.node.lock.decide_acquire`: no lock → take it; ours → re-enter (nothing
   to write); unreadable → take it over; otherwise the owner pod decides (read with a GET): gone,
   terminal, bound elsewhere or done allocating → take it over; still waiting for its Allocate
   on this node → contended, at any age (HAMi #3096); not bound yet → contended until the
   timeout;
2. writes ``<RFC3339>,<ns>,<pod>`` with a merge patch carrying the node's ``resourceVersion``,
   so two schedulers (or a plugin releasing meanwhile) cannot both win: a 409 means someone
   else wrote first, and the decision is made again on a fresh read (5 tries, 100 ms doubling
   with jitter, as HAMi);
3. a contended lock is an error (``node <n> has been locked within 5m0s``), except for PodGroup
   members, which retry every 100 ms for ``retry_timeout_s`` (HAMi's
   ``--node-lock-retry-timeout``; ``node_lock_waiting`` is logged once when they start).

:meth:`NodeLocker.release` deletes the lock only when
:func:`~hami_protocol.node.lock.decide_release`
allows it (ours, or a legacy lock), with the same precondition.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import structlog

from hami_kube.backoff import BackoffPolicy
from hami_kube.errors import ConflictError, KubeError, NotFoundError
from hami_kube.objects import NodeView, PodView
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES, PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_kube.timefmt import utc_now
from hami_protocol.durations import format_go_duration
from hami_protocol.keys import BIND_PHASE, NODE_LOCK
from hami_protocol.node.lock import (
    LockAction,
    NodeLock,
    OwnerState,
    ReleaseAction,
    decide_acquire,
    decide_release,
    encode_node_lock,
    owner_state,
    owner_to_check,
)

__all__ = ["LockContendedError", "LockError", "NodeLocker"]

log = structlog.get_logger("hami_scheduler")

_ATTEMPTS: Final = 5
_CONFLICT_BACKOFF: Final = BackoffPolicy(initial=0.1, factor=2.0, cap=1.6, jitter=0.5)
_GROUP_RETRY_S: Final = 0.1


class LockError(Exception):
    """The lock could not be taken (API failure, or too many write conflicts)."""


class LockContendedError(LockError):
    """Another live pod holds the lock and it has not expired."""


def _lock_value(node: Mapping[str, Any]) -> str | None:
    return NodeView(node).annotations.get(NODE_LOCK)


class NodeLocker:
    """Takes and releases node locks for pods."""

    def __init__(
        self,
        client: KubeClient,
        *,
        timeout_s: float = 300.0,
        retry_timeout_s: float = 28.0,
        now: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._timeout = timedelta(seconds=timeout_s)
        self._retry_timeout_s = retry_timeout_s
        self._now = now
        self._rng = rng or random.Random()

    @property
    def timeout_text(self) -> str:
        return format_go_duration(self._timeout.total_seconds())

    async def _owner_state(self, namespace: str, pod: str, node: str) -> OwnerState:
        try:
            found = PodView(await self._client.get(PODS, pod, namespace=namespace))
        except NotFoundError:
            return OwnerState.GONE
        except KubeError:
            return OwnerState.UNKNOWN
        return owner_state(
            exists=True,
            node=node,
            bound_to=found.node_name,
            phase=found.phase,
            bind_phase=found.annotations.get(BIND_PHASE, ""),
            deleting=found.deleting,
        )

    async def acquire(
        self,
        node_name: str,
        *,
        namespace: str,
        pod: str,
        node: JsonObject | None = None,
        pod_group: bool = False,
    ) -> LockAction:
        """Take the lock for ``namespace/pod``; returns what was done.

        Raises :class:`LockContendedError` or :class:`LockError`.
        """
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + (self._retry_timeout_s if pod_group else 0.0)
        conflicts = 0
        waited = False
        current = node
        while True:
            try:
                if current is None:
                    current = await self._client.get(NODES, node_name)
                value = _lock_value(current)
                now = self._now()
                owner = owner_to_check(
                    value, namespace=namespace, pod=pod, now=now, timeout=self._timeout
                )
                state = None if owner is None else await self._owner_state(*owner, node_name)
                action = decide_acquire(
                    value,
                    namespace=namespace,
                    pod=pod,
                    now=now,
                    timeout=self._timeout,
                    owner=state,
                )
                if action is LockAction.REENTER:
                    return action
                if action is LockAction.CONTENDED:
                    if loop.time() < give_up_at:
                        if not waited:
                            waited = True
                            log.info("node_lock_waiting", node=node_name, pod=f"{namespace}/{pod}")
                        current = None
                        await asyncio.sleep(_GROUP_RETRY_S)
                        continue
                    raise LockContendedError(
                        f"node {node_name} has been locked within {self.timeout_text}"
                    )
                await patch_metadata(
                    self._client,
                    NODES,
                    node_name,
                    annotations={NODE_LOCK: encode_node_lock(NodeLock(now, namespace, pod))},
                    resource_version=NodeView(current).resource_version or None,
                )
                return action
            except ConflictError as exc:
                conflicts += 1
                if conflicts >= _ATTEMPTS:
                    raise LockError(f"cannot lock node {node_name}: {exc}") from exc
                current = None
                await asyncio.sleep(_CONFLICT_BACKOFF.delay(conflicts - 1, self._rng))
            except KubeError as exc:
                raise LockError(f"cannot lock node {node_name}: {exc}") from exc

    async def release(self, node_name: str, *, namespace: str, pod: str) -> bool:
        """Delete the lock if it is ours (or legacy); returns whether one was deleted.

        Raises :class:`LockError` when the API keeps failing.
        """
        for attempt in range(_ATTEMPTS):
            try:
                current = await self._client.get(NODES, node_name)
                value = _lock_value(current)
                if decide_release(value, namespace=namespace, pod=pod) is ReleaseAction.NOOP:
                    return False
                await patch_metadata(
                    self._client,
                    NODES,
                    node_name,
                    annotations={NODE_LOCK: None},
                    resource_version=NodeView(current).resource_version or None,
                )
                return True
            except NotFoundError:
                return False
            except ConflictError as exc:
                if attempt + 1 >= _ATTEMPTS:
                    raise LockError(f"cannot unlock node {node_name}: {exc}") from exc
                await asyncio.sleep(_CONFLICT_BACKOFF.delay(attempt, self._rng))
            except KubeError as exc:
                raise LockError(f"cannot unlock node {node_name}: {exc}") from exc
        return False
