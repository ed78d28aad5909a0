"""Pods' usage on a node: a node built from its registry with its pods, and moved as they go.

:func:`build_node_usage` builds a :class:`~.node.NodeUsage` with every pod's usage at once;
:func:`apply_usage` / :func:`remove_usage` give the node after one or more pods arrived or left,
rebuilding only the devices they touch.

Pod usage arrives as :class:`~hami_protocol.pod.devices.DeviceUsageSummary` values (the collapsed,
per-device effect of one pod: init peak vs. app sum, see
:func:`~hami_protocol.pod.devices.collapse_device_usage`); :func:`pod_usage` builds them from a
pod's per-vendor device lists.  Summaries naming a UUID the node does not have are ignored (a
device that left the registry holds nothing any more); :func:`unknown_devices` lists them for
logging.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hami_protocol.node.registry import DeviceInfo, DevicePairScore
from hami_protocol.pod.devices import (
    DeviceUsageSummary,
    PodDevices,
    collapse_device_usage,
)
from hami_scheduler.core.mig import GpuOccupancy, HeldSlices, MigGpu, MigHold
from hami_scheduler.core.usage.device import (
    DRS_SLICE_KEY,
    DRS_WORD,
    MIG_MODE,
    device_usage,
    drs_slices,
)
from hami_scheduler.core.usage.node import NO_MIG, NodeUsage, node_layout
from hami_scheduler.core.vendors.context import NO_NODE_FACTS, NodeVendorFacts

__all__ = [
    "apply_usage",
    "build_node_usage",
    "pod_usage",
    "position_amounts",
    "remove_usage",
    "unknown_devices",
]


def build_node_usage(
    name: str,
    devices: Mapping[str, Sequence[DeviceInfo]],
    *,
    cordon: Iterable[str] = (),
    pair_scores: Iterable[DevicePairScore] = (),
    usages: Iterable[DeviceUsageSummary] = (),
    mig: Iterable[MigHold] = (),
    vendor: NodeVendorFacts = NO_NODE_FACTS,
) -> NodeUsage:
    """A node from its registry (vendor word → devices) with ``usages`` already applied.

    ``usages`` may be the summaries of every pod on the node (a rebuild after re-registration);
    they are summed first, so the cost is O(summaries + devices), not one rebuild per pod.
    ``mig`` are the MIG slices the node's pods hold.
    """
    idle = tuple(device_usage(info, word) for word, group in devices.items() for info in group)
    slice_charged: dict[int, int] = {}
    if DRS_WORD in devices:
        for position, dev in enumerate(idle):
            if dev.vendor == DRS_WORD:
                try:
                    slice_charged[position] = int(dev.custom.get(DRS_SLICE_KEY, "0"))
                except ValueError:
                    slice_charged[position] = 0
    layout = node_layout(
        name,
        [(word, [info.id for info in group]) for word, group in devices.items()],
        cordon=cordon,
        pair_scores=pair_scores,
        mig_gpus=[
            MigGpu.from_info(info)
            for group in devices.values()
            for info in group
            if info.mode == MIG_MODE
        ],
        vendor=vendor,
        slice_charged=slice_charged,
    )
    return _shifted(NodeUsage(layout, idle), usages, 1, mig)


def apply_usage(
    node: NodeUsage, usages: Iterable[DeviceUsageSummary], mig: Iterable[MigHold] = ()
) -> NodeUsage:
    """``node`` with the usage (and MIG slices) of one or more pods added."""
    return _shifted(node, usages, 1, mig)


def remove_usage(
    node: NodeUsage, usages: Iterable[DeviceUsageSummary], mig: Iterable[MigHold] = ()
) -> NodeUsage:
    """``node`` with the usage of pods taken away: the exact inverse of :func:`apply_usage`.

    Usage never goes below zero, so removing what was never applied cannot invent capacity
    beyond the registration; a MIG hold is removed only where it is held.
    """
    return _shifted(node, usages, -1, mig)


def _moved_mig(
    held: Mapping[str, GpuOccupancy], holds: Iterable[MigHold], sign: int
) -> Mapping[str, GpuOccupancy]:
    changed: dict[str, list[HeldSlices]] = {}
    for uuid, slices in holds:
        current = changed.get(uuid)
        if current is None:
            occupancy = held.get(uuid)
            current = changed[uuid] = [] if occupancy is None else list(occupancy.held)
        if sign > 0:
            current.append(slices)
        elif slices in current:
            current.remove(slices)
    if not changed:
        return held
    moved = dict(held)
    for uuid, kept in changed.items():
        if kept:
            moved[uuid] = GpuOccupancy(uuid, tuple(kept))
        else:
            moved.pop(uuid, None)
    return moved or NO_MIG


def _shifted(
    node: NodeUsage,
    usages: Iterable[DeviceUsageSummary],
    sign: int,
    mig: Iterable[MigHold] = (),
) -> NodeUsage:
    held = _moved_mig(node.mig, mig, sign)
    deltas = position_amounts(node, usages)
    if not deltas:
        return node if held is node.mig else NodeUsage(node.layout, node.devices, held)
    devices = list(node.devices)
    for position, (slots, mem, cores) in deltas.items():
        devices[position] = devices[position].shifted(sign * slots, sign * mem, sign * cores)
    return NodeUsage(node.layout, tuple(devices), held)


def position_amounts(node: NodeUsage, usages: Iterable[DeviceUsageSummary]) -> dict[int, list[int]]:
    """Device position → the ``[slots, memory, cores]`` that ``usages`` hold there, summed, as
    :func:`apply_usage` and :func:`remove_usage` move them (an Enflame DRS grant in slices);
    UUIDs the node does not have are left out.

    Sums are taken before the one move per device, so a node moved by the sum of several pods'
    amounts equals the node moved by all their usages at once (the preempt verb builds its
    trial nodes from such sums).
    """
    positions = node.layout.positions
    charged = node.layout.slice_charged
    deltas: dict[int, list[int]] = {}
    for summary in usages:
        position = positions.get(summary.uuid)
        if position is None:
            continue
        slots = summary.slots
        if charged and position in charged:
            times = max(slots, 1)
            slots = times * drs_slices(summary.usedcores // times, charged[position])
        delta = deltas.get(position)
        if delta is None:
            deltas[position] = [slots, summary.usedmem, summary.usedcores]
        else:
            delta[0] += slots
            delta[1] += summary.usedmem
            delta[2] += summary.usedcores
    return deltas


def unknown_devices(node: NodeUsage, usages: Iterable[DeviceUsageSummary]) -> tuple[str, ...]:
    """UUIDs in ``usages`` that the node does not have (ignored by :func:`apply_usage`)."""
    positions = node.layout.positions
    return tuple(summary.uuid for summary in usages if summary.uuid not in positions)


def pod_usage(
    devices: PodDevices,
    *,
    init_count: int,
    sidecars: frozenset[int] = frozenset(),
    init_finished: bool = False,
) -> tuple[DeviceUsageSummary, ...]:
    """The collapsed usage of one pod over all its vendors (what the caches apply and remove).

    ``devices`` are the pod's decoded ``-devices-allocated`` lists, one segment per container,
    init containers first.  See :func:`~hami_protocol.pod.devices.collapse_device_usage`.
    """
    summaries: list[DeviceUsageSummary] = []
    for _, pod in devices.entries:
        summaries.extend(
            collapse_device_usage(
                pod, init_count=init_count, sidecars=sidecars, init_finished=init_finished
            )
        )
    return tuple(summaries)
