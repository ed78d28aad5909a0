"""Which pods to evict so that a pod fits on a node: the preempt verb's decision, one node at a
time.

kube-scheduler picks preemption victims with its in-tree filters only, which ignore the device
resources the extender owns (``ignoredByScheduler``); the preempt verb
(:mod:`hami_scheduler.preempt`) asks this module, per candidate node, for the pods whose release
makes the preemptor fit *on concrete devices*.  Whether it fits is decided by
:func:`~hami_scheduler.core.joint.route.decide_on` — the one per-node rule the filter, the bind
and the autoscaler's simulation use, asked as the filter asks it
(:func:`~hami_scheduler.core.joint.route.fits_on`), so every fit rule (memory, cores, share
count, type, UUID, NUMA, MIG, exclusive, PCIe topology, every vendor) holds here too — on the
node with the chosen pods' holdings taken away
(:func:`~hami_scheduler.core.usage.apply.remove_usage` for devices and MIG slices,
:func:`~hami_scheduler.core.joint.nics.remove_nic_usage` for NICs and exclusive claims).

:func:`select_victims` follows kube-scheduler's ``SelectVictimsOnNode`` (contract
``preemption-and-capacity.md`` §1.3), with devices as the filter:

1. the ``required`` pods — those kube-scheduler's in-tree filters need gone (CPU, memory, ...) —
   are taken away and stay victims whatever happens: dropping one would leave the preemptor
   unfit for kube-scheduler, and the node would be preempted again and again;
2. the candidates are the other occupants of priority strictly below the preemptor's; all of them
   are taken away, and if the preemptor still does not fit the node is refused, with the
   decision's reason;
3. reprieve, in kube-scheduler's order — pods whose eviction would violate a
   PodDisruptionBudget first, then the rest, each group most important first (higher priority,
   then the earlier start): each pod is given back, and stays if the preemptor still fits;
4. then every remaining victim is tried once more, given back with all other victims still
   gone, and reprieved when it is not needed after all — repeated until a pass reprieves
   nothing.  Step 3 already leaves nothing to find when the fit is monotone (less usage never
   hurts); vendor fits with greedy placements need not be, and this makes the promise hold
   for every fit.

**What "smallest" means.**  The set is minimal under single removal: giving back any one chosen
victim makes the preemptor unfit.  It is not the globally smallest set (a subset search,
exponential in the pods on the node).  Among such sets the reprieve order keeps PDB-protected
pods first and more important pods next, as kube-scheduler does, so the set holds few PDB
violations, then low priorities, then few pods.  A pod that holds nothing the preemptor could
use (another vendor's devices, a GPU it excludes, nothing at all) leaves the decision unchanged
when given back, so it is always reprieved: a victim always frees something the preemptor needs.

Victims come back most important first (kube-scheduler reads the first as the node's
highest-priority victim, contract §2.3).  :func:`preference` is kube-scheduler's node ranking
(``pickOneNodeForPreemption``) over such results, for tests and tools: kube-scheduler ranks the
nodes itself.

Cost: one yes/no with every candidate gone, one per candidate for the reprieve, and one per
victim per minimality pass (one pass when the fit is monotone), less the sets already judged
(the minimality pass mostly repeats the reprieve's last trials); the full decision only for the
reason of a refused node.  Each yes/no is the filter's own answer for one node
(:func:`~hami_scheduler.core.joint.route.fits_on`: the quick verdict when it is certain, else
the full decision) on a trial node moved only where a device's total changed (:class:`_Trials`)
— the same answers as rebuilding the node and deciding in full every time (the test module
keeps that form as its oracle), at about half the cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.core.decide import NodeDecision
from hami_scheduler.core.joint.decide import JointDecision
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nics import NicPodUsage, NicUsage, remove_nic_usage
from hami_scheduler.core.joint.route import Fleet, decide_on, fits_on
from hami_scheduler.core.mig import MigHold
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.select import quick_plans
from hami_scheduler.core.usage.apply import position_amounts, remove_usage
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.usage.node import NodeUsage

__all__ = [
    "NodeState",
    "Occupant",
    "Victims",
    "best_node",
    "importance",
    "preference",
    "select_victims",
]

_PRIORITY_OFFSET = 2**31
"""kube-scheduler adds ``MaxInt32 + 1`` to each victim's priority before summing, so negative
priorities still add up to more for more pods."""


@dataclass(frozen=True, slots=True)
class Occupant:
    """A pod on the node, as the victim choice reads it."""

    uid: str
    priority: int
    """``spec.priority`` (0 when unset)."""
    started: float | None = None
    """``status.startTime`` in Unix seconds; ``None`` while unset — kube-scheduler then takes
    *now*, so such a pod is the least important among its priority."""
    usage: tuple[DeviceUsageSummary, ...] = ()
    """What it holds on the node's devices (as the cache applies it)."""
    mig: tuple[MigHold, ...] = ()
    nics: NicPodUsage | None = None
    """What it holds on the node's NICs, and its exclusive claims."""
    violates_pdb: bool = False
    """Whether evicting it would break a PodDisruptionBudget."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the cache holds it: its devices with every pod's usage, and its NICs."""

    name: str
    gpus: NodeUsage | None
    """``None``: the node has no usable device."""
    nics: NicUsage | None = None
    """``None``: the node has no NIC layout (no NICs; each GPU a PCIe scope of its own)."""

    def without(self, pods: Iterable[Occupant]) -> NodeState:
        """The node with what ``pods`` hold taken away."""
        pods = list(pods)
        usage = [summary for pod in pods for summary in pod.usage]
        gpus = None if self.gpus is None else remove_usage(self.gpus, usage, _mig_of(pods))
        return NodeState(self.name, gpus, _nics_without(self.nics, pods))

    def fleet(self) -> Fleet:
        """This node alone, as the selection rule reads a fleet."""
        name = self.name
        claimed = {name} if self.nics is not None and self.nics.claims_gpus else set()
        return Fleet(
            {} if self.gpus is None else {name: self.gpus},
            {} if self.nics is None else {name: self.nics},
            claimed,
            {name},
        )


