"""The node lock (``hami.io/mutex.lock``): value codec and the acquire/release decisions.

Value: ``<RFC3339 time>,<namespace>,<pod>``, e.g. ``2024-05-14T07:07:33Z,default,train-0``.
Older writers stored only the time (a *legacy* lock: no owner).  The lock keeps one pod at a time
between Bind and the device plugin's Allocate, and tells the plugin which pod it is serving.

**When a lock may be taken over.**  HAMi takes over any lock older than its timeout (5 minutes).
When the kubelet is slower than that, the next pod takes the lock while its owner still waits for
Allocate, and the two pods receive each other's devices and limits (HAMi #3096).  Here age alone
never hands a lock over: what decides is the owner (:class:`OwnerState`) — gone, terminal, bound
to another node, or done allocating (``bind-phase`` success or failed) frees the lock at any age;
an owner bound here and still waiting keeps it at any age (past the timeout it is *overdue*: the
caller reports it); an owner not bound yet (its Bind running, or dead before the Binding) keeps it
until the timeout.  An owner whose state could not be read keeps it.

The decisions are pure; the caller does the API reads and the resourceVersion-guarded patches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Final

from hami_protocol.errors import DecodeError, ValidationError
from hami_protocol.keys import NODE_LOCK

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "LockAction",
    "NodeLock",
    "OwnerState",
    "ReleaseAction",
    "decide_acquire",
    "decide_release",
    "decode_node_lock",
    "encode_node_lock",
    "is_expired",
    "is_overdue",
    "owner_state",
    "owner_to_check",
]

DEFAULT_LOCK_TIMEOUT: Final = timedelta(minutes=5)

# Go's time.Parse(time.RFC3339, ...): fractional seconds are accepted although never written.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class NodeLock:
    """A decoded lock.  ``acquired`` is timezone-aware UTC; a legacy lock has no owner."""

    acquired: datetime
    namespace: str = ""
    pod: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "acquired", _as_utc(self.acquired))

    @property
    def legacy(self) -> bool:
        return not self.namespace and not self.pod

    def owned_by(self, namespace: str, pod: str) -> bool:
        return not self.legacy and (self.namespace, self.pod) == (namespace, pod)


class LockAction(StrEnum):
    """What Bind should do about the lock; all but ``CONTENDED`` end with us holding it."""

    ACQUIRE = "acquire"  # no lock: write ours
    REENTER = "reenter"  # already ours (a pod locking for a second vendor): nothing to write
    TAKEOVER_EXPIRED = "takeover_expired"  # unreadable, or past the timeout with no waiting owner
    TAKEOVER_DANGLING = "takeover_dangling"  # its owner pod is gone: replace it
    TAKEOVER_FINISHED = "takeover_finished"  # its owner no longer waits for Allocate here
    CONTENDED = "contended"  # another pod holds it and may still need it: wait or fail


class OwnerState(StrEnum):
    """Where the pod a lock names stands, as far as the lock is concerned."""

    GONE = "gone"  # no such pod
    TERMINAL = "terminal"  # Succeeded or Failed, or being deleted
    ELSEWHERE = "elsewhere"  # bound to another node
    FINISHED = "finished"  # bound here, bind-phase success or failed: its Allocate is over
    WAITING = "waiting"  # bound here, still waiting for the device plugin's Allocate
    BINDING = "binding"  # not bound yet: its Bind runs (or died before the Binding)
    UNKNOWN = "unknown"  # could not be read

    @property
    def frees_the_lock(self) -> bool:
        return self in _FREEING


_FREEING: Final = frozenset(
    {OwnerState.GONE, OwnerState.TERMINAL, OwnerState.ELSEWHERE, OwnerState.FINISHED}
)
_FINISHED_PHASES: Final = frozenset({"success", "failed"})
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def owner_state(
    *,
    exists: bool,
    node: str,
    bound_to: str = "",
    phase: str = "",
    bind_phase: str = "",
    deleting: bool = False,
    allocated: bool | None = None,
) -> OwnerState:
    """The :class:`OwnerState` of a lock owner read from the API (``exists=False``: NotFound).

    ``bound_to`` is its ``spec.nodeName``, ``phase`` its ``status.phase``, ``bind_phase`` its
    ``hami.io/bind-phase``; ``node`` is the node whose lock this is.  ``allocated``, when given,
    says instead of ``bind_phase`` whether its Allocate is over (a vendor lock whose plugin marks
    that its own way: :meth:`~hami_protocol.node.lock_keys.LockRule.allocated`).  A pod bound
    here without a finished bind-phase is taken as waiting: being wrong there costs a wait, the
    other way costs another pod's limits.
    """
    if not exists:
        return OwnerState.GONE
    if deleting or phase in _TERMINAL_PHASES:
        return OwnerState.TERMINAL
    if not bound_to:
        return OwnerState.BINDING
    if bound_to != node:
        return OwnerState.ELSEWHERE
    finished = bind_phase in _FINISHED_PHASES if allocated is None else allocated
    if finished:
        return OwnerState.FINISHED
    return OwnerState.WAITING


class ReleaseAction(StrEnum):
    RELEASE = "release"
    NOOP = "noop"


def _parse_rfc3339(text: str) -> datetime | None:
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        tz = UTC
        if zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        micros = int((fraction or "").ljust(6, "0")[:6])
        moment = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tz
        )
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def decode_node_lock(value: str, *, key: str = NODE_LOCK) -> NodeLock:
    """Decode ``<time>,<ns>,<pod>`` or a legacy bare ``<time>``; raises :class:`DecodeError`."""
    parts = [part.strip() for part in value.split(",")]
    if len(parts) not in (1, 3):
        raise DecodeError(
            key, value, f"expected '<time>' or '<time>,<ns>,<pod>', got {len(parts)} parts"
        )
    acquired = _parse_rfc3339(parts[0])
    if acquired is None:
        raise DecodeError(key, value, f"lock time {parts[0]!r} is not an RFC 3339 timestamp")
    if len(parts) == 1:
        return NodeLock(acquired)
    return NodeLock(acquired, parts[1], parts[2])


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def encode_node_lock(lock: NodeLock) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ[,<ns>,<pod>]`` (UTC, whole seconds, as Go's RFC3339 layout)."""
    t = _as_utc(lock.acquired)
    stamp = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"
    if lock.legacy:
        return stamp
    for name, text in (("namespace", lock.namespace), ("pod", lock.pod)):
        if not text or "," in text or text != text.strip():
            raise ValidationError(
                NODE_LOCK, text, f"{name} must be non-empty, without ',' or edge spaces"
            )
    return f"{stamp},{lock.namespace},{lock.pod}"


