"""One node's devices with their usage: the layout that pod events leave alone, and the usage.

* :class:`NodeLayout` — the usage-independent part (name, vendor groups, cordon, pair scores,
  MIG-mode GPUs, vendor facts), shared by every :class:`NodeUsage` version of the node and
  rebuilt only when its registration changes;
* :class:`NodeUsage` — a layout plus one :class:`~.device.DeviceUsage` per device and the MIG
  slices held, with the node-wide :class:`UsageTotals`; it keeps its open-device views
  (:mod:`.open_devices`) and other derived values once computed.

Build a :class:`NodeUsage` and move it as pods come and go with :mod:`.apply`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar, cast

from hami_protocol.node.registry import DevicePairScore
from hami_scheduler.core.mig import GpuOccupancy, MigGpu
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.usage.open_devices import NO_OPEN_DEVICES, OpenDevices, open_devices
from hami_scheduler.core.vendors.context import NO_NODE_FACTS, NodeVendorFacts

__all__ = [
    "MAX_DERIVED",
    "NO_MIG",
    "NO_MIG_GPUS",
    "NodeLayout",
    "NodeUsage",
    "UsageTotals",
    "node_layout",
]

NO_MIG: Final[Mapping[str, GpuOccupancy]] = MappingProxyType({})
"""No MIG slice held anywhere on the node."""

MAX_DERIVED: Final = 16
"""Derived values one :class:`NodeUsage` version keeps (see :meth:`NodeUsage.derived`)."""

_T = TypeVar("_T")

NO_MIG_GPUS: Final[Mapping[str, MigGpu]] = MappingProxyType({})

_WEIGHT: Final = 10.0
"""HAMi's score multiplier (``util.Weight``)."""


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
    """The node's own vendor facts (:mod:`hami_scheduler.core.vendors.context`)."""
    slice_charged: Mapping[int, int] = field(default_factory=dict)
    """Position → slices of the largest profile, for every Enflame DRS device: a grant there
    holds :func:`~.device.drs_slices` slots (empty on every other node: no per-device work)."""

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
    """A node's devices with their current usage.  Build with
    :func:`~.apply.build_node_usage`."""

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
                word: open_devices(self.vendor_devices(word), cordon)
                for word in self.layout.vendors
            }
            # A cache of a pure function of this immutable value; safe to fill in lazily.
            object.__setattr__(self, "_open", views)
        return views.get(vendor, NO_OPEN_DEVICES)

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
