"""Preempt: from kube-scheduler's candidate nodes and victims to the pods whose eviction makes
the pod fit on concrete devices.

kube-scheduler calls ``POST /preempt`` (``preemptVerb``) during its default preemption, after
its in-tree dry run produced candidates, with ``ExtenderPreemptionArgs`` in either form —
victims as UIDs (``nodeCacheCapable: true``, the chart's) or as full pods — and reads back
node → victim UIDs (contract ``preemption-and-capacity.md`` §2).  Per offered node,
:meth:`PreemptService.preempt`:

1. drops the node when the cache does not know it (logged with the name), when the cache
   refuses it for this pod before any device is looked at (a malformed register annotation,
   devices silent on the handshake: :func:`~hami_scheduler.selection.select.node_refusal`), or
   when an offered victim holds devices on another node, is bound to another node (full
   pods), or is the preemptor itself;
2. keeps every victim kube-scheduler offered: its in-tree filters (CPU, memory, pods, ...)
   need them gone, and a reply without them would leave the pod unfit there — kube-scheduler
   would evict our victims and preempt again.  An offered pod the cache knows (it holds
   devices) frees its devices too; one of the preemptor's priority or above refuses the node.
   **Capacity totals mode** (a container of the preemptor requests ``hami.io/nvidia-memory``
   or ``hami.io/nvidia-cores``): in-tree chose the offered pods that hold devices by the GPU
   totals it now counts, so they become ordinary candidates the devices may reprieve; offered
   pods holding no device stay required;
3. marks each lower-priority pod whose eviction would break a PodDisruptionBudget, as
   kube-scheduler's ``filterPodsWithPDBViolation`` does, most important first
   (:meth:`~hami_scheduler.cache.budgets.DisruptionBudgets.violating`, over the pods whose
   labels are known: held here, or offered in full);
4. asks :func:`~hami_scheduler.core.preempt.select_victims` for the devices' part: the
   smallest set (minimal under single removal) of the node's other lower-priority pods whose
   release makes the pod fit — PDB-violating pods reprieved first — decided by the filter's own
   per-node rule on the node *as the filter sees it for this pod*: what is held for nominated
   preemptors of equal or higher priority counts
   (:meth:`~hami_scheduler.cache.view.SchedulerCache.held_node`), so of two preemptors racing
   for one node the lower cannot take what the higher one holds.  The node is dropped when no
   set works; the victims kube-scheduler did not offer are added;
5. answers ``NumPDBViolations`` counted over the final victims.  Victims whose labels are
   unknown (bare UIDs the cache does not hold: no device) count what kube-scheduler counted
   among its own victims less the violations known among the others it offered, at most one
   each.

The victims chosen per node are remembered (:class:`~hami_scheduler.preempt_events.
PreemptionEvents`) for the Events recorded once kube-scheduler acts on one.

The pod's requests are read from the Pod in the request, as ``/filter`` reads them, so a pod
the extender never filtered is judged all the same; what it holds itself (a stale assumption)
is left out of its nodes.  Priorities are ``spec.priority`` (0 when unset); pods known only by
a decision assumed here have none yet and are never victims (their usage stays).

Limits, plainly:

* Offered victims the cache does not know (they hold no devices, or came as bare UIDs) are
  listed first, in kube-scheduler's order: their priority is unknown here, and kube-scheduler
  reads the first victim as the node's highest-priority one.  Their PDB violations are
  estimated from kube-scheduler's count (step 5).
* Namespace quota is checked as the filter checks it, but not credited with what victims of
  the pod's own namespace would free; MetaX sGPU app classes are read as the cache holds them.
* A nominated preemptor's NICs and exclusive PCIe claims are not held, only its devices
  (:mod:`hami_scheduler.core.holds`).

The verb **writes nothing** — no eviction, no Event, no change to the cache: kube-scheduler
deletes the victims it settles on (the Events follow from the watches).  A body that is not
``ExtenderPreemptionArgs`` gets 400 (:mod:`hami_scheduler.http`); a call that cannot be
answered (no pod, unreadable requests, not the leader, caches not synced) gets an empty map
with ``Error``: kube-scheduler then preempts nothing.  A pod asking for no managed device gets
the offered victims back unchanged.

Cost: per node O(pods held there) plus the core's trials (a yes/no per candidate pod and per
victim per minimality pass, mostly the filter's quick verdict), the PDB marking (O(pods ×
budgets of their namespace)) and the node's hold (one decision per nominated pod there, kept
while nothing changes).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

import structlog

from hami_kube.objects import PodView
from hami_protocol.errors import ProtocolError
from hami_scheduler.cache.budgets import BudgetedPod
from hami_scheduler.cache.holdings import Resident
from hami_scheduler.cache.pods import start_time
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.joint.hints import JointRequest, koord_requests
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.preempt import NodeState, Occupant, Victims, importance, select_victims
from hami_scheduler.filter import MISSING_POD, Synced
from hami_scheduler.leader import AlwaysLeader, LeaderView, not_leader_message
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.preempt_events import PreemptionEvents, VictimNote
from hami_scheduler.selection.joint_plan import joint_request, managed
from hami_scheduler.selection.plan import Planner
from hami_scheduler.selection.select import node_refusal
from hami_scheduler.wire import OfferedPod, OfferedVictims, PreemptionArgs

__all__ = ["UNKNOWN_NODE", "PreemptReply", "PreemptService"]

log = structlog.get_logger("hami_scheduler")

UNKNOWN_NODE: Final = "node unknown to the scheduler's cache"


@dataclass(frozen=True, slots=True)
class PreemptReply:
    victims: Mapping[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)
    """Node → victim UIDs (most important first) and ``NumPDBViolations``."""
    dropped: Mapping[str, str] = field(default_factory=dict)
    """Offered nodes left out of the reply, and why."""
    error: str = ""


class _Refused(Exception):  # noqa: N818 - control flow inside this module
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


# -- Capacity totals: resource names ---------------------------------------------------------
# The webhook writes a pod's device totals under these names in "capacity totals" mode
# (contract §3.1; docs on the totals branch).  Defined here until libs/protocol carries them
# as hami_protocol-level constants (another branch adds them): unify at merge.
NVIDIA_MEMORY_TOTAL: Final = "hami.io/nvidia-memory"
NVIDIA_CORES_TOTAL: Final = "hami.io/nvidia-cores"
_TOTALS: Final = frozenset({NVIDIA_MEMORY_TOTAL, NVIDIA_CORES_TOTAL})


def asks_totals(pod: PodView) -> bool:
    """Whether a container of the pod requests a capacity total (the mode is on for it)."""
    return any(
        not _TOTALS.isdisjoint(ctr.requests) or not _TOTALS.isdisjoint(ctr.limits)
        for ctr in pod.all_containers()
    )


@dataclass(frozen=True, slots=True)
class _Preemptor:
    """What every node's choice reads about the pod."""

    uid: str
    priority: int
    plan: PodPlan
    request: JointRequest
    totals: bool = False
    """Capacity totals mode: kube-scheduler's victims that hold devices were chosen by in-tree
    GPU totals, so they are candidates the devices may reprieve, not required."""


