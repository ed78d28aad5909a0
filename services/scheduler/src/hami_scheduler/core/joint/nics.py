"""RDMA NICs of one node and what pods hold on them: units, VFs and exclusive PCIe claims.

* :class:`NicLayout` — what does not change while pods come and go: the node's NICs (from
  ``hami.io/node-rdma-register``, sorted by minor), where its GPUs sit (from the GPU register's
  ``pcieSwitch`` / ``pcieRoot``), and lookups from PF and VF bus ids to NICs.
* :class:`NicUsage` — a layout plus, per NIC, the ``koordinator.sh/rdma`` units held and the number
  of allocations touching it; the VFs taken; and the exclusive PCIe claims.
* :class:`NicPodUsage` — what one pod holds (:class:`NicHold` per NIC, and its claims): the unit
  that :func:`apply_nic_usage` adds and :func:`remove_nic_usage` takes away again.

Capacity is :data:`RDMA_UNITS_PER_NIC` units per NIC, Koordinator's ``koordinator.sh/rdma: 100``
and what the RDMA device plugin advertises to the kubelet.

**Scopes.** A device's PCIe scope is its PCIe switch (the upstream-port bus id).  A device whose
switch is unknown is a scope of its own (``nic/<PF id>``, ``gpu/<uuid>``), so an unknown switch is
never "the same" as anything, as in :func:`hami_protocol.topology.layout.same_scope`.

**Claims.** A pod placed with ``exclusivePolicy: PCIeLevel`` for a device type claims the scopes
of its devices of that type: ``(type, scope)``.  While the claim is held no other pod gets a device
of that type in that scope, and an exclusive pod only takes scopes whose devices of that type no
other pod touches.  Claims are counted, not flagged, so removal is the exact inverse of apply
even when annotations written elsewhere overlap.

All values are immutable; apply and remove return new ones, as for
:class:`~hami_scheduler.core.usage.node.NodeUsage`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar

from hami_protocol.errors import ProtocolError
from hami_protocol.node.registry import DeviceInfo
from hami_protocol.topology.koordinator import DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA
from hami_protocol.topology.layout import RDMA_UNITS_PER_NIC, GPUTopology, RdmaNic, gpu_topology

__all__ = [
    "RDMA_UNITS_PER_NIC",
    "Claim",
    "NicHold",
    "NicLayout",
    "NicPodUsage",
    "NicUsage",
    "apply_nic_usage",
    "build_nic_usage",
    "claimed_gpus",
    "gpu_places",
    "nic_layout",
    "nic_scope",
    "remove_nic_usage",
    "unknown_nics",
]


_K = TypeVar("_K")

Claim = tuple[str, str]
"""``(device type, scope)`` held exclusively by a pod (``exclusivePolicy: PCIeLevel``)."""


def nic_scope(nic: RdmaNic) -> str:
    """The NIC's PCIe scope: its switch, or ``nic/<PF id>`` when the switch is unknown."""
    return nic.pcie_switch or f"nic/{nic.id}"


@dataclass(frozen=True, slots=True, eq=False)
class NicLayout:
    """The usage-independent part of a node's NIC picture.  Build with :func:`nic_layout`.

    Compared by identity: rebuilt only when the node's NIC or GPU registration changes.
    """

    name: str
    nics: tuple[RdmaNic, ...]
    """Sorted by minor; a NIC's position here indexes :attr:`NicUsage.units`."""
    gpus: Mapping[str, GPUTopology]
    """GPU UUID → where it sits.  GPUs missing here have no known PCIe switch."""
    units_per_nic: int
    positions: Mapping[str, int]
    """PF bus id → position."""
    vf_owner: Mapping[str, int]
    """VF bus id → position of its NIC."""
    scopes: tuple[str, ...]
    """Position → :func:`nic_scope`."""
    scope_members: Mapping[str, tuple[int, ...]]
    """Scope → positions of the NICs in it."""

    @property
    def has_vfs(self) -> bool:
        """Whether any NIC of the node has SR-IOV VFs."""
        return bool(self.vf_owner)

    def owner(self, bus_id: str) -> int | None:
        """Position of the NIC whose PF or VF has ``bus_id`` (normalised), else None."""
        position = self.positions.get(bus_id)
        return self.vf_owner.get(bus_id) if position is None else position

    def gpu_switch(self, uuid: str) -> str:
        """The GPU's PCIe switch; ``""`` when unknown."""
        place = self.gpus.get(uuid)
        return "" if place is None else place.pcie_switch

    def gpu_scope(self, uuid: str) -> str:
        """The GPU's PCIe scope: its switch, or ``gpu/<uuid>`` when unknown."""
        return self.gpu_switch(uuid) or f"gpu/{uuid}"


