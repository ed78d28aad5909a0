"""Which pods preemption would remove from one node, and whether a pod may preempt at all.

From ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go``
(``SelectVictimsOnNode``, ``PodEligibleToPreemptOthers``, ``podTerminatingByPreemption``,
``filterPodsWithPDBViolation``) and ``pkg/scheduler/util`` (``MoreImportantPod``,
``GetPodStartTime``).  ``SelectVictimsOnNode``:

1. the potential victims are the node's pods of strictly lower priority; none → the node is
   UnschedulableAndUnresolvable ``No preemption victims found for incoming pod``;
2. all of them are removed and the in-tree filters run (with the nominated pods of at least the
   preemptor's priority counted); a failure is the node's status;
3. they are sorted most important first (higher priority; same priority: started earlier; a pod
   not started yet counts as starting now) and split by PodDisruptionBudget: a pod a budget of its
   namespace selects (a non-empty selector), unless named in ``status.disruptedPods``, takes one
   of the budget's ``disruptionsAllowed``; below zero it is *violating*;
4. each is re-added in turn, violating ones first, and stays (reprieved) when the filters still
   pass; the others are the victims, kept most important first, with the count of violating ones.

Pure: the in-tree filters come in as a function of the pods left on the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kube.timefmt import parse_time
from hami_kubesim.objects.disruptionbudgets import selector_of
from hami_kubesim.scheduler.statuses import Code, NodeStatus, unresolvable
from hami_protocol.errors import ProtocolError

__all__ = [
    "NOT_ELIGIBLE_NEVER",
    "NOT_ELIGIBLE_TERMINATING",
    "NO_VICTIMS",
    "Check",
    "PlacedPod",
    "Victims",
    "importance",
    "ineligible_reason",
    "select_victims_on_node",
    "split_by_budgets",
    "start_time",
]

NO_VICTIMS: Final = "No preemption victims found for incoming pod"
NOT_ELIGIBLE_NEVER: Final = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING: Final = "not eligible due to a terminating pod on the nominated node."
_DISRUPTION_TARGET: Final = "DisruptionTarget"
_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A pod bound (or assumed) to a node, and what it requests there."""

    pod: PodView
    requests: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Victims:
    """``extenderv1.Victims``: the pods to remove, most important first."""

    pods: tuple[PodView, ...]
    num_pdb_violations: int = 0


Check = Callable[[Sequence[PlacedPod]], NodeStatus | None]
"""The in-tree filters for the preemptor on the node when exactly these pods are on it."""


def start_time(pod: PodView, now: datetime) -> datetime:
    """``GetPodStartTime``: ``status.startTime``, else now (assumed and unstarted pods)."""
    raw = pod.status.get("startTime")
    try:
        return parse_time(raw) if isinstance(raw, str) else now
    except ValueError:
        return now


def importance(pod: PodView, now: datetime) -> tuple[int, datetime]:
    """A sort key putting the more important pod first (``MoreImportantPod``)."""
    return (-pod.priority, start_time(pod, now))


def _terminating_by_preemption(pod: PodView) -> bool:
    if not pod.deleting:
        return False
    condition = pod.condition(_DISRUPTION_TARGET)
    return (
        condition is not None
        and condition.get("status") == "True"
        and condition.get("reason") == _PREEMPTION_BY_SCHEDULER
    )


def ineligible_reason(
    pod: PodView, nominated: str, nominated_code: Code, nominated_pods: Sequence[PodView]
) -> str | None:
    """``PodEligibleToPreemptOthers``: why ``pod`` may not preempt (``None``: it may).

    ``nominated`` is the node it is nominated to (``""``: none), ``nominated_code`` the status
    that node got this cycle (a node without one reads UnschedulableAndUnresolvable) and
    ``nominated_pods`` the pods on it."""
    if pod.spec.get("preemptionPolicy") == "Never":
        return NOT_ELIGIBLE_NEVER
    if not nominated or nominated_code is Code.UNRESOLVABLE:
        return None
    for other in nominated_pods:
        if other.priority < pod.priority and _terminating_by_preemption(other):
            return NOT_ELIGIBLE_TERMINATING
    return None


def _budget_selects(pdb: Mapping[str, Any], pod: PodView) -> bool:
    if (pdb.get("metadata") or {}).get("namespace") != pod.namespace:
        return False
    try:
        selector = selector_of(pdb)
    except ProtocolError:
        return False  # an invalid selector matches no pod
    # Preemption (unlike the disruption controller) reads a nil or empty selector as nothing.
    return selector is not None and not selector.is_everything and selector.matches(pod.labels)


def split_by_budgets(
    pods: Sequence[PlacedPod], pdbs: Sequence[Mapping[str, Any]]
) -> tuple[list[PlacedPod], list[PlacedPod]]:
    """``filterPodsWithPDBViolation``: ``(violating, non-violating)``, each in input order."""
    allowed = [int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) for pdb in pdbs]
    violating: list[PlacedPod] = []
    non_violating: list[PlacedPod] = []
    for placed in pods:
        violated = False
        for index, pdb in enumerate(pdbs):
            if not placed.pod.labels or not _budget_selects(pdb, placed.pod):
                continue
            if placed.pod.name in ((pdb.get("status") or {}).get("disruptedPods") or {}):
                continue  # already counted by the API server's eviction
            allowed[index] -= 1
            violated = violated or allowed[index] < 0
        (violating if violated else non_violating).append(placed)
    return violating, non_violating


def select_victims_on_node(
    preemptor: PodView,
    pods: Sequence[PlacedPod],
    check: Check,
    pdbs: Sequence[Mapping[str, Any]],
    now: datetime,
) -> Victims | NodeStatus:
    """``SelectVictimsOnNode`` (see the module doc): the victims, possibly none, or why the node
    cannot take the preemptor even without them."""
    potential = [p for p in pods if p.pod.priority < preemptor.priority]
    if not potential:
        return unresolvable(NO_VICTIMS)
    remaining = [p for p in pods if p.pod.priority >= preemptor.priority]
    status = check(remaining)
    if status is not None:
        return status
    potential.sort(key=lambda p: importance(p.pod, now))
    violating, non_violating = split_by_budgets(potential, pdbs)
    victims: list[PlacedPod] = []
    violations = 0
    for group, counts in ((violating, True), (non_violating, False)):
        for placed in group:
            if check([*remaining, placed]) is None:
                remaining.append(placed)  # reprieved
            else:
                victims.append(placed)
                violations += counts
    if violating and non_violating:
        victims.sort(key=lambda p: importance(p.pod, now))
    return Victims(tuple(p.pod for p in victims), violations)