def _budgeted(
    offered: Iterable[OfferedPod], residents: Mapping[str, Resident]
) -> dict[str, BudgetedPod]:
    """The pods whose labels are known — held here, or offered in full — as budgets read them."""
    found = {uid: BudgetedPod(uid, r.namespace, r.name, r.labels) for uid, r in residents.items()}
    for victim in offered:
        if victim.pod is not None:
            view = PodView(victim.pod)
            found[victim.uid] = BudgetedPod(victim.uid, view.namespace, view.name, view.labels)
    return found


def _marked(pods: list[Occupant], violating: frozenset[str]) -> list[Occupant]:
    marked: list[Occupant] = []
    for pod in pods:
        mark = pod.uid in violating
        # A copy only where the mark changes: most pods break no budget, and a copy of every
        # pod was ~7% of the verb.
        marked.append(pod if pod.violates_pdb == mark else replace(pod, violates_pdb=mark))
    return marked


def _notes(chosen: Victims, residents: Mapping[str, Resident]) -> list[VictimNote]:
    """What each chosen victim holding devices frees, for the Events."""
    notes: list[VictimNote] = []
    for victim in chosen.pods:
        resident = residents.get(victim.uid)
        if resident is not None and victim.usage:
            notes.append(
                VictimNote.of(resident.uid, resident.namespace, resident.name, victim.usage)
            )
    return notes


