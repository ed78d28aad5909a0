"""Where the node's RDMA NICs come from: the :class:`NicSource` interface and its two sources.

A source discovers the NICs once (:meth:`NicSource.open`), then reports every later change (a
port went down, VFs were created) as a new complete list from :meth:`NicSource.updates`.  The
NIC inventory follows it (:func:`hami_deviceplugin.rdma.wiring.follow_nics`).  Blocking file
reads run in worker threads.

**sysfs** (:class:`SysfsNicSource`): :func:`~hami_deviceplugin.rdma.discovery.discover_nics`
under ``--sysfs-root``, rescanned every ``poll_interval`` seconds.  A missing
``bus/pci/devices`` directory at start is an error (sysfs is not mounted where we were told);
later scans never fail.

**fake** (:class:`FakeNicSource`): the ``nics`` list of the fake devices file
(:mod:`hami_deviceplugin.devices.fake_file`).  Entry shape (unknown keys are refused)::

    nics:
      - name: mlx5_0                  # required: the RDMA (ibdev) device name
        pci_bus_id: 0000:1f:00.0      # required: the PF's PCI bus id, the NIC's identity
        minor: 0                      # default: N of mlx<K>_<N>, else numbered after those
        numa: 0                       # default: from sysfs for pci_bus_id, else 0
        pcie_switch: 0000:1a:00.0     # default: from sysfs for pci_bus_id, else ""
        pcie_root: pci0000:17         # default: from sysfs for pci_bus_id, else ""
        healthy: true                 # default true
        labels: {type: fakeW}         # default {}; matched by a hint's selector
        uverbs: uverbs0               # default: from sysfs for pci_bus_id, else none
        vfs:                          # default []: SR-IOV off
          - bus_id: 0000:1f:00.2      # required
            minor: 0                  # default: position in the list
            labels: {type: general}   # default {}; VFs with equal labels form one VF group
            uverbs: uverbs4           # default: from sysfs for bus_id, else none

A NIC (or VF) without a uverbs device is still registered; allocating it fails.  The whole list
is checked as the register annotation would be (unique names, minors and addresses, label
syntax).  The file is re-read every ``poll_interval`` seconds and a changed list is reported; a
rewrite that does not parse is logged and ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from hami_deviceplugin.devices.fake_file import (
    UNHEALTHY_REASON,
    FakeFileSource,
    address_field,
    bool_field,
    entry_fields,
    fail,
    integer_field,
    list_field,
    parse_document,
    string_field,
)
from hami_deviceplugin.devices.sysfs import pcie_placement, read_numa_node
from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.rdma.discovery import discover_nics, read_uverbs
from hami_deviceplugin.rdma.nics import Nic, assign_minors, rdma_register_value, uverbs_name_ok
from hami_protocol.errors import ValidationError
from hami_protocol.topology.layout import RdmaNic, VirtualFunction, VirtualFunctionGroup

__all__ = [
    "FakeNic",
    "FakeNicSource",
    "FakeVf",
    "NicSource",
    "SysfsNicSource",
    "parse_fake_nics",
    "resolve_fake_nics",
]


class NicSource(Protocol):
    """Where the node's RDMA NICs come from (sysfs, or the fake devices file)."""

    @property
    def name(self) -> str: ...

    async def open(self) -> tuple[Nic, ...]:
        """Discover the NICs; raises :class:`~hami_deviceplugin.errors.BackendError` when the
        source cannot work."""
        ...

    def updates(self) -> AsyncIterator[tuple[Nic, ...]]:
        """Every later complete NIC list that differs from the previous one, until cancelled."""
        ...


# --- sysfs ----------------------------------------------------------------------------------------


