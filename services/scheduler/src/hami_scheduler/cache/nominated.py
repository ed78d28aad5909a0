"""Pending pods nominated to a node (``status.nominatedNodeName``), and the capacity held for
them there.

kube-scheduler nominates a preemptor to the node it preempted on; while its victims terminate
the freed devices are held for it (:mod:`hami_scheduler.core.holds`).  :class:`Nominations`
follows the pods the nominated-pods watch brings (every pod with a nomination): a pod is
*nominated* while it has a nomination, no node (``spec.nodeName``), no ``deletionTimestamp``
and a phase that is not terminal — so a preemptor deleted, bound (anywhere), or whose
nomination is cleared releases what it held at its next event.  It keeps each such pod whole
(they are few, and their requests are planned from the object) and by node.

:meth:`Nominations.node_for` is the node as a pod of a given priority sees it: every other
nominated pod of **equal or higher** priority is placed first.  Equal counts, as in
kube-scheduler's own in-tree check (``RunFilterPluginsWithNominatedPods`` adds nominated pods
of ≥ priority): a pod of the preemptor's own priority cannot preempt it back, so slices it took
would leave the preemptor's victims evicted for nothing, and the in-tree filters already keep
the node's CPU and memory for it against such a pod — the devices follow the same rule.  Held
slices are thereby never given to a lower-priority pod (the issue's invariant), nor to an
equal one.  A nominated pod that already holds devices here (the filter assumed a decision
for it, or it is bound) is counted by the cache as it is and holds nothing more.

Cost: O(1) for a node without nominated pods; for one with some, one decision per nominated
pod the first time a set of them is asked about, then a lookup while the node, its terminating
pods and the nominated pods are unchanged (one entry kept per node, per priority threshold).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from hami_kube.objects import PodView
from hami_scheduler.cache.holdings import Resident
from hami_scheduler.core.holds import Held, Nominee, hold_on
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nics import NicUsage
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.usage.node import NodeUsage

__all__ = ["HoldPlanner", "NominatedPod", "Nominations"]

log = structlog.get_logger("hami_scheduler")

HoldPlanner = Callable[[PodView], tuple[PodPlan, JointRequest] | None]
"""A nominated pod's plan and joint request (no quota: its own filter judged that); ``None``
when it asks for no managed device or its requests cannot be read."""


@dataclass(frozen=True, slots=True)
class NominatedPod:
    uid: str
    namespace: str
    name: str
    node: str
    priority: int
    pod: Mapping[str, Any]
    """The pod as watched (its requests are planned from it)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def nominated(obj: Mapping[str, Any]) -> NominatedPod | None:
    """The pod as a nomination, or ``None`` when it holds nothing (see the module doc)."""
    pod = PodView(obj)
    node = pod.nominated_node_name
    if not pod.uid or not node or pod.node_name or pod.deleting or pod.terminal:
        return None
    return NominatedPod(pod.uid, pod.namespace, pod.name, node, pod.priority, obj)


_Key = tuple[int, tuple[str, ...], tuple[str, ...]]
"""What a node's hold depends on besides the node's usage: the node usage's identity, the
terminating pods' UIDs and the placed nominated pods' UIDs."""


@dataclass(slots=True)
class _Kept:
    base: NodeUsage
    key: _Key
    node: NodeUsage
    held: tuple[Held, ...]


class Nominations:
    """Nominated pods by UID and by node, and what they hold (see the module docstring)."""

    def __init__(self) -> None:
        self._pods: dict[str, NominatedPod] = {}
        self._by_node: dict[str, dict[str, NominatedPod]] = {}
        self._plans: dict[str, tuple[Mapping[str, Any], tuple[PodPlan, JointRequest] | None]] = {}
        self._kept: dict[str, _Kept] = {}
        self.planner: HoldPlanner | None = None
        """Set by the service; without one nothing is held."""

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def get(self, uid: str) -> NominatedPod | None:
        return self._pods.get(uid)

    @property
    def nodes(self) -> Sequence[str]:
        """Nodes some pod is nominated to."""
        return list(self._by_node)

    def observe(self, obj: Mapping[str, Any]) -> None:
        """A pod of the nominated-pods watch was added or changed."""
        found = nominated(obj)
        uid = PodView(obj).uid
        if found is None:
            self.drop(uid)
            return
        old = self._pods.get(uid)
        if old is not None and old.node != found.node:
            self._unindex(old)
        self._pods[uid] = found
        self._by_node.setdefault(found.node, {})[uid] = found

    def drop(self, uid: str) -> None:
        """The pod left the watch (deleted, or its nomination cleared): it holds nothing."""
        old = self._pods.pop(uid, None)
        self._plans.pop(uid, None)
        if old is not None:
            self._unindex(old)

    def _unindex(self, pod: NominatedPod) -> None:
        on_node = self._by_node.get(pod.node)
        if on_node is None:
            return
        on_node.pop(pod.uid, None)
        if not on_node:
            del self._by_node[pod.node]
            self._kept.pop(pod.node, None)

    def _plan(self, pod: NominatedPod) -> tuple[PodPlan, JointRequest] | None:
        kept = self._plans.get(pod.uid)
        if kept is not None and kept[0] is pod.pod:
            return kept[1]
        planner = self.planner
        plan = None if planner is None else planner(PodView(pod.pod))
        self._plans[pod.uid] = (pod.pod, plan)
        return plan

    def placed(
        self, name: str, uid: str, priority: int, holds: Callable[[str], object]
    ) -> list[Nominee]:
        """The pods nominated to ``name`` that hold capacity against pod ``uid`` of
        ``priority``: the others of equal or higher priority not holding devices already
        (``holds(uid)`` is not ``None``), most important first (higher priority, then UID)."""
        on_node = self._by_node.get(name)
        if not on_node:
            return []
        chosen = sorted(
            (
                pod
                for pod in on_node.values()
                if pod.uid != uid and pod.priority >= priority and holds(pod.uid) is None
            ),
            key=lambda pod: (-pod.priority, pod.uid),
        )
        found: list[Nominee] = []
        for pod in chosen:
            plan = self._plan(pod)
            if plan is not None:
                found.append(Nominee(pod.uid, pod.key, *plan))
        return found

    def node_for(
        self,
        node: NodeUsage,
        nominees: Sequence[Nominee],
        residents: Sequence[Resident],
        nics: NicUsage | None,
    ) -> tuple[NodeUsage, tuple[Held, ...]]:
        """``node`` with ``nominees`` placed (:func:`~hami_scheduler.core.holds.hold_on`),
        kept while nothing it depends on changed."""
        name = node.layout.name
        if not nominees:
            return node, ()
        leaving = [resident for resident in residents if resident.terminating]
        key: _Key = (
            id(node),
            tuple(resident.uid for resident in leaving),
            tuple(nominee.uid for nominee in nominees),
        )
        kept = self._kept.get(name)
        if kept is not None and kept.base is node and kept.key == key:
            return kept.node, kept.held
        usage = [summary for resident in leaving for summary in resident.holding.usage]
        mig = [hold for resident in leaving for hold in resident.holding.mig]
        held_node, held = hold_on(node, nominees, terminating=usage, terminating_mig=mig, nics=nics)
        if len(held) < len(nominees):
            placed = {one.uid for one in held}
            log.info(
                "nominated_pod_not_held",
                node=name,
                pods=[n.key for n in nominees if n.uid not in placed],
            )
        self._kept[name] = _Kept(node, key, held_node, held)
        return held_node, held