class PreemptService:
    """Answers ``/preempt`` (see the module docstring)."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        planner: Planner,
        metrics: SchedulerMetrics,
        leadership: LeaderView | None = None,
        watches: Synced | None = None,
        chosen: PreemptionEvents | None = None,
    ) -> None:
        """``chosen``: where the victims chosen per node are remembered for the Events that
        follow kube-scheduler's preemption (none: nothing is remembered)."""
        self._cache = cache
        self._chosen = chosen if chosen is not None else PreemptionEvents()
        self._planner = planner
        self._metrics = metrics
        self._leadership = leadership or AlwaysLeader()
        self._watches = watches

    def preempt(self, args: PreemptionArgs) -> PreemptReply:
        started = time.perf_counter()
        pod = PodView(args.pod or {})
        try:
            reply, outcome = self._preempt(args, pod)
        except _Refused as refused:
            reply, outcome = PreemptReply(error=refused.message), refused.reason
            log.info("preempt_error", pod=pod.key, error=refused.message)
        elapsed = time.perf_counter() - started
        status = "error" if reply.error else outcome
        self._metrics.observe("preempt", status, elapsed, "" if status == outcome else outcome)
        return reply

    def _preempt(self, args: PreemptionArgs, pod: PodView) -> tuple[PreemptReply, str]:
        preemptor = self._preemptor(args, pod)
        if preemptor is None:
            passed = {
                node: (tuple(p.uid for p in offered.pods), offered.num_pdb_violations)
                for node, offered in args.victims.items()
            }
            return PreemptReply(passed), "ignored"
        kept: dict[str, tuple[tuple[str, ...], int]] = {}
        dropped: dict[str, str] = {}
        for name, offered in args.victims.items():
            found = self._node(name, offered, preemptor)
            if isinstance(found, str):
                dropped[name] = found
            else:
                chosen, notes = found
                kept[name] = (chosen.uids, chosen.pdb_violations)
                self._chosen.remember(pod, name, notes)
        log.info(
            "preempt_victims",
            pod=pod.key,
            nodes={name: len(uids) for name, (uids, _) in kept.items()},
            dropped=dropped,
        )
        return PreemptReply(kept, dropped), "preempted" if kept else "unschedulable"

    def _preemptor(self, args: PreemptionArgs, pod: PodView) -> _Preemptor | None:
        """The pod as every node's choice reads it; ``None`` when it asks for no managed
        device (the extender then has no say)."""
        if args.pod is None:
            raise _Refused(MISSING_POD, "missing_pod")
        try:
            requests, koord = self._planner.requests(args.pod), koord_requests(args.pod)
        except ProtocolError as exc:
            raise _Refused(f"cannot read the pod's device requests: {exc}", "bad_pod") from None
        if not managed(requests, koord):
            return None
        cache = self._cache
        try:
            plan = self._planner.plan(
                pod, requests, quota=cache.quota_view, sgpu_state=cache.sgpu_state
            )
            request = joint_request(pod, plan, koord)
        except ProtocolError as exc:
            raise _Refused(str(exc), "bad_annotation") from None
        if not self._leadership.is_leader:
            raise _Refused(not_leader_message(self._leadership.leader), "not_leader")
        if self._watches is not None and not self._watches.synced:
            raise _Refused("scheduler caches have not synced yet", "not_synced")
        return _Preemptor(pod.uid, pod.priority, plan, request, asks_totals(pod))

    def _node(
        self, name: str, offered: OfferedVictims, pod: _Preemptor
    ) -> tuple[Victims, list[VictimNote]] | str:
        """The victims on node ``name`` with what they free, or why the node is dropped."""
        cache = self._cache
        if cache.facts(name) is None:
            log.warning("preempt_unknown_node", node=name)
            return UNKNOWN_NODE
        refusal = node_refusal(cache, name, pod.plan, pod.request)
        if refusal is not None:
            return refusal
        residents = {resident.uid: resident for resident in cache.residents(name)}
        required: list[Occupant] = []
        reprievable: list[Occupant] = []
        unique: dict[str, OfferedPod] = {}
        for victim in offered.pods:
            unique.setdefault(victim.uid, victim)
        for victim in unique.values():
            occupant = self._offered(name, victim, residents.get(victim.uid), pod)
            if isinstance(occupant, str):
                return occupant
            if pod.totals and victim.uid in residents:
                # In-tree chose it by the GPU totals, which the devices judge better here.
                reprievable.append(occupant)
            else:
                required.append(occupant)
        named = unique.keys()
        occupants = reprievable + [
            self._occupant(name, resident, resident.priority, resident.started)
            for uid, resident in residents.items()
            if resident.priority is not None and uid != pod.uid and uid not in named
        ]
        budgeted = _budgeted(unique.values(), residents)
        violating = cache.budgets.violating(
            [
                budgeted[one.uid]
                for one in sorted([*required, *occupants], key=importance)
                if one.priority < pod.priority and one.uid in budgeted
            ]
        )
        required = _marked(required, violating)
        occupants = _marked(occupants, violating)
        gpus = cache.nodes.get(name)
        if gpus is not None:
            gpus = cache.held_node(gpus, pod.uid, pod.priority)
        node = NodeState(name, gpus, cache.nics.get(name))
        own = residents.get(pod.uid)
        if own is not None:
            # A decision once assumed for the preemptor itself is stale: it is being placed.
            node = node.without([self._occupant(name, own, 0, None)])
        chosen = select_victims(
            node,
            pod.plan,
            pod.request,
            priority=pod.priority,
            occupants=occupants,
            required=required,
        )
        if isinstance(chosen, str):
            return chosen
        # Victims this cache knows no labels of (bare UIDs holding no device): what
        # kube-scheduler counted among its own victims, less what is known of the others.
        unknown = [uid for uid in unique if uid not in budgeted]
        known = sum(1 for uid in unique if uid in violating)
        guessed = min(max(offered.num_pdb_violations - known, 0), len(unknown))
        chosen = replace(chosen, pdb_violations=chosen.pdb_violations + guessed)
        return chosen, _notes(chosen, residents)

    def _offered(
        self, name: str, victim: OfferedPod, resident: Resident | None, pod: _Preemptor
    ) -> Occupant | str:
        """An offered victim as a required occupant, or why the node must be dropped."""
        if victim.uid == pod.uid:
            return f"the preemptor {victim.uid} is offered as its own victim"
        holding = self._cache.holding(victim.uid)
        if holding is not None and holding.node != name:
            return f"pod {victim.uid} holds devices on node {holding.node}, not on {name}"
        priority: int | None
        if victim.pod is not None:
            view = PodView(victim.pod)
            if view.node_name and view.node_name != name:
                return f"pod {victim.uid} runs on node {view.node_name}, not on {name}"
            priority, started = view.priority, start_time(view)
        elif resident is not None:
            priority, started = resident.priority, resident.started
        else:
            priority, started = None, None
        if priority is None:
            # Only kube-scheduler knows this pod, and it offers pods strictly below the
            # preemptor; the highest such priority lists it first (module docstring).
            priority = pod.priority - 1
        if resident is None:
            return Occupant(victim.uid, priority, started)
        return self._occupant(name, resident, priority, started)

    def _occupant(
        self, name: str, resident: Resident, priority: int, started: float | None
    ) -> Occupant:
        holding = resident.holding
        return Occupant(
            resident.uid,
            priority,
            started,
            holding.usage,
            holding.mig,
            self._cache.nic.pod_usage(resident.uid, name),
        )