def _mig_of(pods: Iterable[Occupant]) -> list[MigHold]:
    return [hold for pod in pods for hold in pod.mig]


def _nics_without(nics: NicUsage | None, pods: Iterable[Occupant]) -> NicUsage | None:
    if nics is None:
        return None
    held = [pod.nics for pod in pods if pod.nics is not None and not pod.nics.empty]
    return remove_nic_usage(nics, held) if held else nics


@dataclass(frozen=True, slots=True)
class Victims:
    """The pods to evict on one node so that the preemptor fits there."""

    node: str
    pods: tuple[Occupant, ...]
    """Most important first (:func:`importance`)."""
    pdb_violations: int = 0
    """How many of ``pods`` violate a PodDisruptionBudget."""

    @property
    def uids(self) -> tuple[str, ...]:
        return tuple(pod.uid for pod in self.pods)


def importance(pod: Occupant) -> tuple[int, float]:
    """Sort key, most important first: higher priority, then the earlier start (kube-scheduler's
    ``MoreImportantPod``; a pod not started yet counts as starting now, i.e. last).  Sorts are
    stable: ties keep the order the pods were given in (``required`` first)."""
    started = math.inf if pod.started is None else pod.started
    return (-pod.priority, started)


def _reprieve_order(pod: Occupant) -> tuple[bool, int, float]:
    # PDB-violating pods are given back first, so they are the last to be evicted.
    return (not pod.violates_pdb, *importance(pod))


Verdict = NodeDecision | JointDecision | str
_Fits = Callable[[Sequence[Occupant]], bool]
"""Whether the preemptor fits on the node with some pods gone."""


def _reason(verdict: Verdict) -> str:
    return verdict if isinstance(verdict, str) else verdict.reason


def select_victims(
    node: NodeState,
    plan: PodPlan,
    request: JointRequest,
    *,
    priority: int,
    occupants: Sequence[Occupant],
    required: Sequence[Occupant] = (),
) -> Victims | str:
    """The victims on ``node`` for a preemptor of ``priority`` with ``plan`` and ``request`` (see
    the module docstring), or why no set of lower-priority pods makes it fit.

    ``occupants``: the pods holding something on the node (others may hold capacity too — pods
    whose priority is unknown, say — and stay: their usage is in ``node`` and never taken
    away).  ``required``: pods that must go whatever the devices say; they count as victims.
    """
    return _select_victims(
        node, priority, occupants, required, partial(_Trials, node, plan, request, required)
    )


