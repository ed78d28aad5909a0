"""What the scheduler knows about one node: its devices, their capacity and what pods hold.

* :class:`DeviceUsage` — one device's capacity (``count`` task slots, ``totalmem`` MiB,
  ``totalcore`` units) and what is held on it (``used`` slots, ``usedmem``, ``usedcores``).
* :class:`NodeLayout` — what does not change when pods come and go: the node name, which
  devices belong to which vendor, the cordoned UUIDs and the GPU pair scores.
* :class:`NodeUsage` — a layout plus the current :class:`DeviceUsage` of every device, with the
  node-wide sums the node score needs.

All three are immutable.  A pod's arrival or departure produces a *new* :class:`NodeUsage`
(:func:`apply_usage` / :func:`remove_usage`), costing O(devices of the pod + devices of the node):
the layout is shared, unchanged devices are shared, only touched devices are rebuilt.  Immutable
values mean a filter can read a consistent snapshot while the cache moves on, and a changed node
is recognisably a different object, which is what lets :mod:`.select` memoise per-node results.
Views the filter needs repeatedly — :meth:`NodeUsage.open` (devices able to take a request,
sorted by free memory) and :meth:`NodeUsage.derived` (e.g. the device order of a policy) — are
computed on first use and kept by that node version, so pod events stay cheap and an unchanged
node never recomputes them.

Pod usage arrives as :class:`~hami_protocol.pod.devices.DeviceUsageSummary` values (the collapsed,
per-device effect of one pod: init peak vs. app sum, see
:func:`~hami_protocol.pod.devices.collapse_device_usage`); :func:`pod_usage` builds them from a
pod's
per-vendor device lists.  Summaries naming a UUID the node does not have are ignored (a device
that left the registry holds nothing any more); :func:`unknown_devices` lists them for logging.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar, cast

from hami_protocol.node.registry import DeviceInfo, DevicePairScore
from hami_protocol.pod.devices import (
    DeviceUsageSummary,
    PodDevices,
    collapse_device_usage,
)
from hami_scheduler.core.mig import GpuOccupancy, HeldSlices, MigGpu, MigHold
from hami_scheduler.core.vendors.context import NO_NODE_FACTS, NodeVendorFacts

__all__ = [
    "DRS_SLICE_KEY",
    "DRS_WORD",
    "MIG_MODE",
    "NO_CUSTOM",
    "NO_MIG",
    "DeviceUsage",
    "NodeLayout",
    "NodeUsage",
    "OpenDevices",
    "UsageTotals",
    "apply_usage",
    "build_node_usage",
    "custom_text",
    "device_usage",
    "drs_slices",
    "node_layout",
    "pod_usage",
    "remove_usage",
    "unknown_devices",
]

MIG_MODE: Final = "mig"

NO_MIG: Final[Mapping[str, GpuOccupancy]] = MappingProxyType({})
"""No MIG slice held anywhere on the node."""

MAX_DERIVED: Final = 16
"""Derived values one :class:`NodeUsage` version keeps (see :meth:`NodeUsage.derived`)."""

_T = TypeVar("_T")

NO_MIG_GPUS: Final[Mapping[str, MigGpu]] = MappingProxyType({})

NO_CUSTOM: Final[Mapping[str, str]] = MappingProxyType({})
"""A device without vendor ``custominfo`` (every NVIDIA device)."""

_WEIGHT: Final = 10.0
"""HAMi's score multiplier (``util.Weight``)."""

