"""The node lock keys vendors use, and how each one reads: :class:`LockRule`.

HAMi locks a node per vendor at bind, with one of two keys (contract §0, §1):

* ``hami.io/mutex.lock`` (:data:`MUTEX_LOCK`) — ``<RFC3339>,<ns>,<pod>``
  (:mod:`hami_protocol.node.lock`), shared by NVIDIA, AMD, Ascend, Biren, Hygon, Iluvatar,
  Kunlun vXPU, MetaX sGPU and Vastai; the scheduler's ``--node-lock-timeout`` applies; the owner's
  device plugins are done with it once ``hami.io/bind-phase`` is ``success`` or ``failed``.
* ``cambricon.com/dsmlu.lock`` (:data:`CAMBRICON_LOCK`) — Cambricon's own: a bare RFC3339 time
  naming no pod, held at most 2 minutes by HAMi, released by cambricon-device-plugin once it has
  set ``CAMBRICON_DSMLU_ASSIGNED: true`` on the pod.

The takeover rule is the same for both (:func:`~hami_protocol.node.lock.decide_acquire`): a
Cambricon lock reads as a lock naming no pod (age frees it) unless its owner is known — our
scheduler remembers whom it wrote it for, and otherwise (a restart, another replica) takes the
one pod its caches show waiting for that node's Allocate — so age never hands it away from a pod
still waiting for its Allocate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from hami_protocol import keys
from hami_protocol.errors import DecodeError, ValidationError
from hami_protocol.node.lock import NodeLock, decode_node_lock, encode_node_lock

__all__ = [
    "CAMBRICON_LOCK",
    "CAMBRICON_LOCK_TIMEOUT",
    "MUTEX_LOCK",
    "VENDOR_LOCK_KEYS",
    "LockRule",
    "decode_cambricon_lock",
    "encode_cambricon_lock",
    "lock_rule",
]

CAMBRICON_LOCK_TIMEOUT: Final = timedelta(minutes=2)


def encode_cambricon_lock(acquired: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds), what Go's ``Format(time.RFC3339)`` gives."""
    return encode_node_lock(NodeLock(acquired))


def decode_cambricon_lock(value: str) -> NodeLock:
    """The lock's time as a :class:`NodeLock` naming no pod; :class:`DecodeError` (naming
    ``cambricon.com/dsmlu.lock``) for anything but one RFC 3339 time."""
    if "," in value:
        raise DecodeError(
            keys.CAMBRICON_DSMLU_LOCK, value, "expected one RFC 3339 time, without ','"
        )
    return decode_node_lock(value, key=keys.CAMBRICON_DSMLU_LOCK)


@dataclass(frozen=True, slots=True)
class LockRule:
    """How one node lock key is written, read, timed out and freed."""

    key: str
    names_owner: bool
    """Whether the value names its pod (``<time>,<ns>,<pod>``)."""
    timeout: timedelta | None
    """Fixed by the vendor; ``None``: the scheduler's ``--node-lock-timeout``."""
    done_key: str
    """The pod annotation the vendor's device plugin sets once the pod's Allocate is over."""
    done_values: frozenset[str]

    def encode(self, lock: NodeLock) -> str:
        """The value for ``lock`` (its owner left out where the key names none)."""
        return encode_node_lock(lock) if self.names_owner else encode_cambricon_lock(lock.acquired)

    def decode(self, value: str) -> NodeLock:
        """Raises :class:`DecodeError` naming :attr:`key`."""
        return decode_node_lock(value) if self.names_owner else decode_cambricon_lock(value)

    def allocated(self, annotations: Mapping[str, str]) -> bool:
        """Whether the owner's device plugin is done with it (its Allocate is over)."""
        return annotations.get(self.done_key, "") in self.done_values

    def timeout_or(self, default: timedelta) -> timedelta:
        return default if self.timeout is None else self.timeout


MUTEX_LOCK: Final = LockRule(
    key=keys.NODE_LOCK,
    names_owner=True,
    timeout=None,
    done_key=keys.BIND_PHASE,
    done_values=frozenset({keys.BIND_PHASE_SUCCESS, keys.BIND_PHASE_FAILED}),
)
CAMBRICON_LOCK: Final = LockRule(
    key=keys.CAMBRICON_DSMLU_LOCK,
    names_owner=False,
    timeout=CAMBRICON_LOCK_TIMEOUT,
    done_key=keys.CAMBRICON_DSMLU_ASSIGNED,
    done_values=frozenset({"true"}),
)
_RULES: Final = {rule.key: rule for rule in (MUTEX_LOCK, CAMBRICON_LOCK)}
VENDOR_LOCK_KEYS: Final = tuple(key for key in _RULES if key != MUTEX_LOCK.key)
"""The node lock keys besides ``hami.io/mutex.lock``: each vendor's own."""


def lock_rule(key: str) -> LockRule:
    """The rule of node lock ``key``; :class:`ValidationError` for a key no vendor uses."""
    rule = _RULES.get(key)
    if rule is None:
        raise ValidationError(key, key, f"not a node lock key (known: {', '.join(sorted(_RULES))})")
    return rule
