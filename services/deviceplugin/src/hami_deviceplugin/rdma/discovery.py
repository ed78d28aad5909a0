"""RDMA NICs and their SR-IOV virtual functions, discovered in sysfs (under ``--sysfs-root``).

A PCI device under ``<root>/bus/pci/devices/<bdf>`` is an RDMA NIC when

* its ``class`` is a network controller (base class ``0x02``),
* it is not itself a VF (no ``physfn`` link), and
* it has an ``infiniband/`` directory with at least one RDMA device in it.

For each such physical function (PF):

* **name**: the first entry of ``infiniband/`` by name (the PF's own device, e.g. ``mlx5_0``);
  the minor follows :func:`~hami_deviceplugin.rdma.nics.assign_minors` (any driver, not only
  Mellanox);
* **NUMA node** and **PCIe switch / root complex**: :mod:`hami_deviceplugin.devices.sysfs`, the
  same walk the GPUs use, so a GPU and a NIC under one switch report the same switch id;
* **health**: every ``<root>/class/infiniband/<name>/ports/*/state`` contains ``ACTIVE`` (the
  PF's own ``infiniband/<name>/ports`` when the class directory is missing).  A device without
  ports is unhealthy;
* **VFs**: the ``virtfn<N>`` links of the PF, ordered by N; a VF's bus id is its link target's
  name and its minor is N.  They form one VF group without labels;
* **uverbs devices**: the first entry of ``infiniband_verbs/`` of the PF and of each VF.

Plain blocking file reads: callers run :func:`discover_nics` in a thread.  A device that vanishes
or cannot be read while it is being looked at is left out; nothing here raises for the contents
of sysfs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from hami_deviceplugin.devices.sysfs import pci_device_dir, pcie_placement, read_numa_node
from hami_deviceplugin.rdma.nics import Nic, assign_minors, rdma_register_value, uverbs_name_ok
from hami_protocol.errors import ValidationError
from hami_protocol.topology.layout import (
    RdmaNic,
    VirtualFunction,
    VirtualFunctionGroup,
    normalize_pci_bus_id,
)

__all__ = ["NETWORK_CONTROLLER_CLASS", "discover_nics", "port_health", "read_uverbs"]

log = structlog.get_logger(__name__)

NETWORK_CONTROLLER_CLASS: Final = 0x02
_VIRTFN_RE: Final = re.compile(r"virtfn(\d+)")


@dataclass(frozen=True, slots=True)
class _Found:
    bus_id: str
    name: str
    uverbs: str
    numa: int
    pcie_switch: str
    pcie_root: str
    healthy: bool
    reason: str
    vfs: tuple[tuple[VirtualFunction, str], ...]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _entries(path: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(path))
    except OSError:
        return []


def _is_network_controller(device: Path) -> bool:
    text = _read(device / "class")
    if text is None:
        return False
    try:
        code = int(text, 16)
    except ValueError:
        return False
    return code >> 16 == NETWORK_CONTROLLER_CLASS


def _first_uverbs(device: Path) -> str:
    return next(
        (name for name in _entries(device / "infiniband_verbs") if uverbs_name_ok(name)), ""
    )


def read_uverbs(sysfs_root: Path, bus_id: str) -> str:
    """The uverbs device name of PCI function ``bus_id`` ("" when it has none)."""
    return _first_uverbs(pci_device_dir(sysfs_root, bus_id))


def port_health(sysfs_root: Path, device: Path, ibdev: str) -> tuple[bool, str]:
    """``(healthy, reason)``: every port of ``ibdev`` is ``ACTIVE``."""
    ports = sysfs_root / "class" / "infiniband" / ibdev / "ports"
    if not ports.is_dir():
        ports = device / "infiniband" / ibdev / "ports"
    names = _entries(ports)
    if not names:
        return False, f"{ibdev} has no ports"
    for port in names:
        state = _read(ports / port / "state")
        if state is None:
            return False, f"{ibdev} port {port}: state unreadable"
        if "ACTIVE" not in state:
            return False, f"{ibdev} port {port} is {state!r}"
    return True, ""


def _vfs(device: Path) -> tuple[tuple[VirtualFunction, str], ...]:
    links: list[tuple[int, str]] = []
    for entry in _entries(device):
        match = _VIRTFN_RE.fullmatch(entry)
        if match is not None:
            links.append((int(match.group(1)), entry))
    found: list[tuple[VirtualFunction, str]] = []
    for number, entry in sorted(links):
        link = device / entry
        try:
            bus_id = normalize_pci_bus_id(Path(os.path.realpath(link, strict=True)).name)
        except (OSError, ValidationError):
            continue
        found.append((VirtualFunction(bus_id=bus_id, minor=number), _first_uverbs(link)))
    return tuple(found)


def _inspect(sysfs_root: Path, bus_id: str) -> _Found | None:
    device = pci_device_dir(sysfs_root, bus_id)
    if not _is_network_controller(device) or os.path.lexists(device / "physfn"):
        return None
    ibdevs = _entries(device / "infiniband")
    if not ibdevs:
        return None
    name = ibdevs[0]
    healthy, reason = port_health(sysfs_root, device, name)
    placement = pcie_placement(sysfs_root, bus_id)
    return _Found(
        bus_id=bus_id,
        name=name,
        uverbs=_first_uverbs(device),
        numa=read_numa_node(sysfs_root, bus_id),
        pcie_switch=placement.pcie_switch,
        pcie_root=placement.pcie_root,
        healthy=healthy,
        reason=reason,
        vfs=_vfs(device),
    )


def _nic(found: _Found, minor: int) -> Nic:
    vfs = tuple(vf for vf, _ in found.vfs)
    return Nic(
        info=RdmaNic(
            id=found.bus_id,
            name=found.name,
            minor=minor,
            numa=found.numa,
            pcie_switch=found.pcie_switch,
            pcie_root=found.pcie_root,
            healthy=found.healthy,
            vf_groups=(VirtualFunctionGroup(vfs=vfs),) if vfs else (),
        ),
        uverbs=found.uverbs,
        vf_uverbs={vf.bus_id: uverbs for vf, uverbs in found.vfs if uverbs},
        reason=found.reason,
    )


def _valid(nic: Nic) -> bool:
    try:
        rdma_register_value([nic])
    except ValidationError as exc:
        log.warning("RDMA NIC left out: not registrable", nic=nic.id, error=str(exc))
        return False
    return True


def discover_nics(sysfs_root: Path) -> tuple[Nic, ...]:
    """Every RDMA NIC PF under ``sysfs_root``, ordered by minor."""
    found: list[_Found] = []
    for entry in _entries(sysfs_root / "bus" / "pci" / "devices"):
        try:
            bus_id = normalize_pci_bus_id(entry)
        except ValidationError:
            continue
        nic = _inspect(sysfs_root, bus_id)
        if nic is not None:
            found.append(nic)
    minors = assign_minors((nic.bus_id, nic.name) for nic in found)
    nics = [nic for nic in (_nic(f, minors[f.bus_id]) for f in found) if _valid(nic)]
    return tuple(sorted(nics, key=lambda nic: (nic.info.minor, nic.id)))