class _Judge(Protocol):
    """How :func:`_select_victims` asks whether the preemptor fits with some pods gone."""

    def fits(self, gone: Sequence[Occupant]) -> bool: ...

    def verdict(self, gone: Sequence[Occupant]) -> Verdict:
        """The whole decision (read for its reason)."""
        ...


def _select_victims(
    node: NodeState,
    priority: int,
    occupants: Sequence[Occupant],
    required: Sequence[Occupant],
    trials_for: Callable[[Sequence[Occupant]], _Judge],
) -> Victims | str:
    """:func:`select_victims` with its trials from ``trials_for(candidates)`` (the tests pass
    the straightforward form as an oracle for :class:`_Trials`)."""
    for pod in required:
        if pod.priority >= priority:
            return (
                f"pod {pod.uid} has priority {pod.priority}, not below the preemptor's {priority}"
            )
    named = {pod.uid for pod in required}
    candidates = [pod for pod in occupants if pod.priority < priority and pod.uid not in named]
    trials = trials_for(candidates)
    if not trials.fits(candidates):
        return _reason(trials.verdict(candidates))
    victims = list(candidates)
    for pod in sorted(candidates, key=_reprieve_order):
        rest = [other for other in victims if other.uid != pod.uid]
        if trials.fits(rest):
            victims = rest
    victims = _minimal(victims, trials.fits)
    chosen = sorted([*required, *victims], key=importance)
    return Victims(node.name, tuple(chosen), sum(pod.violates_pdb for pod in chosen))


def _minimal(victims: list[Occupant], fits: _Fits) -> list[Occupant]:
    """``victims`` with every pod the preemptor does not need gone reprieved (step 4)."""
    changed = True
    while changed and victims:
        changed = False
        for pod in sorted(victims, key=_reprieve_order):
            rest = [other for other in victims if other.uid != pod.uid]
            if fits(rest):
                victims, changed = rest, True
    return victims


