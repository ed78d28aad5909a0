"""A fake sysfs tree for tests: PCI devices under ``devices/pci<dom>:<bus>/...``, the
``bus/pci/devices/<bdf>`` links into it, RDMA devices with ports, uverbs devices and SR-IOV VFs.

:func:`gpu_node` builds a GPU server: 8 GPUs and 4 RDMA NICs on 4 PCIe switches, two switches
per root complex, one root complex per NUMA node, each NIC with 4 VFs.  Links are relative, as in
the real sysfs, so discovery must resolve them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GPU_CLASS = "0x030200"
NIC_CLASS = "0x020000"
BRIDGE_CLASS = "0x060400"


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


class FakeSysfs:
    """Builds the tree under ``root`` (the value of ``--sysfs-root``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        (root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)

    def device(self, *path: str, pci_class: str, numa: int | None = 0) -> Path:
        """``path`` = root complex, bridges..., the device: creates each missing level (bridges
        get the bridge class), its ``class`` and ``numa_node`` files and its bus link."""
        current = self.root / "devices" / path[0]
        for depth, name in enumerate(path[1:], start=1):
            current = current / name
            if current.exists():
                continue
            current.mkdir(parents=True)
            last = depth == len(path) - 1
            (current / "class").write_text(f"{pci_class if last else BRIDGE_CLASS}\n")
            if numa is not None:
                (current / "numa_node").write_text(f"{numa}\n")
            _link(self.root / "bus" / "pci" / "devices" / name, current)
        return current

    def gpu(self, *path: str, numa: int | None = 0) -> Path:
        return self.device(*path, pci_class=GPU_CLASS, numa=numa)

    def ibdev(self, device: Path, name: str, ports: Sequence[str]) -> None:
        """An RDMA device ``name`` of ``device`` with one port per state (``4: ACTIVE``)."""
        ib = device / "infiniband" / name
        (ib / "ports").mkdir(parents=True)
        for number, state in enumerate(ports, start=1):
            port = ib / "ports" / str(number)
            port.mkdir()
            (port / "state").write_text(f"{state}\n")
        _link(self.root / "class" / "infiniband" / name, ib)

    def nic(
        self,
        *path: str,
        ibdev: str,
        uverbs: int | None,
        numa: int | None = 0,
        ports: Sequence[str] = ("4: ACTIVE",),
        vfs: Sequence[tuple[str, int]] = (),
        vf_numbers: Sequence[int] | None = None,
    ) -> Path:
        """A NIC PF at ``path`` with VFs ``(bus id, uverbs number)`` created as siblings and
        linked as ``virtfn<N>`` (N from ``vf_numbers``, default 0, 1, ...)."""
        device = self.device(*path, pci_class=NIC_CLASS, numa=numa)
        self.ibdev(device, ibdev, ports)
        if uverbs is not None:
            (device / "infiniband_verbs" / f"uverbs{uverbs}").mkdir(parents=True)
        (device / "sriov_numvfs").write_text(f"{len(vfs)}\n")
        numbers = list(range(len(vfs))) if vf_numbers is None else list(vf_numbers)
        for number, (bus_id, vf_uverbs) in zip(numbers, vfs, strict=True):
            vf = self.device(*path[:-1], bus_id, pci_class=NIC_CLASS, numa=numa)
            _link(vf / "physfn", device)
            _link(device / f"virtfn{number}", vf)
            (vf / "infiniband_verbs" / f"uverbs{vf_uverbs}").mkdir(parents=True)
            # VFs have RDMA devices of their own; discovery must not take them for NICs.
            self.ibdev(vf, f"mlx5_{vf_uverbs}", ("4: ACTIVE",))
        return device


@dataclass(frozen=True, slots=True)
class PlacedGpu:
    bus_id: str
    switch: str
    root: str
    numa: int


@dataclass(frozen=True, slots=True)
class PlacedNic:
    bus_id: str
    name: str
    uverbs: str
    switch: str
    root: str
    numa: int
    vfs: tuple[tuple[str, str], ...]
    """``(bus id, uverbs name)`` in virtfn order."""


@dataclass(frozen=True, slots=True)
class GpuNode:
    sysfs: FakeSysfs
    gpus: tuple[PlacedGpu, ...]
    nics: tuple[PlacedNic, ...]


# (root complex, root port, switch upstream port, downstream bus, GPU buses, NIC bus)
_SWITCHES = (
    ("pci0000:15", "0000:15:01.0", "0000:16:00.0", "17", ("18", "19"), "1a"),
    ("pci0000:15", "0000:15:02.0", "0000:26:00.0", "27", ("28", "29"), "2a"),
    ("pci0000:95", "0000:95:01.0", "0000:96:00.0", "97", ("98", "99"), "9a"),
    ("pci0000:95", "0000:95:02.0", "0000:a6:00.0", "a7", ("a8", "a9"), "aa"),
)


def gpu_node(root: Path) -> GpuNode:
    """8 GPUs + 4 NICs (mlx5_0..3, 4 VFs each) on 4 switches, 2 root complexes, 2 NUMA nodes."""
    sysfs = FakeSysfs(root)
    gpus: list[PlacedGpu] = []
    nics: list[PlacedNic] = []
    for number, (complex_, port, upstream, downstream, gpu_buses, nic_bus) in enumerate(_SWITCHES):
        numa = 0 if complex_ == "pci0000:15" else 1
        for slot, bus in enumerate(gpu_buses):
            bus_id = f"0000:{bus}:00.0"
            sysfs.gpu(complex_, port, upstream, f"0000:{downstream}:0{slot}.0", bus_id, numa=numa)
            gpus.append(PlacedGpu(bus_id, upstream, complex_, numa))
        pf = f"0000:{nic_bus}:00.0"
        vf_uverbs = [4 + 4 * number + i for i in range(4)]
        vfs = [(f"0000:{nic_bus}:00.{i + 1}", vf_uverbs[i]) for i in range(4)]
        sysfs.nic(
            complex_,
            port,
            upstream,
            f"0000:{downstream}:02.0",
            pf,
            ibdev=f"mlx5_{number}",
            uverbs=number,
            numa=numa,
            vfs=vfs,
        )
        nics.append(
            PlacedNic(
                bus_id=pf,
                name=f"mlx5_{number}",
                uverbs=f"uverbs{number}",
                switch=upstream,
                root=complex_,
                numa=numa,
                vfs=tuple((bus_id, f"uverbs{n}") for bus_id, n in vfs),
            )
        )
    return GpuNode(sysfs=sysfs, gpus=tuple(gpus), nics=tuple(nics))
