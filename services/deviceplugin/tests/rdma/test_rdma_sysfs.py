"""RDMA NIC discovery and the shared PCIe walk against a fake sysfs tree."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from hami_deviceplugin.devices.sysfs import PciePlacement, pcie_placement, read_numa_node
from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.rdma.discovery import discover_nics, port_health
from hami_deviceplugin.rdma.nics import assign_minors, function_index, mellanox_minor
from hami_deviceplugin.rdma.sources import SysfsNicSource
from hami_protocol.topology.layout import VirtualFunction

from ..helpers import write_atomically
from .fake_sysfs import NIC_CLASS, FakeSysfs, GpuNode, gpu_node


@pytest.fixture
def node(tmp_path: Path) -> GpuNode:
    return gpu_node(tmp_path / "sys")


def test_gpu_node_nics_and_vfs(node: GpuNode) -> None:
    nics = discover_nics(node.sysfs.root)
    assert [(n.id, n.name, n.info.minor) for n in nics] == [
        (p.bus_id, p.name, i) for i, p in enumerate(node.nics)
    ]
    for nic, placed in zip(nics, node.nics, strict=True):
        assert nic.healthy
        assert nic.reason == ""
        assert (nic.info.pcie_switch, nic.info.pcie_root, nic.info.numa) == (
            placed.switch,
            placed.root,
            placed.numa,
        )
        assert nic.uverbs == placed.uverbs
        (group,) = nic.info.vf_groups
        assert dict(group.labels) == {}
        assert group.vfs == tuple(
            VirtualFunction(bus_id, minor) for minor, (bus_id, _) in enumerate(placed.vfs)
        )
        assert dict(nic.vf_uverbs) == dict(placed.vfs)
    # VFs are never NICs of their own, although they have RDMA devices.
    assert len(nics) == 4


def test_gpus_and_nics_agree_on_switches(node: GpuNode) -> None:
    nics = discover_nics(node.sysfs.root)
    switches = {nic.info.pcie_switch for nic in nics}
    for gpu in node.gpus:
        placement = pcie_placement(node.sysfs.root, gpu.bus_id)
        assert placement == PciePlacement(gpu.switch, gpu.root)
        assert placement.pcie_switch in switches
        assert read_numa_node(node.sysfs.root, gpu.bus_id) == gpu.numa
    assert len(switches) == 4


def test_function_index_maps_pfs_and_vfs(node: GpuNode) -> None:
    index = function_index(discover_nics(node.sysfs.root))
    assert len(index) == 4 * 5
    pf = index["0000:1a:00.0"]
    assert (pf.nic_id, pf.uverbs, pf.is_vf) == ("0000:1a:00.0", "uverbs0", False)
    vf = index["0000:2a:00.3"]
    assert (vf.nic_id, vf.nic_name, vf.uverbs, vf.vf_minor) == (
        "0000:2a:00.0",
        "mlx5_1",
        "uverbs10",
        2,
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        # Root port → switch (upstream, downstream) → endpoint: the upstream port.
        (
            ("pci0000:40", "0000:40:01.0", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"),
            PciePlacement("0000:41:00.0", "pci0000:40"),
        ),
        # Cascaded switches: the switch right below the root port.
        (
            (
                "pci0000:50",
                "0000:50:01.0",
                "0000:51:00.0",
                "0000:52:00.0",
                "0000:53:00.0",
                "0000:54:00.0",
                "0000:55:00.0",
            ),
            PciePlacement("0000:51:00.0", "pci0000:50"),
        ),
        # One bridge below the root port: not a switch, the root port groups.
        (
            ("pci0000:60", "0000:60:01.0", "0000:61:00.0", "0000:62:00.0"),
            PciePlacement("0000:60:01.0", "pci0000:60"),
        ),
        # Directly on a root port: the root port.
        (
            ("pci0000:70", "0000:70:02.0", "0000:71:00.0"),
            PciePlacement("0000:70:02.0", "pci0000:70"),
        ),
        # An integrated endpoint on the root bus: no switch, only the root complex.
        (("pci0000:00", "0000:00:1f.6"), PciePlacement("", "pci0000:00")),
    ],
)
def test_switch_walk(tmp_path: Path, path: tuple[str, ...], expected: PciePlacement) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.gpu(*path)
    assert pcie_placement(sysfs.root, path[-1]) == expected


def test_non_mellanox_names_minors_and_numa(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.nic("pci0000:15", "0000:15:03.0", "0000:3b:00.0", ibdev="irdma0", uverbs=7, numa=-1)
    sysfs.nic("pci0000:15", "0000:15:04.0", "0000:3c:00.0", ibdev="mlx5_2", uverbs=2)
    sysfs.nic("pci0000:15", "0000:15:05.0", "0000:3d:00.0", ibdev="bnxt_re0", uverbs=8)
    sysfs.nic("pci0000:15", "0000:15:06.0", "0000:3e:00.0", ibdev="mlx4_2", uverbs=9)
    nics = discover_nics(sysfs.root)
    assert [(n.name, n.info.minor) for n in nics] == [
        ("mlx5_2", 2),
        ("irdma0", 3),  # bus-id order after the Mellanox numbers
        ("bnxt_re0", 4),
        ("mlx4_2", 5),  # its number is taken by an earlier bus id
    ]
    irdma = nics[1]
    assert irdma.info.numa == 0  # -1: the platform does not say
    assert (irdma.info.pcie_switch, irdma.info.pcie_root) == ("0000:15:03.0", "pci0000:15")
    assert irdma.uverbs == "uverbs7"
    assert irdma.info.vf_groups == ()


def test_skipped_devices(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    # An Ethernet controller without RDMA.
    sysfs.device("pci0000:15", "0000:15:01.0", "0000:16:00.0", pci_class=NIC_CLASS)
    # Not a network controller, although it has an RDMA device.
    accelerator = sysfs.device("pci0000:15", "0000:15:02.0", "0000:17:00.0", pci_class="0x120000")
    sysfs.ibdev(accelerator, "hfi1_0", ("4: ACTIVE",))
    # A network controller with an empty infiniband directory.
    empty = sysfs.device("pci0000:15", "0000:15:03.0", "0000:18:00.0", pci_class=NIC_CLASS)
    (empty / "infiniband").mkdir()
    assert discover_nics(sysfs.root) == ()


def test_vfs_are_ordered_by_number_not_name(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    # virtfn<N> points at a bus id that falls as N grows, so neither name nor bus-id order
    # gives N order.
    vfs = [(f"0000:3b:{n // 8:02x}.{n % 8}", 20 + n) for n in range(12, 0, -1)]
    sysfs.nic("pci0000:15", "0000:15:01.0", "0000:3b:00.0", ibdev="mlx5_0", uverbs=0, vfs=vfs)
    (nic,) = discover_nics(sysfs.root)
    assert [(vf.minor, vf.bus_id) for vf in nic.info.vf_groups[0].vfs] == [
        (n, bus_id) for n, (bus_id, _) in enumerate(vfs)
    ]
    assert nic.vf_uverbs["0000:3b:01.3"] == "uverbs31"


def test_port_health(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    down = sysfs.nic(
        "pci0000:15",
        "0000:15:01.0",
        "0000:3b:00.0",
        ibdev="mlx5_0",
        uverbs=0,
        ports=("4: ACTIVE", "1: DOWN"),
    )
    polling = sysfs.nic(
        "pci0000:15", "0000:15:02.0", "0000:3c:00.0", ibdev="mlx5_1", uverbs=1, ports=("2: INIT",)
    )
    no_ports = sysfs.nic(
        "pci0000:15", "0000:15:03.0", "0000:3d:00.0", ibdev="mlx5_2", uverbs=2, ports=()
    )
    assert port_health(sysfs.root, down, "mlx5_0") == (False, "mlx5_0 port 2 is '1: DOWN'")
    assert port_health(sysfs.root, polling, "mlx5_1") == (False, "mlx5_1 port 1 is '2: INIT'")
    assert port_health(sysfs.root, no_ports, "mlx5_2") == (False, "mlx5_2 has no ports")
    nics = discover_nics(sysfs.root)
    assert [(n.healthy, n.reason) for n in nics] == [
        (False, "mlx5_0 port 2 is '1: DOWN'"),
        (False, "mlx5_1 port 1 is '2: INIT'"),
        (False, "mlx5_2 has no ports"),
    ]
    # Without /sys/class/infiniband the PF's own directory is read.
    (sysfs.root / "class" / "infiniband" / "mlx5_0").unlink()
    assert port_health(sysfs.root, down, "mlx5_0") == (False, "mlx5_0 port 2 is '1: DOWN'")


def test_missing_uverbs_is_reported_empty(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.nic("pci0000:15", "0000:15:01.0", "0000:3b:00.0", ibdev="mlx5_0", uverbs=None)
    (nic,) = discover_nics(sysfs.root)
    assert nic.uverbs == ""


@pytest.mark.parametrize(
    ("name", "minor"),
    [("mlx5_0", 0), ("mlx5_13", 13), ("mlx4_2", 2), ("mlx5_bond_0", None), ("irdma1", None)],
)
def test_mellanox_minor(name: str, minor: int | None) -> None:
    assert mellanox_minor(name) == minor


def test_assign_minors_keeps_fixed_ones() -> None:
    pairs = [("0000:01:00.0", "irdma0"), ("0000:02:00.0", "mlx5_0"), ("0000:03:00.0", "x")]
    assert assign_minors(pairs, fixed={"0000:03:00.0": 1}) == {
        "0000:01:00.0": 2,
        "0000:02:00.0": 0,
        "0000:03:00.0": 1,
    }


async def test_sysfs_source_reports_changes(node: GpuNode) -> None:
    source = SysfsNicSource(node.sysfs.root, poll_interval=0.02)
    first = await source.open()
    assert all(n.healthy for n in first)
    updates = source.updates()
    state = node.sysfs.root / "class" / "infiniband" / "mlx5_3" / "ports" / "1" / "state"
    write_atomically(state, "1: DOWN\n")  # as sysfs shows it: never an empty state file
    async with asyncio.timeout(30):
        changed = await anext(updates)
    assert [n.healthy for n in changed] == [True, True, True, False]
    await updates.aclose()  # type: ignore[attr-defined]


async def test_sysfs_source_needs_sysfs(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="not a directory"):
        await SysfsNicSource(tmp_path / "nothing").open()


async def test_nvml_smoke_prints_the_nics(
    node: GpuNode, capsys: pytest.CaptureFixture[str]
) -> None:
    from hami_deviceplugin.gpu.nvml_smoke import smoke
    from hami_protocol.config.node import NodeSettings

    from ..fake_pynvml import FakeGpu, FakeNvml

    bus_id = node.gpus[0].bus_id.upper().replace("0000:", "00000000:", 1).encode()
    nvml = FakeNvml([FakeGpu(uuid="GPU-a", name="H100", total=80 << 30, bus_id=bus_id)])
    assert await smoke(sysfs_root=node.sysfs.root, node=NodeSettings(), nvml=nvml) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    gpu = next(line["data"] for line in lines if line["kind"] == "gpu")
    nics = [line["data"] for line in lines if line["kind"] == "nic"]
    assert [n["name"] for n in nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert gpu["pcie_switch"] == nics[0]["pcie_switch"] == "0000:16:00.0"
    assert nics[0]["vfs"][0] == {"bus_id": "0000:1a:00.1", "minor": 0, "uverbs": "uverbs4"}
    register = next(line["data"] for line in lines if line["kind"] == "rdma_register")
    assert len(register["nics"]) == 4


def test_odd_sysfs_contents_never_raise(tmp_path: Path) -> None:
    sysfs = FakeSysfs(tmp_path / "sys")
    odd = sysfs.nic(
        "pci0000:15",
        "0000:15:01.0",
        "0000:3b:00.0",
        ibdev="mlx5_0",
        uverbs=0,
        vfs=[("0000:3b:00.1", 5)],
    )
    (odd / "numa_node").write_text("not a number\n")
    (odd / "virtfn7").symlink_to("../0000:3b:09.9")  # dangling
    (odd / "virtfn8").symlink_to("../not-a-bdf")
    state = sysfs.root / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "state"
    state.unlink()
    state.mkdir()  # unreadable as a file
    garbage = sysfs.device("pci0000:15", "0000:15:02.0", "0000:3c:00.0", pci_class="0xzz")
    sysfs.ibdev(garbage, "mlx5_1", ("4: ACTIVE",))
    (sysfs.root / "bus" / "pci" / "devices" / "not-a-device").mkdir()
    (nic,) = discover_nics(sysfs.root)
    assert nic.info.numa == 0
    assert [vf.bus_id for vf in nic.info.vfs] == ["0000:3b:00.1"]
    assert (nic.healthy, nic.reason) == (False, "mlx5_0 port 1: state unreadable")
