"""Record how node locks and pods change during a scenario, for the node-lock and preemption
invariants.

:class:`TimelineRecorder` observes the in-process API server (``ApiServer.observe``: called as
each change is committed, never dropped) and keeps, stamped with the wall clock the events of
the scheduling loop are stamped with, every change of a node's ``hami.io/mutex.lock`` and of
what the lock rule and the preemption rules read of a pod (node, phase, ``bind-phase``,
deletion, priority, nomination). Used as ``with TimelineRecorder(api) as recorder: ...
recorder.timeline()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

from hami_kube.objects import NodeView, PodView
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.stack.state import LockMoment, PodMoment, Timeline, pod_key
from hami_protocol import keys

__all__ = ["TimelineRecorder"]

_DELETED = "DELETED"


def _pod_moment(at: datetime, pod: Mapping[str, Any], *, exists: bool) -> PodMoment:
    view = PodView(pod)
    if not exists:
        return PodMoment(at, pod_key(pod), exists=False)
    return PodMoment(
        at,
        pod_key(pod),
        exists=True,
        node=view.node_name,
        phase=view.phase,
        bind_phase=view.annotations.get(keys.BIND_PHASE, ""),
        deleting=view.deleting,
        priority=view.priority,
        nominated=view.nominated_node_name,
    )


class TimelineRecorder:
    """See the module docstring."""

    def __init__(self, api: ApiServer, *, clock: Callable[[], datetime] | None = None) -> None:
        self._api = api
        self._clock = clock or (lambda: datetime.now(UTC))
        self._since = datetime.min.replace(tzinfo=UTC)  # set when recording starts
        self._locks: list[LockMoment] = []
        self._pods: list[PodMoment] = []
        self._lock_of: dict[str, str | None] = {}
        self._pod_of: dict[str, PodMoment] = {}
        self._stop: Callable[[], None] | None = None

    def __enter__(self) -> Self:
        self._since = self._clock()
        for node in self._api.list("nodes"):
            self._node_changed(self._since, node)
        for pod in self._api.list("pods"):
            self._pod_changed(_pod_moment(self._since, pod, exists=True))
        self._stop = self._api.observe(self._changed)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def timeline(self) -> Timeline:
        """What was recorded so far."""
        return Timeline(since=self._since, locks=tuple(self._locks), pods=tuple(self._pods))

    def _changed(self, resource: str, event_type: str, obj: Mapping[str, Any]) -> None:
        now = self._clock()
        if resource == "nodes":
            self._node_changed(now, obj, gone=event_type == _DELETED)
        elif resource == "pods":
            self._pod_changed(_pod_moment(now, obj, exists=event_type != _DELETED))

    def _node_changed(self, at: datetime, node: Mapping[str, Any], *, gone: bool = False) -> None:
        view = NodeView(node)
        value = None if gone else view.annotations.get(keys.NODE_LOCK)
        if view.name in self._lock_of and self._lock_of[view.name] == value:
            return
        self._lock_of[view.name] = value
        self._locks.append(LockMoment(at, view.name, value))

    def _pod_changed(self, moment: PodMoment) -> None:
        last = self._pod_of.get(moment.key)
        if last is not None and _same(last, moment):
            return
        self._pod_of[moment.key] = moment
        self._pods.append(moment)


def _same(a: PodMoment, b: PodMoment) -> bool:
    return (a.exists, a.node, a.phase, a.bind_phase, a.deleting, a.nominated) == (
        b.exists,
        b.node,
        b.phase,
        b.bind_phase,
        b.deleting,
        b.nominated,
    )