DRS_WORD: Final = "Enflame"
"""Enflame DRS: a grant holds its profile's slices, not one slot (:func:`drs_slices`)."""
DRS_SLICE_KEY: Final = "maxSlice"
"""custominfo of a DRS device: the slices of its largest profile."""


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One device: capacity from its registration, usage from the pods placed on it."""

    uuid: str
    vendor: str
    """The vendor's common word (``NVIDIA``); the registry annotation the device came from."""
    type: str
    """The device model as registered (``NVIDIA-Tesla T4``)."""
    index: int
    numa: int
    mode: str
    health: bool
    count: int
    totalmem: int
    totalcore: int
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    custom: Mapping[str, str] = field(default_factory=lambda: NO_CUSTOM, hash=False)
    """The registration's ``custominfo`` as text (Ascend ``NetworkID``, Vastai ``AIC`` and
    ``DeviceStrategy``, AWS ``AWSNodeType``, MetaX ``QosPolicy``/``LinkZone``); read-only,
    shared by every usage version of the device, empty for vendors that have none."""

    def shifted(self, slots: int, mem: int, cores: int) -> DeviceUsage:
        """This device with usage moved by the given amounts, never below zero."""
        return DeviceUsage(
            self.uuid,
            self.vendor,
            self.type,
            self.index,
            self.numa,
            self.mode,
            self.health,
            self.count,
            self.totalmem,
            self.totalcore,
            max(self.used + slots, 0),
            max(self.usedmem + mem, 0),
            max(self.usedcores + cores, 0),
            self.custom,
        )


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def custom_text(info: Mapping[str, object]) -> Mapping[str, str]:
    """A registration's ``custominfo`` as text: strings as they are, numbers and booleans as
    Go prints them, anything else (DRS ``profiles``) as compact JSON."""
    if not info:
        return NO_CUSTOM
    return MappingProxyType({key: _text(value) for key, value in info.items()})