def nic_layout(
    name: str,
    nics: Iterable[RdmaNic] = (),
    *,
    gpus: Iterable[GPUTopology] = (),
    units_per_nic: int = RDMA_UNITS_PER_NIC,
) -> NicLayout:
    """A layout for decoded register entries (``decode_rdma_register``) and GPU places."""
    ordered = tuple(sorted(nics, key=lambda nic: (nic.minor, nic.id)))
    positions: dict[str, int] = {}
    vf_owner: dict[str, int] = {}
    members: dict[str, list[int]] = {}
    for position, nic in enumerate(ordered):
        positions.setdefault(nic.id, position)
        for vf in nic.vfs:
            vf_owner.setdefault(vf.bus_id, position)
        members.setdefault(nic_scope(nic), []).append(position)
    return NicLayout(
        name=name,
        nics=ordered,
        gpus=MappingProxyType({place.uuid: place for place in gpus}),
        units_per_nic=units_per_nic,
        positions=MappingProxyType(positions),
        vf_owner=MappingProxyType(vf_owner),
        scopes=tuple(nic_scope(nic) for nic in ordered),
        scope_members=MappingProxyType({s: tuple(p) for s, p in members.items()}),
    )


def gpu_places(devices: Mapping[str, Sequence[DeviceInfo]]) -> tuple[GPUTopology, ...]:
    """Where the registered devices sit (vendor word → devices, as the registry decodes them).

    A device whose addresses do not normalise is kept with an unknown switch and root: a bad
    topology field must not hide the device, only its locality.
    """
    places: list[GPUTopology] = []
    for group in devices.values():
        for info in group:
            try:
                place = gpu_topology(
                    info.id,
                    pci_bus_id=info.pci_bus_id,
                    pcie_switch=info.pcie_switch,
                    pcie_root=info.pcie_root,
                    numa=max(info.numa, 0),
                )
            except ProtocolError:
                place = GPUTopology(uuid=info.id, numa=max(info.numa, 0))
            places.append(place)
    return tuple(places)


@dataclass(frozen=True, slots=True)
class NicHold:
    """What one pod holds on one NIC: units and the VFs it was given (bus ids)."""

    nic: str
    """The NIC's PF bus id."""
    units: int
    vfs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NicPodUsage:
    """Everything one pod holds on a node's NICs, plus its exclusive claims."""

    holds: tuple[NicHold, ...] = ()
    claims: tuple[Claim, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.holds or self.claims)


def _frozen_counts(counts: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(sorted(counts.items())))


def _frozen_claims(counts: Mapping[Claim, int]) -> Mapping[Claim, int]:
    return MappingProxyType(dict(sorted(counts.items())))


