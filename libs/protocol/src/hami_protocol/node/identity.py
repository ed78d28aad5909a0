"""``hami.io/node-allocate-identity`` (ours): how a node's device plugin tells pods apart, and
since when it has said so.

Value: ``pod-resources <UTC time>`` (``pod-resources 2026-11-28 14:00:00``, the handshake's
time layout).  Our device plugin writes it while it reads the kubelet's PodResources API,
restamps it every :data:`IDENTITY_REFRESH` and removes it when it stops; binds to a node whose
value is fresh (stamped within :data:`IDENTITY_FRESH_FOR`) need no node lock.  A plugin that
does not restamp it — HAMi's, deployed over ours, or ours killed before it could remove it —
lets it go stale, and binds take the lock again within :data:`IDENTITY_FRESH_FOR`.  A value
without a time (what our plugin wrote before) or one that does not parse is stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from hami_protocol.keys import ALLOCATE_IDENTITY_POD_RESOURCES
from hami_protocol.node.handshake import parse_handshake_time, wire_time

__all__ = [
    "IDENTITY_FRESH_FOR",
    "IDENTITY_REFRESH",
    "AllocateIdentity",
    "format_identity",
    "identity_is_fresh",
    "identity_needs_stamp",
    "parse_identity",
]

IDENTITY_REFRESH: Final = timedelta(minutes=5)
"""How often the device plugin restamps the value (one node patch per node per refresh)."""
IDENTITY_FRESH_FOR: Final = timedelta(minutes=12)
"""How long a stamp is trusted: two refreshes missed, and a margin for clock skew."""


@dataclass(frozen=True, slots=True)
class AllocateIdentity:
    """A decoded value: the mode (``pod-resources``) and when it was stamped (None: no time)."""

    mode: str
    stamped: datetime | None


def format_identity(now: datetime, mode: str = ALLOCATE_IDENTITY_POD_RESOURCES) -> str:
    return f"{mode} {wire_time(now)}"


def parse_identity(value: str | None) -> AllocateIdentity | None:
    """The value decoded; None when absent or empty."""
    if not value or not value.strip():
        return None
    mode, _, stamp = value.strip().partition(" ")
    return AllocateIdentity(mode, parse_handshake_time(stamp) if stamp else None)


def identity_is_fresh(
    value: str | None,
    now: datetime,
    *,
    mode: str = ALLOCATE_IDENTITY_POD_RESOURCES,
    within: timedelta = IDENTITY_FRESH_FOR,
) -> bool:
    """Whether ``value`` says ``mode`` with a stamp no older than ``within`` (and not ahead of
    ``now`` by more than that either: a clock far off is not trusted)."""
    identity = parse_identity(value)
    if identity is None or identity.mode != mode or identity.stamped is None:
        return False
    return abs(now - identity.stamped) <= within


def identity_needs_stamp(
    value: str | None, wanted: str | None, now: datetime, *, every: timedelta = IDENTITY_REFRESH
) -> bool:
    """Whether the plugin must (re)write the annotation: it wants ``wanted`` (a mode, or None
    for no annotation) and the node's ``value`` says otherwise or was stamped ``every`` ago."""
    identity = parse_identity(value)
    if wanted is None:
        return identity is not None
    if identity is None or identity.mode != wanted or identity.stamped is None:
        return True
    return not timedelta(0) <= now - identity.stamped < every