class SysfsNicSource:
    def __init__(self, sysfs_root: Path, *, poll_interval: float = 10.0) -> None:
        self._root = sysfs_root
        self._poll = poll_interval
        self._nics: tuple[Nic, ...] = ()

    @property
    def name(self) -> str:
        return "sysfs"

    async def open(self) -> tuple[Nic, ...]:
        devices = self._root / "bus" / "pci" / "devices"
        if not await asyncio.to_thread(devices.is_dir):
            raise BackendError(f"RDMA discovery: {devices} is not a directory")
        self._nics = await asyncio.to_thread(discover_nics, self._root)
        return self._nics

    async def updates(self) -> AsyncIterator[tuple[Nic, ...]]:
        while True:
            await asyncio.sleep(self._poll)
            nics = await asyncio.to_thread(discover_nics, self._root)
            if nics != self._nics:
                self._nics = nics
                yield nics


# --- the fake devices file ------------------------------------------------------------------------

_NIC_KEYS: Final = frozenset(
    {
        "name",
        "pci_bus_id",
        "minor",
        "numa",
        "pcie_switch",
        "pcie_root",
        "healthy",
        "labels",
        "uverbs",
        "vfs",
    }
)
_VF_KEYS: Final = frozenset({"bus_id", "minor", "labels", "uverbs"})


@dataclass(frozen=True, slots=True)
class FakeVf:
    bus_id: str
    minor: int
    labels: tuple[tuple[str, str], ...]
    uverbs: str | None


@dataclass(frozen=True, slots=True)
class FakeNic:
    """One parsed entry; ``None`` fields are left to sysfs (or their documented default)."""

    name: str
    pci_bus_id: str
    minor: int | None
    numa: int | None
    pcie_switch: str | None
    pcie_root: str | None
    healthy: bool
    labels: tuple[tuple[str, str], ...]
    uverbs: str | None
    vfs: tuple[FakeVf, ...]