_NO_VFS: Final[Mapping[str, int]] = MappingProxyType({})
_NO_CLAIMS: Final[Mapping[Claim, int]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NicUsage:
    """A node's NICs with what pods hold.  Build with :func:`build_nic_usage`."""

    layout: NicLayout
    units: tuple[int, ...]
    """Position → units held."""
    holders: tuple[int, ...]
    """Position → allocations touching the NIC (a hold of 0 units still touches it)."""
    vfs: Mapping[str, int] = field(default_factory=lambda: _NO_VFS, hash=False)
    """Taken VF bus id → number of holders (more than one only after a conflict elsewhere)."""
    claims: Mapping[Claim, int] = field(default_factory=lambda: _NO_CLAIMS, hash=False)
    """``(type, scope)`` → number of pods claiming it."""

    @property
    def name(self) -> str:
        return self.layout.name

    def free_units(self, position: int) -> int:
        return self.layout.units_per_nic - self.units[position]

    def vf_taken(self, bus_id: str) -> bool:
        return bus_id in self.vfs

    def claimed(self, device_type: str, scope: str) -> bool:
        return (device_type, scope) in self.claims

    def scope_touched(self, scope: str) -> bool:
        """Whether any pod holds anything on a NIC of ``scope``."""
        return any(self.holders[p] for p in self.layout.scope_members.get(scope, ()))

    @property
    def claims_gpus(self) -> bool:
        """Whether some pod holds an exclusive (PCIeLevel) claim on GPUs of this node."""
        return any(kind == DEVICE_TYPE_GPU for kind, _ in self.claims)

    @property
    def gpu_claims(self) -> frozenset[str]:
        """Scopes claimed exclusively for GPUs."""
        return frozenset(scope for kind, scope in self.claims if kind == DEVICE_TYPE_GPU)

    @property
    def nic_claims(self) -> frozenset[str]:
        """Scopes claimed exclusively for RDMA NICs."""
        return frozenset(scope for kind, scope in self.claims if kind == DEVICE_TYPE_RDMA)


def build_nic_usage(layout: NicLayout, usages: Iterable[NicPodUsage] = ()) -> NicUsage:
    """An idle :class:`NicUsage` for ``layout`` with ``usages`` applied."""
    idle = NicUsage(layout, (0,) * len(layout.nics), (0,) * len(layout.nics))
    return _shifted(idle, usages, 1)


def apply_nic_usage(usage: NicUsage, pods: Iterable[NicPodUsage]) -> NicUsage:
    """``usage`` with what ``pods`` hold added."""
    return _shifted(usage, pods, 1)


def remove_nic_usage(usage: NicUsage, pods: Iterable[NicPodUsage]) -> NicUsage:
    """``usage`` with what ``pods`` hold taken away: the exact inverse of :func:`apply_nic_usage`.

    Nothing goes below zero, so removing what was never applied cannot invent capacity.
    """
    return _shifted(usage, pods, -1)


def _shifted(usage: NicUsage, pods: Iterable[NicPodUsage], sign: int) -> NicUsage:
    layout = usage.layout
    units = list(usage.units)
    holders = list(usage.holders)
    vfs = dict(usage.vfs)
    claims = dict(usage.claims)
    changed = False
    for pod in pods:
        for hold in pod.holds:
            position = layout.positions.get(hold.nic)
            if position is None:
                continue
            changed = True
            units[position] = max(units[position] + sign * hold.units, 0)
            holders[position] = max(holders[position] + sign, 0)
            for bus_id in hold.vfs:
                _bump(vfs, bus_id, sign)
        for claim in pod.claims:
            changed = True
            _bump(claims, claim, sign)
    if not changed:
        return usage
    return NicUsage(
        layout, tuple(units), tuple(holders), _frozen_counts(vfs), _frozen_claims(claims)
    )


def _bump(counts: dict[_K, int], key: _K, sign: int) -> None:
    value = counts.get(key, 0) + sign
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)


def unknown_nics(layout: NicLayout, pod: NicPodUsage) -> tuple[str, ...]:
    """PF ids in ``pod`` that the node does not have (ignored by :func:`apply_nic_usage`)."""
    return tuple(hold.nic for hold in pod.holds if hold.nic not in layout.positions)


def claimed_gpus(usage: NicUsage, uuids: Iterable[str]) -> frozenset[str]:
    """Those of ``uuids`` that sit in a scope claimed exclusively for GPUs.

    Pods placed without :func:`~hami_scheduler.core.joint.decide.decide_joint` must keep off them
    too.
    """
    claimed = usage.gpu_claims
    if not claimed:
        return frozenset()
    layout = usage.layout
    return frozenset(uuid for uuid in uuids if layout.gpu_scope(uuid) in claimed)
