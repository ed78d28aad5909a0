"""Which vendors of which nodes may take pods: the handshake rule, withdrawn devices, and bad
annotations reported once.

:class:`NodeHealth` is owned by :class:`~hami_scheduler.cache.view.SchedulerCache`, which hands
it each node's :class:`~hami_scheduler.cache.nodes.NodeFacts`.  Per node it keeps

* the vendors **marked unavailable**, by the row's :attr:`~hami_protocol.vendor.model.Vendor.health`
  rule: ``handshake`` — a handshake ``Requesting_<ts>`` older than ``--handshake-timeout`` while
  the node no longer advertises the vendor's count resource
  (:func:`~hami_protocol.node.handshake.check_handshake`, HAMi's ``CheckHealth``), or — at once,
  without waiting for the timeout — a count resource the node advertised before and no longer
  does (the vendor's device plugin is gone and the kubelet would refuse the pod); ``capacity``
  — the node's ``status.capacity`` of the count resource is absent or 0 (AMD, Enflame GCU, MetaX
  whole GPUs); ``always`` and ``reported`` vendors are never marked (``reported``: each device's
  own ``healthy`` field already says it);
* the vendors whose count resource it has ever advertised (for the rule above);
* the bad annotation values already reported, so each distinct bad value is reported once.

Every call costs O(vendors of the node).  Nothing here performs I/O: health changes and bad
annotations go to the callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hami_protocol import keys
from hami_protocol.durations import format_go_duration
from hami_protocol.node.handshake import check_handshake
from hami_protocol.vendor.table import Vendor
from hami_scheduler.cache.nodes import NodeFacts
from hami_scheduler.cache.vendor_facts import vendor_note_problems

__all__ = ["BadAnnotation", "HandshakeWrite", "HealthChange", "NodeHealth"]

BadAnnotation = Callable[[str, str, str, str], None]
"""``(node, annotation key, problem, raw value)`` — called once per distinct bad value."""
HealthChange = Callable[[str, str, bool], None]
"""``(node, vendor word, healthy)`` — a vendor was marked unavailable or came back."""


@dataclass(frozen=True, slots=True)
class HandshakeWrite:
    """A handshake annotation the leader should set to ``Requesting_<now>``."""

    node: str
    key: str
    vendor: str


class NodeHealth:
    """Unavailable vendors and reported annotation problems per node (module docstring)."""

    def __init__(
        self,
        vendors: Sequence[Vendor],
        *,
        handshake_timeout_s: float,
        on_bad_annotation: BadAnnotation | None = None,
        on_health_change: HealthChange | None = None,
    ) -> None:
        self._vendor = {vendor.common_word: vendor for vendor in vendors}
        self._expiry = timedelta(seconds=handshake_timeout_s)
        self._on_bad_annotation = on_bad_annotation
        self._on_health_change = on_health_change
        self._unhealthy: dict[str, frozenset[str]] = {}
        self._advertised: dict[str, frozenset[str]] = {}
        """Node → vendors whose count resource it has advertised as allocatable (> 0)."""
        self._reported: dict[str, dict[str, str]] = {}
        """Node → annotation key → the bad value last reported."""

    def forget(self, name: str) -> None:
        self._unhealthy.pop(name, None)
        self._advertised.pop(name, None)
        self._reported.pop(name, None)

    def unhealthy(self, name: str) -> frozenset[str]:
        return self._unhealthy.get(name, frozenset())

    def unavailable_count(self) -> int:
        """Node × vendor pairs marked unavailable."""
        return sum(len(marks) for marks in self._unhealthy.values())

    def troubled(self, facts: NodeFacts) -> bool:
        """Whether the node has anything :meth:`problem` or its NIC check could name."""
        return (
            facts.name in self._unhealthy
            or bool(facts.rdma_error)
            or any(r.error for r in facts.registrations)
        )

    def usable(self, facts: NodeFacts) -> dict[str, Sequence[Any]]:
        """Vendor word → devices, for the vendors whose devices may take pods."""
        marks = self._unhealthy.get(facts.name, frozenset())
        return {
            r.word: r.devices
            for r in facts.registrations
            if not r.error and r.devices and r.word not in marks
        }

    def problem(self, facts: NodeFacts, words: Iterable[str]) -> str | None:
        """Why the node cannot take a pod asking for vendors ``words``, beyond its devices: a
        malformed register annotation, or devices that stopped answering the handshake."""
        wanted = set(words)
        for registration in facts.registrations:
            if registration.word not in wanted:
                continue
            if registration.error:
                return registration.error
            if registration.word in self._unhealthy.get(facts.name, ()):
                vendor = self._vendor[registration.word]
                if vendor.health == "capacity":
                    return (
                        f"{registration.word} devices unavailable: the node's capacity of "
                        f"{vendor.count_resource} is 0"
                    )
                if self._withdrawn(facts, registration.word):
                    return (
                        f"{registration.word} devices unavailable: the node stopped advertising "
                        f"{vendor.count_resource} (its device plugin is not registered)"
                    )
                return (
                    f"{registration.word} devices unavailable: handshake {vendor.handshake_key} "
                    f"not answered within {format_go_duration(self._expiry.total_seconds())}"
                )
        return None

    def _withdrawn(self, facts: NodeFacts, word: str) -> bool:
        """Whether the node advertised ``word``'s count resource before and no longer does."""
        return word in self._advertised.get(facts.name, ()) and word not in facts.allocatable

    def report(self, facts: NodeFacts) -> None:
        """Report each bad annotation value of the node once (a fixed value is forgotten)."""
        reported = self._reported.setdefault(facts.name, {})
        problems = [(r.key, r.error, r.raw) for r in facts.registrations if r.error]
        if facts.pair_error:
            problems.append((keys.NVIDIA_SCORE, facts.pair_error, facts.pair_raw))
        if facts.rdma_error:
            problems.append((keys.RDMA_REGISTER, facts.rdma_error, facts.rdma_raw))
        if facts.vendor_notes:
            problems += vendor_note_problems(facts)
        current = {key for key, _, _ in problems}
        for key in [key for key in reported if key not in current]:
            del reported[key]
        for key, problem, raw in problems:
            if reported.get(key) == raw:
                continue
            reported[key] = raw
            if self._on_bad_annotation is not None:
                self._on_bad_annotation(facts.name, key, problem, raw)

    def judge(
        self, facts: NodeFacts, now: datetime, writes: list[HandshakeWrite] | None = None
    ) -> bool:
        """Mark the node's vendors unavailable or back; whether any mark changed.  The handshake
        values the leader should (re)write are appended to ``writes``."""
        name = facts.name
        before = self._unhealthy.get(name, frozenset())
        marks = set(before)
        advertised = self._advertised.get(name, frozenset())
        if not facts.allocatable <= advertised:
            self._advertised[name] = advertised | facts.allocatable
        for registration in facts.registrations:
            vendor = self._vendor[registration.word]
            key = vendor.handshake_key
            if vendor.health == "capacity" and not registration.error:
                if registration.word in facts.capacity:
                    marks.discard(registration.word)
                else:
                    marks.add(registration.word)
                continue
            if vendor.health != "handshake" or key is None:
                marks.discard(registration.word)
                continue
            if registration.error or not registration.devices:
                marks.discard(registration.word)
                continue
            if self._withdrawn(facts, registration.word):
                # The kubelet stopped advertising the devices it used to: their plugin is gone,
                # and the kubelet would refuse the pod.  Unavailable now, not a handshake
                # timeout later (HAMi's NVIDIA rule), until the count comes back.
                marks.add(registration.word)
                continue
            verdict = check_handshake(
                facts.handshakes.get(registration.word),
                now=now,
                expiry=self._expiry,
                has_allocatable=registration.word in facts.allocatable,
            )
            if verdict.healthy:
                marks.discard(registration.word)
            else:
                marks.add(registration.word)
            if verdict.needs_update and writes is not None:
                writes.append(HandshakeWrite(name, key, registration.word))
        after = frozenset(marks)
        if after == before:
            return False
        if after:
            self._unhealthy[name] = after
        else:
            self._unhealthy.pop(name, None)
        if self._on_health_change is not None:
            for word in sorted(after ^ before):
                self._on_health_change(name, word, word in before)
        return True
