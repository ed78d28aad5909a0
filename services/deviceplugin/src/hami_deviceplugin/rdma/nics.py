"""Pure: the node's RDMA NICs as the plugin knows them, and what it derives from them.

A :class:`Nic` is the protocol's :class:`~hami_protocol.topology.layout.RdmaNic` (what the node
annotation ``hami.io/node-rdma-register`` carries) plus what only this node needs: the uverbs
character device of the physical function and of each SR-IOV virtual function, and why an
unhealthy NIC is unhealthy.

Conventions shared by every NIC source (sysfs discovery and the fake backend):

* **Minor** (:func:`assign_minors`): ``mlx<K>_<N>`` names give N, as Koordinator numbers them;
  every other name (``irdma0``, ``bnxt_re0``, ...) and every Mellanox number already taken is
  numbered after the highest Mellanox number, in PCI bus-id order.  Unlike Koordinator, no NIC is
  skipped for its name.
* **Advertising** (:func:`rdma_plugin_devices`): each NIC is :data:`RDMA_UNITS_PER_NIC` (100)
  kubelet devices ``<PF bus id>-<i>``, i = 0..99, all with the NIC's health, so the node's
  ``koordinator.sh/rdma`` capacity is 100 per NIC, as Koordinator's Device CR states it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from hami_deviceplugin.gpu.replicas import PluginDevice
from hami_protocol.topology.layout import RDMA_UNITS_PER_NIC, RdmaNic, encode_rdma_register

__all__ = [
    "RDMA_CM_DEVICE",
    "RDMA_UNITS_PER_NIC",
    "Nic",
    "NicFunction",
    "assign_minors",
    "function_index",
    "mellanox_minor",
    "nic_replica_id",
    "rdma_plugin_devices",
    "rdma_register_value",
    "uverbs_name_ok",
]

"""Kubelet devices (and ``koordinator.sh/rdma`` units) per NIC: Koordinator's capacity."""
RDMA_CM_DEVICE: Final = "/dev/infiniband/rdma_cm"
_MELLANOX_RE: Final = re.compile(r"mlx\d+_(\d+)")
_UVERBS_RE: Final = re.compile(r"uverbs\d{1,9}")
_INT32_MAX: Final = 2**31 - 1


def mellanox_minor(name: str) -> int | None:
    """N of a Mellanox ibdev name ``mlx<K>_<N>`` (``mlx5_3`` → 3); None for other names."""
    match = _MELLANOX_RE.fullmatch(name)
    if match is None:
        return None
    number = int(match.group(1))
    return number if number <= _INT32_MAX else None


def uverbs_name_ok(name: str) -> bool:
    """``uverbs<N>``: the only names that become ``/dev/infiniband/<name>``."""
    return _UVERBS_RE.fullmatch(name) is not None


def assign_minors(
    nics: Iterable[tuple[str, str]], *, fixed: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Bus id → minor for ``(bus id, ibdev name)`` pairs (see the module docstring).

    ``fixed`` minors (by bus id) are kept as given and count as taken.
    """
    pinned = dict(fixed or {})
    pairs = sorted(nics)
    taken = set(pinned.values())
    minors: dict[str, int] = {}
    for bus_id, name in pairs:
        if bus_id in pinned:
            minors[bus_id] = pinned[bus_id]
            continue
        number = mellanox_minor(name)
        if number is not None and number not in taken:
            minors[bus_id] = number
            taken.add(number)
    following = max(taken, default=-1) + 1
    for bus_id, _ in pairs:
        if bus_id not in minors:
            while following in taken:
                following += 1
            minors[bus_id] = following
            taken.add(following)
    return minors


@dataclass(frozen=True, slots=True)
class Nic:
    """One RDMA NIC: its registered description and its uverbs devices.

    ``uverbs`` is the physical function's uverbs device name (``uverbs3``), ``vf_uverbs`` maps a
    VF bus id to its uverbs device name; "" or a missing entry means none was found.
    """

    info: RdmaNic
    uverbs: str = ""
    vf_uverbs: Mapping[str, str] = field(default_factory=dict, hash=False)
    reason: str = ""
    """Why the NIC is unhealthy ("" when healthy)."""

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def healthy(self) -> bool:
        return self.info.healthy


@dataclass(frozen=True, slots=True)
class NicFunction:
    """A PCI function a container can be given: a NIC's PF or one of its VFs."""

    bus_id: str
    nic_id: str
    nic_name: str
    uverbs: str
    vf_minor: int | None = None
    """N of ``virtfnN`` for a VF; None for the physical function."""

    @property
    def is_vf(self) -> bool:
        return self.vf_minor is not None


def function_index(nics: Iterable[Nic]) -> dict[str, NicFunction]:
    """Every PF and VF bus id of ``nics`` → the function."""
    index: dict[str, NicFunction] = {}
    for nic in nics:
        index[nic.id] = NicFunction(nic.id, nic.id, nic.name, nic.uverbs)
        for vf in nic.info.vfs:
            index[vf.bus_id] = NicFunction(
                vf.bus_id, nic.id, nic.name, nic.vf_uverbs.get(vf.bus_id, ""), vf.minor
            )
    return index


def rdma_register_value(nics: Sequence[Nic]) -> str:
    """The ``hami.io/node-rdma-register`` value (NICs by minor); raises ValidationError."""
    ordered = sorted(nics, key=lambda nic: (nic.info.minor, nic.id))
    return encode_rdma_register([nic.info for nic in ordered])


def nic_replica_id(nic_id: str, number: int) -> str:
    return f"{nic_id}-{number}"


def rdma_plugin_devices(
    nics: Iterable[Nic], *, numa_topology: bool, units: int = RDMA_UNITS_PER_NIC
) -> tuple[PluginDevice, ...]:
    """``units`` kubelet devices per NIC, NIC by NIC, with the NIC's health (and NUMA node)."""
    return tuple(
        PluginDevice(
            id=nic_replica_id(nic.id, number),
            healthy=nic.healthy,
            numa=nic.info.numa if numa_topology else None,
        )
        for nic in nics
        for number in range(units)
    )