class _Trials:
    """Whether the preemptor fits on ``node`` with ``required`` and a set of other pods gone:
    what ``decide_on(plan, request, node.without([*required, *gone]).fleet(), node.name)``
    answers, for less (the preempt verb asks ~17 times per node; rebuilding the node from every
    gone pod's usage summaries was half of each, the full decision the other half).

    * The yes/no is :func:`~hami_scheduler.core.joint.route.fits_on`: the filter's own answer
      for one node, its quick verdict where that is certain (property-tested to equal the full
      decision's), else the full decision; :meth:`verdict` gives the full decision, for the
      reason of a refused node.

    * Each pod's holdings are read once, as device position → amounts
      (:func:`~hami_scheduler.core.usage.apply.position_amounts`).  The amounts gone are kept
      for the last set decided and moved by the pods that differ (a trial gives back one pod;
      a reprieve keeps one more); each device is then moved once by its total — what
      :func:`~hami_scheduler.core.usage.apply.remove_usage` does with all the summaries, so
      the node is equal, clamping at zero included (sums of integers do not depend on their
      order).  A moved device is built once per (position, amounts).
    * A set of pods decided once is not decided again (the minimality pass repeats the last
      trials of the reprieve): keyed by the pods' identities — the candidates, and how often
      each appears, are fixed for one call — and the decision is a pure function of the node.

    MIG slices and NICs are taken away as :meth:`NodeState.without` does (rare; not shared).
    """

    __slots__ = (
        "_amounts",
        "_devices",
        "_last",
        "_mig",
        "_node",
        "_now",
        "_plan",
        "_quick",
        "_request",
        "_required",
        "_seen",
        "_stale",
        "_totals",
    )

    def __init__(
        self,
        node: NodeState,
        plan: PodPlan,
        request: JointRequest,
        required: Sequence[Occupant],
        candidates: Sequence[Occupant],
    ) -> None:
        self._node = node
        self._plan = plan
        self._request = request
        self._required = tuple(required)
        self._mig = any(pod.mig for pod in (*required, *candidates))
        self._quick = quick_plans(plan)
        self._seen: dict[frozenset[int], bool] = {}
        self._amounts: dict[int, dict[int, list[int]]] = {}
        """``id(pod)`` → its amounts per device position (a pod listed twice: twice)."""
        self._devices: dict[tuple[int, int, int, int], DeviceUsage] = {}
        self._last: frozenset[int] = frozenset()
        """The candidates (by ``id``) whose amounts :attr:`_totals` holds besides ``required``'s."""
        self._totals: dict[int, list[int]] = {}
        self._stale: set[int] = set()
        """Positions whose total moved since :attr:`_now` was built."""
        self._now: list[DeviceUsage] = []
        if node.gpus is not None:
            self._now = list(node.gpus.devices)
            for pod in self._required:
                self._move(self._totals, position_amounts(node.gpus, pod.usage), 1)
            for pod in candidates:
                amounts = self._amounts.setdefault(id(pod), {})
                self._move(amounts, position_amounts(node.gpus, pod.usage), 1)
            self._stale = set(self._totals)

    def fits(self, gone: Sequence[Occupant]) -> bool:
        """Whether the preemptor fits with ``gone`` taken away too: a sub-list of the
        candidates that keeps every copy of the pods it keeps (as taking pods away by UID
        does)."""
        key = frozenset(map(id, gone))
        found = self._seen.get(key)
        if found is None:
            node = self._node
            state = self._state(key, [*self._required, *gone])
            found = fits_on(self._plan, self._request, state.fleet(), node.name, self._quick)
            self._seen[key] = found
        return found

    def verdict(self, gone: Sequence[Occupant]) -> Verdict:
        """The whole decision with ``gone`` taken away too (for its reason)."""
        state = self._state(frozenset(map(id, gone)), [*self._required, *gone])
        return decide_on(self._plan, self._request, state.fleet(), self._node.name)

    def _state(self, key: frozenset[int], pods: Sequence[Occupant]) -> NodeState:
        node = self._node
        gpus = None if node.gpus is None else self._gpus(node.gpus, key, pods)
        return NodeState(node.name, gpus, _nics_without(node.nics, pods))

    def _gpus(self, base: NodeUsage, key: frozenset[int], pods: Sequence[Occupant]) -> NodeUsage:
        totals, amounts, last = self._totals, self._amounts, self._last
        for pod in key - last:
            self._move(totals, amounts[pod], 1)
        for pod in last - key:
            self._move(totals, amounts[pod], -1)
        self._last = key
        now, built, stale = self._now, self._devices, self._stale
        for position in stale:
            slots, mem, cores = totals[position]
            device_key = (position, slots, mem, cores)
            device = built.get(device_key)
            if device is None:
                device = base.devices[position].shifted(-slots, -mem, -cores)
                built[device_key] = device
            now[position] = device
        stale.clear()
        held = remove_usage(base, (), _mig_of(pods)).mig if self._mig else base.mig
        return NodeUsage(base.layout, tuple(now), held)

    def _move(self, totals: dict[int, list[int]], amounts: dict[int, list[int]], sign: int) -> None:
        stale = self._stale
        for position, (slots, mem, cores) in amounts.items():
            stale.add(position)
            total = totals.get(position)
            if total is None:
                totals[position] = [sign * slots, sign * mem, sign * cores]
            else:
                total[0] += sign * slots
                total[1] += sign * mem
                total[2] += sign * cores


def preference(victims: Victims) -> tuple[int, int, int, int]:
    """kube-scheduler's node ranking for preemption (``pickOneNodeForPreemption``, contract
    §2.4), smaller first: fewer PDB violations, a lower highest victim priority, a lower sum of
    victim priorities, fewer victims.  (Its last criteria — the latest start among the
    highest-priority victims, then the input order — are left to the caller's order.)"""
    pods = victims.pods
    highest = max((pod.priority for pod in pods), default=-(2**63))
    total = sum(pod.priority + _PRIORITY_OFFSET for pod in pods)
    return (victims.pdb_violations, highest, total, len(pods))


def best_node(results: Iterable[Victims]) -> Victims | None:
    """The node kube-scheduler would preempt on among ``results`` (:func:`preference`; ties:
    the first)."""
    best: Victims | None = None
    for result in results:
        if best is None or preference(result) < preference(best):
            best = result
    return best
