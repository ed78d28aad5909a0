"""The ``locks`` invariant: a node lock refuses a bind only while its owner may still need it.

A bind refused because of a node lock (``node <n> has been locked ...`` or ``node <n> is locked
...``) is legitimate only while the lock's owner still waits for its Allocate on that node (bound
there, not terminal, ``bind-phase`` neither success nor failed), or has not been bound yet and the
lock is within its timeout; a refusal by a lock whose owner had finished, was gone, terminal or
bound elsewhere (or by an unreadable lock) is a violation. With a
:class:`~hami_kubesim.stack.state.Timeline` each refusal is judged by the owner's state around
the refusal (events are stamped to the second: any moment from 2 s before the stamped second to
its end may be the one); without one, only a lock still held at the snapshot can be judged: a
refusal after its expiry is a violation unless its owner still waits. Expired lock annotations may
stay until the next bind on the node takes them over (:func:`stale_locks`).

:func:`lock_problems` gives ``(node, what is wrong)`` pairs, which
:func:`~.invariants.check_locks` turns into violations.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from hami_kube.objects import NodeView, PodView
from hami_kube.timefmt import parse_time
from hami_kubesim.stack.state import ClusterState, Timeline
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.lock import NodeLock, OwnerState, decode_node_lock, owner_state

__all__ = ["DEFAULT_LOCK_TIMEOUT", "lock_problems", "stale_locks"]

DEFAULT_LOCK_TIMEOUT: Final = timedelta(minutes=5)
_SLACK: Final = timedelta(seconds=1)


def _locks(state: ClusterState) -> list[tuple[str, NodeLock | None, str]]:
    """``(node, lock or None when unreadable, raw value)`` for every node holding a lock."""
    found: list[tuple[str, NodeLock | None, str]] = []
    for node in state.nodes:
        view = NodeView(node)
        value = view.annotations.get(keys.NODE_LOCK)
        if value:
            found.append((view.name, _decode(value), value))
    return found


def stale_locks(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> list[str]:
    """Nodes whose lock annotation is past its expiry (left until the next bind takes it
    over)."""
    return [
        name
        for name, lock, _ in _locks(state)
        if lock is not None and state.taken_at - lock.acquired > lock_timeout
    ]


_REFUSAL: Final = re.compile(
    r"\bnode (?P<node>[^\s,;:\"']+) (?:has been locked|is locked)"
    r"(?: by (?P<owner>[^\s,;:\"']+/[^\s,;:\"']+))?"
)
_BEFORE: Final = timedelta(seconds=2)
"""How long before a refusal's stamped second the lock may have been judged (cache lag)."""


@dataclass(frozen=True, slots=True)
class _Refusal:
    node: str
    owner: str
    """``namespace/pod`` the message names (empty when it names none)."""
    when: datetime
    pod: str


def _refusals(state: ClusterState) -> Iterator[_Refusal]:
    """Every bind refused because of a node lock, once per time an event was stamped."""
    for event in state.events:
        match = _REFUSAL.search(str(event.get("message") or ""))
        if match is None:
            continue
        involved = event.get("involvedObject")
        who = involved if isinstance(involved, Mapping) else {}
        pod = f"{who.get('namespace', '')}/{who.get('name', '')}"
        stamps = {event.get("firstTimestamp"), event.get("lastTimestamp"), event.get("eventTime")}
        for stamp in stamps:
            when = _parse(stamp)
            if when is not None:
                yield _Refusal(match["node"], match["owner"] or "", when, pod)


def _parse(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _holds_legitimately(
    timeline: Timeline, refusal: _Refusal, at: datetime, timeout: timedelta
) -> bool:
    """Whether, at ``at``, the node's lock (or the owner the refusal names) could refuse."""
    value = timeline.lock_at(refusal.node, at)
    lock = None if value is None else _decode(value)
    owner = refusal.owner or (f"{lock.namespace}/{lock.pod}" if lock and not lock.legacy else "")
    within = lock is not None and at - lock.acquired <= timeout + _SLACK
    if not owner:
        return lock is not None and lock.legacy and within
    moment = timeline.pod_at(owner, at)
    state = owner_state(
        exists=moment is not None and moment.exists,
        node=refusal.node,
        bound_to=moment.node if moment else "",
        phase=moment.phase if moment else "",
        bind_phase=moment.bind_phase if moment else "",
        deleting=moment.deleting if moment else False,
    )
    if state is OwnerState.WAITING:
        return True
    named = lock is not None and not lock.legacy and f"{lock.namespace}/{lock.pod}" == owner
    return state is OwnerState.BINDING and named and within


def _decode(value: str) -> NodeLock | None:
    try:
        return decode_node_lock(value)
    except ProtocolError:
        return None


def _judge_by_timeline(
    state: ClusterState, timeline: Timeline, timeout: timedelta
) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for refusal in _refusals(state):
        if refusal.when < timeline.since:
            continue  # before the recording: nothing to judge it by
        start, end = refusal.when - _BEFORE, refusal.when + _SLACK
        moments = [start, *timeline.changes(start, end)]
        if any(_holds_legitimately(timeline, refusal, at, timeout) for at in moments):
            continue
        value = timeline.lock_at(refusal.node, refusal.when)
        found.append(
            (
                refusal.node,
                f"refused the bind of {refusal.pod} at {refusal.when:%H:%M:%S} although the lock "
                f"({value or 'none'}) had no owner waiting for its Allocate on the node",
            )
        )
    return found


def _judge_by_snapshot(state: ClusterState, timeout: timedelta) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name, lock, _ in _locks(state):
        if lock is None:
            continue
        expiry = lock.acquired + timeout
        owner = f"{lock.namespace}/{lock.pod}" if lock.pod else ""
        if owner and _owner_waits_now(state, owner, name):
            continue
        for refusal in _refusals(state):
            if refusal.node != name or (refusal.owner and refusal.owner != owner):
                continue
            if refusal.when > expiry + _SLACK:
                shown = owner or "an unnamed owner"
                found.append(
                    (
                        name,
                        f"lock of {shown} expired at {expiry:%H:%M:%S} and its owner does not "
                        f"wait for an Allocate here, but it refused a bind at "
                        f"{refusal.when:%H:%M:%S}",
                    )
                )
                break
    return found


def _owner_waits_now(state: ClusterState, owner: str, node: str) -> bool:
    namespace, _, name = owner.partition("/")
    pod = state.pod(namespace, name)
    if pod is None:
        return False
    view = PodView(pod)
    return (
        owner_state(
            exists=True,
            node=node,
            bound_to=view.node_name,
            phase=view.phase,
            bind_phase=view.annotations.get(keys.BIND_PHASE, ""),
            deleting=view.deleting,
        )
        is OwnerState.WAITING
    )


def lock_problems(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> list[tuple[str, str]]:
    """``(node, what is wrong)`` for the ``locks`` invariant (see the module doc)."""
    found = [
        (name, f"unreadable node lock {value!r}")
        for name, lock, value in _locks(state)
        if lock is None
    ]
    if state.timeline is not None:
        return found + _judge_by_timeline(state, state.timeline, lock_timeout)
    return found + _judge_by_snapshot(state, lock_timeout)
