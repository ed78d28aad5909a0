"""Which refused nodes an eviction could help: ``FailedNodes`` or ``FailedAndUnresolvableNodes``.

kube-scheduler's preemption considers only nodes whose status is exactly *Unschedulable*
(``FailedNodes``); a node the extender names in ``FailedAndUnresolvableNodes`` is
*UnschedulableAndUnresolvable* and never a candidate (contract ``preemption-and-capacity.md``
§1.1, §5).  A refused node is unresolvable when the pod would not fit there even with every
pod's usage on the node taken away — more devices than the node has, per-card memory larger than
any card, type/UUID/NUMA selectors matching nothing, a namespace quota it exceeds (the preempt
verb credits no quota), no registered device — or when the cache refuses it before any device
is looked at (a malformed register annotation, devices silent on the handshake).  Otherwise it
stays in ``FailedNodes``, with the same reason text.

:func:`split_unresolvable` decides the refused nodes again by the selection rule
(:func:`~hami_scheduler.core.joint.route.choose`) on an *empty* copy of each: its devices with
no usage, no MIG slice held, its NICs with nothing taken and no claim.  :class:`EmptyNodes`
keeps each node's empty copy while its layout (registration) is unchanged, and a
:class:`~hami_scheduler.core.SelectMemo` over them, so in steady state the split costs a memo
lookup per refused node.

Cost: only for refused nodes; the first time per plan and layout one quick verdict (or one
decision) per node, then a lookup.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from hami_scheduler.core import NodeUsage, PodPlan, SelectMemo
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nics import NicUsage, build_nic_usage
from hami_scheduler.core.joint.route import Fleet, choose

__all__ = ["EmptyNodes", "Split", "split_unresolvable"]


def empty_usage(node: NodeUsage) -> NodeUsage:
    """``node`` with every pod's usage (and MIG slices) taken away."""
    devices = tuple(d.shifted(-d.used, -d.usedmem, -d.usedcores) for d in node.devices)
    return NodeUsage(node.layout, devices)


class EmptyNodes:
    """Each node's empty copy, kept while its layout is the same, and their memo."""

    def __init__(self) -> None:
        self._kept: dict[str, NodeUsage] = {}
        self.memo = SelectMemo()

    def of(self, nodes: Mapping[str, NodeUsage], names: Sequence[str]) -> Mapping[str, NodeUsage]:
        """The empty copies of ``names`` (those in ``nodes``): the kept mapping itself (no
        copy per call) once every one is current."""
        kept = self._kept
        present = [name for name in names if name in nodes]
        if len(present) < len(names):
            # A node no longer registered must not read a copy kept from before.
            for name in names:
                if name not in nodes:
                    kept.pop(name, None)
        # One C-level comparison of the layouts (identical objects compare at once) tells
        # whether any node was registered anew since its copy was made.
        if list(map(_LAYOUT, map(nodes.__getitem__, present))) != [
            None if empty is None else empty.layout for empty in map(kept.get, present)
        ]:
            for name in present:
                node = nodes[name]
                empty = kept.get(name)
                if empty is None or empty.layout is not node.layout:
                    kept[name] = empty_usage(node)
        return kept


_LAYOUT = attrgetter("layout")


@dataclass(frozen=True, slots=True)
class Split:
    failed: dict[str, str] = field(default_factory=dict)
    """Refused, but evicting pods could make room: ``FailedNodes``."""
    unresolvable: dict[str, str] = field(default_factory=dict)
    """No eviction could help: ``FailedAndUnresolvableNodes``."""


def split_unresolvable(
    failed: Mapping[str, str],
    plan: PodPlan,
    request: JointRequest,
    fleet: Fleet,
    *,
    refused: Collection[str] = (),
    empties: EmptyNodes | None = None,
) -> Split:
    """``failed`` (node → reason) split as the module docstring says; ``refused`` are nodes the
    cache refused before deciding (always unresolvable)."""
    if not failed:
        return Split()
    empties = empties if empties is not None else EmptyNodes()
    names = [name for name in failed if name not in refused]
    gpus = empties.of(fleet.gpus, names)
    nics: dict[str, NicUsage] = {}
    if fleet.nics:
        for name in names:
            usage = fleet.nics.get(name)
            if usage is not None:
                nics[name] = build_nic_usage(usage.layout)
    fitting = choose(plan, request, Fleet(gpus, nics, (), fleet.seen), names, memo=empties.memo)
    resolvable = fitting.fitting
    return Split(
        {name: reason for name, reason in failed.items() if name in resolvable},
        {name: reason for name, reason in failed.items() if name not in resolvable},
    )