def is_expired(lock: NodeLock, now: datetime, timeout: timedelta) -> bool:
    """Whether more than ``timeout`` has passed since the lock was taken."""
    return _as_utc(now) - lock.acquired > timeout


def _decode_or_none(value: str) -> NodeLock | None:
    try:
        return decode_node_lock(value)
    except DecodeError:
        return None


def owner_to_check(
    value: str | None, *, namespace: str, pod: str, now: datetime, timeout: timedelta
) -> tuple[str, str] | None:
    """The ``(namespace, pod)`` whose :class:`OwnerState` :func:`decide_acquire` needs, or
    ``None`` (no lock, an unreadable or legacy one, or ours)."""
    if value is None:
        return None
    lock = _decode_or_none(value)
    if lock is None or lock.legacy or lock.owned_by(namespace, pod):
        return None
    return lock.namespace, lock.pod


def decide_acquire(
    value: str | None,
    *,
    namespace: str,
    pod: str,
    now: datetime,
    timeout: timedelta,
    owner: OwnerState | None = None,
) -> LockAction:
    """Decide how pod ``namespace/pod`` takes the node lock whose current value is ``value``.

    No lock → acquire.  Unreadable → take over (nothing could ever expire it otherwise; HAMi
    returns an error there, leaving the node locked until someone edits the annotation).  Ours →
    re-enter, or refresh it when it is past the timeout.  A legacy lock names no owner: take it
    over past the timeout, else contended.  Another owner: see the module docstring — its
    ``owner`` state frees the lock at any age, or keeps it (a waiting owner even past the
    timeout), and an owner not bound yet keeps it until the timeout.  ``owner=None`` (not read)
    counts as :attr:`OwnerState.UNKNOWN`.
    """
    if value is None:
        return LockAction.ACQUIRE
    lock = _decode_or_none(value)
    if lock is None:
        return LockAction.TAKEOVER_EXPIRED
    expired = is_expired(lock, now, timeout)
    if lock.owned_by(namespace, pod):
        return LockAction.TAKEOVER_EXPIRED if expired else LockAction.REENTER
    if lock.legacy:
        return LockAction.TAKEOVER_EXPIRED if expired else LockAction.CONTENDED
    state = OwnerState.UNKNOWN if owner is None else owner
    if state is OwnerState.GONE:
        return LockAction.TAKEOVER_DANGLING
    if state.frees_the_lock:
        return LockAction.TAKEOVER_FINISHED
    if state is OwnerState.BINDING and expired:
        return LockAction.TAKEOVER_EXPIRED
    return LockAction.CONTENDED


def is_overdue(value: str | None, *, now: datetime, timeout: timedelta, owner: OwnerState) -> bool:
    """A lock past its timeout whose owner still waits for Allocate: kept (not taken over by age,
    see the module docstring), and worth an Event, a metric and a log line naming the owner."""
    if value is None or owner is not OwnerState.WAITING:
        return False
    lock = _decode_or_none(value)
    return lock is not None and not lock.legacy and is_expired(lock, now, timeout)


def decide_release(
    value: str | None, *, namespace: str, pod: str, force: bool = False
) -> ReleaseAction:
    """Whether pod ``namespace/pod`` may delete the lock ``value``.

    Absent → no-op; ``force`` → release; legacy (no owner) → anyone may release; owned → only
    the owner.  An unreadable value is released only when it ends with ``,<ns>,<pod>``, which
    is the test HAMi applies to every value.
    """
    if value is None:
        return ReleaseAction.NOOP
    if force:
        return ReleaseAction.RELEASE
    lock = _decode_or_none(value)
    if lock is None:
        owned = value.endswith(f",{namespace},{pod}")
        return ReleaseAction.RELEASE if owned else ReleaseAction.NOOP
    if lock.legacy or lock.owned_by(namespace, pod):
        return ReleaseAction.RELEASE
    return ReleaseAction.NOOP
