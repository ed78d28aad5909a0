"""What each preemption the scheduling loop carried out did, kept for the invariant checker.

kube-scheduler keeps no such record (its trace is the ``Preempted`` Events on the victims and the
preemptor's ``nominatedNodeName``); the emulator keeps one because the fault scenarios judge each
preemption afterwards — were the victims of lower priority, was each of them needed — and that
needs the node as it was at that moment, which no later snapshot shows: the victims are gone,
their devices given to others.

A :class:`PreemptionRecord` holds the objects as the loop's caches had them when the victims
were deleted: the preemptor, the node (its device register), the victims and every pod bound to
the node then (their allocation annotations), and the other pods of at least its priority
nominated to the node.  :class:`PreemptionLog` keeps the latest
:data:`DEFAULT_CAPACITY` of them.  Plain data, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from hami_kube.objects import PodView

__all__ = ["DEFAULT_CAPACITY", "PreemptionLog", "PreemptionRecord"]

DEFAULT_CAPACITY: Final = 512
"""Records kept: a fault scenario carries out a handful, the bench's hundreds of scenarios read
each scenario's own before the next begins."""


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """One preemption: ``preemptor`` evicted ``victims`` from ``node`` at ``at`` (UTC)."""

    at: datetime
    preemptor: Mapping[str, Any]
    node: str
    node_object: Mapping[str, Any] | None
    """The node as the loop's cache held it (``None``: not in the cache any more)."""
    victims: tuple[Mapping[str, Any], ...]
    """Most important first, as deleted (already-terminating victims included)."""
    on_node: tuple[Mapping[str, Any], ...]
    """Every pod bound or assumed to the node then, victims included."""
    nominated: tuple[Mapping[str, Any], ...] = ()
    """The other pods nominated to the node then whose priority is at least the preemptor's
    (the room they wait for is not the preemptor's to take)."""

    @property
    def preemptor_key(self) -> str:
        return PodView(self.preemptor).key

    @property
    def preemptor_uid(self) -> str:
        return PodView(self.preemptor).uid

    @property
    def priority(self) -> int:
        return PodView(self.preemptor).priority


class PreemptionLog:
    """The latest preemptions, oldest first, at most ``capacity``."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._records: deque[PreemptionRecord] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: PreemptionRecord) -> None:
        self._records.append(record)

    def records(self, since: datetime | None = None) -> tuple[PreemptionRecord, ...]:
        """The records kept, from ``since`` on when given."""
        return tuple(r for r in self._records if since is None or r.at >= since)
