"""Events that say who evicted whom, and for which devices, once kube-scheduler acted on the
preempt verb's choice.

The verb (:mod:`hami_scheduler.preempt`) writes nothing; kube-scheduler picks one of the nodes
it answered, patches each victim with the ``DisruptionTarget`` condition (reason
``PreemptionByScheduler``), deletes it, and nominates the preemptor to that node
(``status.nominatedNodeName``) — contract ``preemption-and-capacity.md`` §2.4.
:class:`PreemptionEvents` remembers, per preemptor UID and node, the victims the verb chose
there that hold devices (what each frees), and when the watches show both the preemptor
nominated to that node and a victim being deleted with that condition (in either order: async
preemption nominates before its deletions finish) it records:

* on each victim, once: ``PreemptedForGPU`` — ``Evicted by <ns>/<preemptor> (priority X) on
  node N to free <uuid>[,<uuid>...]: <MiB> MiB, <cores>% cores``;
* on the preemptor, once every victim of that node was announced: ``PreemptingForGPU``, naming
  the victims and their devices.

Only the leader records (the verb is answered by the leader only, so only it remembers).  The
memory is bounded: at most ``max_preemptors`` preemptors (least recently chosen dropped) and
none older than ``ttl_s``; victims seen disrupted and victims announced are kept up to
``max_victims`` each, so a victim is announced once.

Cost: a nominated-pod event is a dictionary lookup; a disrupted victim's event scans the
remembered choices (bounded by ``max_preemptors``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from hami_kube.objects import PodView
from hami_kube.resources import JsonObject
from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.events import SchedulerEvents

__all__ = [
    "DISRUPTION_TARGET",
    "PREEMPTION_BY_SCHEDULER",
    "PreemptionEvents",
    "VictimNote",
    "preempted_by_scheduler",
]

DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"


def preempted_by_scheduler(pod: PodView, *, deleted: bool = False) -> bool:
    """Being deleted (or gone: a victim without a grace period goes at once, and its DELETED
    event is the first sign of its deletion) with kube-scheduler's
    ``DisruptionTarget``/``PreemptionByScheduler``."""
    if not (pod.deleting or deleted):
        return False
    return any(
        c.get("type") == DISRUPTION_TARGET
        and c.get("status") == "True"
        and c.get("reason") == PREEMPTION_BY_SCHEDULER
        for c in pod.conditions
    )


@dataclass(frozen=True, slots=True)
class VictimNote:
    """A chosen victim and what it frees."""

    uid: str
    namespace: str
    name: str
    devices: tuple[str, ...]
    mem: int
    """MiB, over its devices."""
    cores: int
    """Percent points, over its devices."""

    @classmethod
    def of(
        cls, uid: str, namespace: str, name: str, usage: Iterable[DeviceUsageSummary]
    ) -> VictimNote:
        summaries = list(usage)
        devices = tuple(dict.fromkeys(s.uuid for s in summaries))
        mem = sum(s.usedmem for s in summaries)
        return cls(uid, namespace, name, devices, mem, sum(s.usedcores for s in summaries))

    @property
    def frees(self) -> str:
        return f"{','.join(self.devices)}: {self.mem} MiB, {self.cores}% cores"


@dataclass(slots=True)
class _Choice:
    preemptor: str
    """``namespace/name``."""
    namespace: str
    name: str
    uid: str
    priority: int
    node: str
    victims: Sequence[VictimNote]
    at: float
    nominated: bool = False
    announced: set[str] = field(default_factory=set)


class PreemptionEvents:
    """Remembers the verb's choices and records the Events (see the module docstring)."""

    def __init__(
        self,
        events: SchedulerEvents | None = None,
        *,
        leading: Callable[[], bool] = lambda: True,
        max_preemptors: int = 1024,
        max_victims: int = 4096,
        ttl_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._events = events
        self._leading = leading
        self._max_preemptors = max_preemptors
        self._max_victims = max_victims
        self._ttl_s = ttl_s
        self._clock = clock
        self._choices: OrderedDict[str, dict[str, _Choice]] = OrderedDict()
        self._disrupted: OrderedDict[str, None] = OrderedDict()
        self._announced: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(nodes) for nodes in self._choices.values())

    def remember(self, preemptor: PodView, node: str, victims: Sequence[VictimNote]) -> None:
        """The verb chose ``victims`` on ``node`` for ``preemptor``."""
        if self._events is None or not victims or not preemptor.uid:
            return
        now = self._clock()
        self._expire(now)
        nodes = self._choices.setdefault(preemptor.uid, {})
        nodes[node] = _Choice(
            preemptor.key,
            preemptor.namespace,
            preemptor.name,
            preemptor.uid,
            preemptor.priority,
            node,
            tuple(victims),
            now,
        )
        self._choices.move_to_end(preemptor.uid)
        while len(self._choices) > self._max_preemptors:
            self._choices.popitem(last=False)

    # -- the watches ---------------------------------------------------------------------------
    def nominee_event(self, obj: JsonObject, deleted: bool) -> None:
        """A pod of the nominated-pods watch changed: is it nominated to a remembered node?"""
        pod = PodView(obj)
        node = pod.nominated_node_name
        nodes = self._choices.get(pod.uid)
        if deleted or not node or nodes is None:
            return
        choice = nodes.get(node)
        if choice is not None:
            choice.nominated = True
            self._announce(choice)

    def pod_event(self, obj: JsonObject, *, deleted: bool) -> None:
        """A bound pod changed (or is gone): a victim being deleted by kube-scheduler?"""
        pod = PodView(obj)
        if not preempted_by_scheduler(pod, deleted=deleted) or pod.uid in self._disrupted:
            return
        _bounded_add(self._disrupted, pod.uid, self._max_victims)
        for nodes in list(self._choices.values()):
            for choice in list(nodes.values()):
                if choice.nominated and any(v.uid == pod.uid for v in choice.victims):
                    self._announce(choice)

    def node_event(self, obj: JsonObject, *, deleted: bool) -> None:
        """Node events say nothing here (a :class:`~hami_scheduler.cache.watch.CacheListener`)."""

    # -- recording -----------------------------------------------------------------------------
    def _announce(self, choice: _Choice) -> None:
        events = self._events
        if events is None or not self._leading():
            return
        for victim in choice.victims:
            if victim.uid in choice.announced or victim.uid not in self._disrupted:
                continue
            choice.announced.add(victim.uid)
            if victim.uid in self._announced:
                continue
            _bounded_add(self._announced, victim.uid, self._max_victims)
            events.preempted_for_gpu(
                victim.namespace,
                victim.name,
                victim.uid,
                f"Evicted by {choice.preemptor} (priority {choice.priority}) on node "
                f"{choice.node} to free {victim.frees}",
            )
        if len(choice.announced) < len(choice.victims):
            return
        listed = "; ".join(f"{v.namespace}/{v.name} ({v.frees})" for v in choice.victims)
        events.preempting_for_gpu(
            choice.namespace,
            choice.name,
            choice.uid,
            f"Preempting on node {choice.node}: {listed}",
        )
        # Done: the preemptor's choices on other nodes were not taken.
        self._choices.pop(choice.uid, None)

    def _expire(self, now: float) -> None:
        while self._choices:
            uid, nodes = next(iter(self._choices.items()))
            if all(now - choice.at <= self._ttl_s for choice in nodes.values()):
                return
            del self._choices[uid]


def _bounded_add(seen: OrderedDict[str, None], uid: str, limit: int) -> None:
    seen[uid] = None
    seen.move_to_end(uid)
    while len(seen) > limit:
        seen.popitem(last=False)