def _labels(entry: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    raw = entry.get("labels")
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise fail(where, "labels must map strings to strings (quote values like 'true')")
    return tuple(sorted(raw.items()))


def _uverbs(entry: Mapping[str, Any], where: str) -> str | None:
    if "uverbs" not in entry:
        return None
    name = string_field(entry, "uverbs", where)
    if not uverbs_name_ok(name):
        raise fail(where, f"uverbs must look like uverbs<N>, got {name!r}")
    return name


def _parse_vf(raw: object, position: int, where: str) -> FakeVf:
    where = f"{where}.vfs[{position}]"
    entry = entry_fields(raw, _VF_KEYS, where)
    bus_id = address_field(entry, "bus_id", where)
    if not bus_id:
        raise fail(where, "bus_id is required")
    minor = integer_field(entry, "minor", where)
    return FakeVf(
        bus_id=bus_id,
        minor=position if minor is None else minor,
        labels=_labels(entry, where),
        uverbs=_uverbs(entry, where),
    )


def _parse_nic(raw: object, position: int) -> FakeNic:
    where = f"nics[{position}]"
    entry = entry_fields(raw, _NIC_KEYS, where)
    bus_id = address_field(entry, "pci_bus_id", where)
    if not bus_id:
        raise fail(where, "pci_bus_id is required")
    vfs = entry.get("vfs")
    vfs = [] if vfs is None else vfs
    if not isinstance(vfs, list):
        raise fail(where, "vfs must be a list")
    return FakeNic(
        name=string_field(entry, "name", where, required=True),
        pci_bus_id=bus_id,
        minor=integer_field(entry, "minor", where),
        numa=integer_field(entry, "numa", where),
        pcie_switch=address_field(entry, "pcie_switch", where),
        pcie_root=address_field(entry, "pcie_root", where),
        healthy=bool_field(entry, "healthy", where, default=True),
        labels=_labels(entry, where),
        uverbs=_uverbs(entry, where),
        vfs=tuple(_parse_vf(vf, i, where) for i, vf in enumerate(vfs)),
    )


def parse_fake_nics(text: str) -> tuple[FakeNic, ...]:
    """The ``nics`` list of the fake devices file; raises
    :class:`~hami_deviceplugin.errors.FakeDevicesError`."""
    nics = list_field(parse_document(text), "nics")
    return tuple(_parse_nic(entry, position) for position, entry in enumerate(nics))


def _groups(vfs: tuple[FakeVf, ...]) -> tuple[VirtualFunctionGroup, ...]:
    grouped: dict[tuple[tuple[str, str], ...], list[VirtualFunction]] = {}
    for vf in vfs:
        grouped.setdefault(vf.labels, []).append(VirtualFunction(vf.bus_id, vf.minor))
    return tuple(
        VirtualFunctionGroup(vfs=tuple(members), labels=dict(labels))
        for labels, members in grouped.items()
    )


def _resolve(entry: FakeNic, minor: int, sysfs_root: Path) -> Nic:
    numa, switch, root = entry.numa, entry.pcie_switch, entry.pcie_root
    if numa is None or switch is None or root is None:
        placement = pcie_placement(sysfs_root, entry.pci_bus_id)
        numa = read_numa_node(sysfs_root, entry.pci_bus_id) if numa is None else numa
        switch = placement.pcie_switch if switch is None else switch
        root = placement.pcie_root if root is None else root
    uverbs = entry.uverbs if entry.uverbs is not None else read_uverbs(sysfs_root, entry.pci_bus_id)
    vf_uverbs = {
        vf.bus_id: vf.uverbs if vf.uverbs is not None else read_uverbs(sysfs_root, vf.bus_id)
        for vf in entry.vfs
    }
    return Nic(
        info=RdmaNic(
            id=entry.pci_bus_id,
            name=entry.name,
            minor=minor,
            numa=numa,
            pcie_switch=switch,
            pcie_root=root,
            healthy=entry.healthy,
            labels=dict(entry.labels),
            vf_groups=_groups(entry.vfs),
        ),
        uverbs=uverbs,
        vf_uverbs={bus_id: name for bus_id, name in vf_uverbs.items() if name},
        reason="" if entry.healthy else UNHEALTHY_REASON,
    )


def resolve_fake_nics(entries: tuple[FakeNic, ...], sysfs_root: Path) -> tuple[Nic, ...]:
    """The NICs of parsed entries, sysfs filling what they leave open; ordered by minor.

    Raises :class:`~hami_deviceplugin.errors.FakeDevicesError` for a list the register
    annotation would refuse.
    """
    fixed = {e.pci_bus_id: e.minor for e in entries if e.minor is not None}
    if len(set(fixed.values())) != len(fixed):
        raise fail("nics", "every NIC needs a distinct minor")
    minors = assign_minors(((e.pci_bus_id, e.name) for e in entries), fixed=fixed)
    nics = tuple(_resolve(e, minors[e.pci_bus_id], sysfs_root) for e in entries)
    try:
        rdma_register_value(nics)
    except ValidationError as exc:
        raise fail("nics", exc.reason) from None
    return tuple(sorted(nics, key=lambda nic: (nic.info.minor, nic.id)))


class FakeNicSource(FakeFileSource[tuple[Nic, ...]]):
    """NICs from the fake devices file, re-read when it changes."""

    _rejected = "fake NICs rejected, keeping the previous list"

    def __init__(self, path: Path, *, sysfs_root: Path, poll_interval: float = 1.0) -> None:
        super().__init__(path, sysfs_root=sysfs_root, poll_interval=poll_interval)
        self._nics: tuple[Nic, ...] = ()

    def _parse(self, text: str) -> tuple[Nic, ...]:
        return resolve_fake_nics(parse_fake_nics(text), self._sysfs)

    async def open(self) -> tuple[Nic, ...]:
        self._nics = await self._open_file()
        return self._nics

    async def updates(self) -> AsyncIterator[tuple[Nic, ...]]:
        async for nics in self._rewrites():
            if nics != self._nics:
                self._nics = nics
                yield nics
