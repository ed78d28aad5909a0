"""What nominated preemptors hold on a node: the devices kept for them while their victims
terminate.

kube-scheduler nominates a preemptor to the node it preempted on (``status.nominatedNodeName``)
and protects that node's capacity for it in its in-tree filters only (contract
``preemption-and-capacity.md`` §2.4): the extender must hold the freed device capacity itself,
or a lower-priority pod filtered meanwhile takes the slices the victims gave up, and the
preemptor evicted them for nothing.

:func:`hold_on` places the nominated pods on the node *as it will be once its terminating pods
are gone* (pods with ``deletionTimestamp`` still hold their devices until their containers
exit, but they are on their way out), in the order given — most important first — each on what
the earlier ones left, by the selection rule itself
(:func:`~hami_scheduler.core.joint.route.decide_on`).  What they take is then added to the node
*as it is*, terminating pods included: a device a victim still occupies and a preemptor will
take counts twice (over-full: no one else fits there), and a device a victim frees that no
preemptor needs stays occupied until the victim is gone.  A nominated pod that does not fit
even then holds nothing.

Only device usage and MIG slices are held: a nominated pod's NICs and exclusive PCIe claims are
not (its GPUs are).

Cost: one decision per nominated pod on the node (nominated pods are few).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.core.decide import NodeDecision, decision_usage
from hami_scheduler.core.joint.decide import JointDecision
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nics import NicUsage
from hami_scheduler.core.joint.route import Fleet, decide_on
from hami_scheduler.core.mig import MigHold, mig_holds
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.usage.apply import apply_usage, remove_usage
from hami_scheduler.core.usage.node import NodeUsage

__all__ = ["Held", "Nominee", "hold_on"]


@dataclass(frozen=True, slots=True)
class Nominee:
    """A pending pod nominated to the node, as the hold places it."""

    uid: str
    key: str
    """``namespace/name`` (names its MIG holds)."""
    plan: PodPlan
    request: JointRequest


@dataclass(frozen=True, slots=True)
class Held:
    """What one nominated pod holds on the node."""

    uid: str
    usage: tuple[DeviceUsageSummary, ...]
    mig: tuple[MigHold, ...] = ()


def _taken(decision: NodeDecision | JointDecision, nominee: Nominee) -> Held:
    gpus = decision if isinstance(decision, NodeDecision) else decision.node_decision()
    usage = decision_usage(gpus, nominee.plan)
    return Held(nominee.uid, usage, mig_holds(nominee.key, gpus.mig))


def hold_on(
    node: NodeUsage,
    nominees: Sequence[Nominee],
    *,
    terminating: Sequence[DeviceUsageSummary] = (),
    terminating_mig: Sequence[MigHold] = (),
    nics: NicUsage | None = None,
) -> tuple[NodeUsage, tuple[Held, ...]]:
    """``node`` with what ``nominees`` hold added, and what each holds (see the module doc).

    ``terminating`` / ``terminating_mig``: what the node's terminating pods hold (part of
    ``node``)."""
    name = node.layout.name
    free = remove_usage(node, terminating, terminating_mig)
    held: list[Held] = []
    for nominee in nominees:
        claimed = {name} if nics is not None and nics.claims_gpus else set()
        fleet = Fleet({name: free}, {} if nics is None else {name: nics}, claimed, {name})
        decision = decide_on(nominee.plan, nominee.request, fleet, name)
        if isinstance(decision, str) or not decision.fits:
            continue
        taken = _taken(decision, nominee)
        free = apply_usage(free, taken.usage, taken.mig)
        held.append(taken)
    if not held:
        return node, ()
    usage = [summary for one in held for summary in one.usage]
    mig = [hold for one in held for hold in one.mig]
    return apply_usage(node, usage, mig), tuple(held)