def drs_slices(usedcores: int, max_slice: int) -> int:
    """The slices an Enflame DRS grant of ``usedcores`` percent holds on a GCU of ``max_slice``
    slices: its profile's ``S`` (``usedcores = ceil(S × 100 / max_slice)``, so
    ``usedcores × max_slice // 100 = S`` exactly for ``max_slice ≤ 100``); at least 1.

    A pod's usage of one device is a sum over its containers (``slots`` grants); it is charged
    ``slots × drs_slices(usedcores // slots)`` — exact when those containers hold one profile,
    as a DRS pod's containers asking alike do."""
    if max_slice <= 0:
        return 1
    return max(usedcores * max_slice // 100, 1)


def device_usage(info: DeviceInfo, vendor: str) -> DeviceUsage:
    """An idle :class:`DeviceUsage` for a registered device of ``vendor``."""
    return DeviceUsage(
        uuid=info.id,
        vendor=vendor,
        type=info.type,
        index=info.index,
        numa=info.numa,
        mode=info.mode,
        health=info.health,
        count=info.count,
        totalmem=info.devmem,
        totalcore=info.devcore,
        custom=custom_text(info.custom_info) if info.custom_info else NO_CUSTOM,
    )


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Node-wide sums over every device of every vendor."""

    used: int = 0
    count: int = 0
    usedmem: int = 0
    totalmem: int = 0
    usedcores: int = 0
    totalcore: int = 0

    @property
    def score(self) -> float:
        """HAMi's node score: ``10 × (ΣUsed/ΣCount + ΣUsedcores/ΣTotalcore + ΣUsedmem/ΣTotalmem)``.

        0 when any denominator is 0, as HAMi's ``ComputeDefaultScore``.
        """
        if not (self.count and self.totalcore and self.totalmem):
            return 0.0
        return _WEIGHT * (
            self.used / self.count + self.usedcores / self.totalcore + self.usedmem / self.totalmem
        )


OpenRow = tuple[int, int, int, int, int, int, DeviceUsage]
"""``(free_mem, free_cores, totalmem, totalcore, usedcores, used, device)`` of an open device."""

_ANY_PERCENTAGE: Final = 101


@dataclass(frozen=True, slots=True)
class OpenDevices:
    """One vendor's *open* devices on a node — healthy, not MIG, not cordoned, a slot free —
    as rows sorted by free memory, most first, with bounds over them.

    Every device that can take any request is open, so a request beyond these bounds fits
    nowhere in the group, and a scan for a fixed amount of memory can stop at the first row
    with too little.  Built on first use per :class:`NodeUsage` (see :meth:`NodeUsage.open`).
    """

    rows: tuple[OpenRow, ...] = ()
    max_free_mem: int = 0
    max_free_cores: int = 0
    max_percentage: int = 0
    """The largest memory percentage some open device could still grant (101: any)."""
    max_totalmem: int = 0


_NO_OPEN_DEVICES: Final = OpenDevices()


def _open_devices(devices: Iterable[DeviceUsage], cordon: frozenset[str]) -> OpenDevices:
    rows: list[OpenRow] = []
    max_free_cores = max_percentage = max_totalmem = 0
    for dev in devices:
        if not dev.health or dev.used >= dev.count or dev.mode == MIG_MODE or dev.uuid in cordon:
            continue
        free_mem = dev.totalmem - dev.usedmem
        free_cores = dev.totalcore - dev.usedcores
        rows.append(
            (free_mem, free_cores, dev.totalmem, dev.totalcore, dev.usedcores, dev.used, dev)
        )
        max_free_cores = max(max_free_cores, free_cores)
        max_totalmem = max(max_totalmem, dev.totalmem)
        if dev.totalmem <= 0:
            percentage = _ANY_PERCENTAGE
        else:
            # Largest p with totalmem·p // 100 <= free_mem, i.e. totalmem·p < (free_mem+1)·100.
            percentage = -(-(free_mem + 1) * 100 // dev.totalmem) - 1
        max_percentage = max(max_percentage, percentage)
    if not rows:
        return _NO_OPEN_DEVICES
    rows.sort(key=_free_mem, reverse=True)
    return OpenDevices(tuple(rows), rows[0][0], max_free_cores, max_percentage, max_totalmem)


def _free_mem(row: OpenRow) -> int:
    return row[0]


@dataclass(frozen=True, slots=True, eq=False)
class NodeLayout:
    """The usage-independent part of a node, shared by all of its :class:`NodeUsage` versions.

    Compared by identity: a layout is rebuilt only when the node's registration changes.
    """

    name: str
    vendors: tuple[str, ...]
    """Vendor common words in registration order."""
    uuids: tuple[str, ...]
    """Device UUIDs, position by position (vendor groups in ``vendors`` order)."""
    cordon: frozenset[str]
    positions: Mapping[str, int]
    """UUID → position in :attr:`NodeUsage.devices`."""
    vendor_positions: Mapping[str, tuple[int, ...]]
    """Vendor word → positions of its devices, in registration order."""
    pair_scores: Mapping[str, Mapping[str, int]]
    """UUID → peer UUID → link score (``hami.io/node-nvidia-score``)."""
    mig_gpus: Mapping[str, MigGpu] = field(default_factory=lambda: NO_MIG_GPUS)
    """UUID → the MIG-mode GPU's profiles, for every device registered in ``mig`` mode."""
    vendor: NodeVendorFacts = NO_NODE_FACTS
    """The node's own vendor facts (:mod:`.vendors.context`)."""
    slice_charged: Mapping[int, int] = field(default_factory=dict)
    """Position → slices of the largest profile, for every Enflame DRS device: a grant there
    holds :func:`drs_slices` slots (empty on every other node: no per-device work)."""

    def pair_score(self, uuid: str, peer: str) -> int:
        """The reported score from ``uuid`` towards ``peer``; 0 when none is reported."""
        return self.pair_scores.get(uuid, {}).get(peer, 0)


def node_layout(
    name: str,
    uuids_by_vendor: Sequence[tuple[str, Sequence[str]]],
    *,
    cordon: Iterable[str] = (),
    pair_scores: Iterable[DevicePairScore] = (),
    mig_gpus: Iterable[MigGpu] = (),
    vendor: NodeVendorFacts = NO_NODE_FACTS,
    slice_charged: Mapping[int, int] | None = None,
) -> NodeLayout:
    """A layout for devices listed per vendor (``[(word, [uuid, ...]), ...]``)."""
    uuids: list[str] = []
    vendor_positions: dict[str, tuple[int, ...]] = {}
    for word, group in uuids_by_vendor:
        start = len(uuids)
        uuids.extend(group)
        vendor_positions[word] = vendor_positions.get(word, ()) + tuple(range(start, len(uuids)))
    positions: dict[str, int] = {}
    for position, uuid in enumerate(uuids):
        positions.setdefault(uuid, position)
    return NodeLayout(
        name=name,
        vendors=tuple(vendor_positions),
        uuids=tuple(uuids),
        cordon=frozenset(cordon),
        positions=positions,
        vendor_positions=vendor_positions,
        pair_scores={entry.uuid: dict(entry.scores) for entry in pair_scores},
        mig_gpus={gpu.uuid: gpu for gpu in mig_gpus} or NO_MIG_GPUS,
        vendor=vendor,
        slice_charged=dict(slice_charged or {}),
    )


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's devices with their current usage.  Build with :func:`build_node_usage`."""

    layout: NodeLayout
    devices: tuple[DeviceUsage, ...]
    """One entry per position of :attr:`NodeLayout.uuids`."""
    mig: Mapping[str, GpuOccupancy] = field(default_factory=lambda: NO_MIG)
    """GPU UUID → the MIG slices pods' reservations hold on it (any GPU a reservation names)."""
    totals: UsageTotals = field(init=False, compare=False, repr=False)
    base_score: float = field(init=False, compare=False, repr=False)
    """The node score before the pod being scheduled (see :attr:`UsageTotals.score`)."""
    involves_mig: bool = field(init=False, compare=False, repr=False)
    """Some device is in MIG mode or some reservation holds slices here: only the full
    decision judges such a node (the open-device views leave MIG out)."""
    _open: dict[str, OpenDevices] | None = field(
        default=None, init=False, compare=False, repr=False
    )
    _derived: dict[Hashable, object] | None = field(
        default=None, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        used = count = usedmem = totalmem = usedcores = totalcore = 0
        for dev in self.devices:
            used += dev.used
            count += dev.count
            usedmem += dev.usedmem
            totalmem += dev.totalmem
            usedcores += dev.usedcores
            totalcore += dev.totalcore
        totals = UsageTotals(used, count, usedmem, totalmem, usedcores, totalcore)
        object.__setattr__(self, "totals", totals)
        object.__setattr__(self, "base_score", totals.score)
        object.__setattr__(self, "involves_mig", bool(self.layout.mig_gpus) or bool(self.mig))

    @property
    def name(self) -> str:
        return self.layout.name

    def device(self, uuid: str) -> DeviceUsage | None:
        position = self.layout.positions.get(uuid)
        return None if position is None else self.devices[position]

    def vendor_devices(self, vendor: str) -> tuple[DeviceUsage, ...]:
        """The vendor's devices in registration order."""
        devices = self.devices
        return tuple(devices[p] for p in self.layout.vendor_positions.get(vendor, ()))

    def open(self, vendor: str) -> OpenDevices:
        """The vendor's open devices (computed once per node version, then kept)."""
        views = self._open
        if views is None:
            cordon = self.layout.cordon
            views = {
                word: _open_devices(self.vendor_devices(word), cordon)
                for word in self.layout.vendors
            }
            # A cache of a pure function of this immutable value; safe to fill in lazily.
            object.__setattr__(self, "_open", views)
        return views.get(vendor, _NO_OPEN_DEVICES)

    def derived(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()``, remembered under ``key`` for this node version.

        For values that are pure functions of this node (a device order for a policy, say);
        at most :data:`MAX_DERIVED` are kept, beyond that they are computed every time.
        """
        store = self._derived
        if store is None:
            store = {}
            object.__setattr__(self, "_derived", store)
        if key in store:
            return cast(_T, store[key])
        value = compute()
        if len(store) < MAX_DERIVED:
            store[key] = value
        return value


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
    if not deltas:
        return node if held is node.mig else NodeUsage(node.layout, node.devices, held)
    devices = list(node.devices)
    for position, (slots, mem, cores) in deltas.items():
        devices[position] = devices[position].shifted(sign * slots, sign * mem, sign * cores)
    return NodeUsage(node.layout, tuple(devices), held)


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
