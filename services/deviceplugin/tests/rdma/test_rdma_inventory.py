"""Fake-backend NICs, the RDMA register annotation, advertising and the NIC inventory."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hami_deviceplugin.devices.fake_file import UNHEALTHY_REASON
from hami_deviceplugin.errors import FakeDevicesError
from hami_deviceplugin.metrics import PluginMetrics
from hami_deviceplugin.node.register import annotations_to_write
from hami_deviceplugin.rdma.discovery import discover_nics
from hami_deviceplugin.rdma.inventory import NicInventory
from hami_deviceplugin.rdma.nics import (
    RDMA_UNITS_PER_NIC,
    Nic,
    rdma_plugin_devices,
    rdma_register_value,
)
from hami_deviceplugin.rdma.sources import FakeNicSource, parse_fake_nics, resolve_fake_nics
from hami_protocol.keys import NVIDIA_HANDSHAKE, NVIDIA_REGISTER, RDMA_REGISTER
from hami_protocol.topology.layout import RdmaNic, VirtualFunction, decode_rdma_register

from ..helpers import eventually, write_devices
from .fake_sysfs import gpu_node

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

NICS_YAML = """
nics:
  - name: mlx5_1
    pci_bus_id: "0000:1F:00.0"
    numa: 0
    pcie_switch: "0000:1a:00.0"
    pcie_root: pci0000:17
    labels: {type: fakeW}
    uverbs: uverbs1
    vfs:
      - {bus_id: "0000:1f:00.2", labels: {type: general}, uverbs: uverbs8}
      - {bus_id: "0000:1f:00.3", minor: 1, labels: {type: general}, uverbs: uverbs9}
      - {bus_id: "0000:1f:00.4"}
  - name: irdma0
    pci_bus_id: "0000:90:00.0"
    numa: 1
    healthy: false
"""


def test_fake_nics_parse_and_resolve(tmp_path: Path) -> None:
    nics = resolve_fake_nics(parse_fake_nics(NICS_YAML), tmp_path / "no-sysfs")
    first, second = nics
    assert first.info == RdmaNic(
        id="0000:1f:00.0",
        name="mlx5_1",
        minor=1,
        numa=0,
        pcie_switch="0000:1a:00.0",
        pcie_root="pci0000:17",
        healthy=True,
        labels={"type": "fakeW"},
        vf_groups=first.info.vf_groups,
    )
    general, unlabelled = first.info.vf_groups
    assert dict(general.labels) == {"type": "general"}
    assert general.vfs == (VirtualFunction("0000:1f:00.2", 0), VirtualFunction("0000:1f:00.3", 1))
    assert dict(unlabelled.labels) == {}
    assert unlabelled.vfs == (VirtualFunction("0000:1f:00.4", 2),)
    assert first.uverbs == "uverbs1"
    assert dict(first.vf_uverbs) == {"0000:1f:00.2": "uverbs8", "0000:1f:00.3": "uverbs9"}
    # irdma0 is numbered after the Mellanox minors; unknown topology stays unknown.
    assert (second.name, second.info.minor, second.info.numa) == ("irdma0", 2, 1)
    assert (second.healthy, second.reason, second.uverbs) == (False, UNHEALTHY_REASON, "")
    assert (second.info.pcie_switch, second.info.pcie_root) == ("", "")


def test_fake_duplicate_addresses_are_refused(tmp_path: Path) -> None:
    text = """
nics:
  - {name: mlx5_0, pci_bus_id: "0000:1f:00.0", vfs: [{bus_id: "0000:1f:00.2"}]}
  - {name: mlx5_1, pci_bus_id: "0000:2f:00.0", vfs: [{bus_id: "0000:1f:00.2"}]}
"""
    with pytest.raises(FakeDevicesError, match="share the PCI address"):
        resolve_fake_nics(parse_fake_nics(text), tmp_path)


def test_fake_nics_take_topology_and_uverbs_from_sysfs(tmp_path: Path) -> None:
    node = gpu_node(tmp_path / "sys")
    text = """
nics:
  - name: mlx5_2
    pci_bus_id: "0000:9a:00.0"
    vfs: [{bus_id: "0000:9a:00.1"}]
"""
    (nic,) = resolve_fake_nics(parse_fake_nics(text), node.sysfs.root)
    placed = node.nics[2]
    assert (nic.info.numa, nic.info.pcie_switch, nic.info.pcie_root) == (
        1,
        placed.switch,
        placed.root,
    )
    assert nic.uverbs == "uverbs2"
    assert dict(nic.vf_uverbs) == {"0000:9a:00.1": "uverbs12"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nics: {}", "nics: expected a list"),
        ("nics: [{pci_bus_id: '0000:1f:00.0'}]", "name is required"),
        ("nics: [{name: mlx5_0}]", "pci_bus_id is required"),
        ("nics: [{name: mlx5_0, pci_bus_id: nope}]", "pci_bus_id: not a PCI bus id"),
        ("nics: [{name: mlx5_0, pci_bus_id: '0000:1f:00.0', port: 1}]", "unknown keys port"),
        (
            "nics: [{name: mlx5_0, pci_bus_id: '0000:1f:00.0', healthy: yes please}]",
            "true or false",
        ),
        ("nics: [{name: mlx5_0, pci_bus_id: '0000:1f:00.0', uverbs: /dev/x}]", "uverbs<N>"),
        ("nics: [{name: mlx5_0, pci_bus_id: '0000:1f:00.0', labels: {a: 1}}]", "quote"),
        ("nics: [{name: mlx5_0, pci_bus_id: '0000:1f:00.0', vfs: [{minor: 1}]}]", "bus_id is"),
        ("nics: [{name: mlx5_0, pci_bus_id: '0000:1f:00.0', vfs: {}}]", "vfs must be a list"),
    ],
)
def test_fake_nics_errors(text: str, message: str) -> None:
    with pytest.raises(FakeDevicesError, match=message):
        parse_fake_nics(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nics: [{name: a b, pci_bus_id: '0000:1f:00.0'}]",
            "not an RDMA device name",
        ),
        (
            "nics: [{name: m, pci_bus_id: '0000:1f:00.0', minor: 1},"
            " {name: n, pci_bus_id: '0000:2f:00.0', minor: 1}]",
            "distinct minor",
        ),
        (
            "nics: [{name: m, pci_bus_id: '0000:1f:00.0', labels: {'bad key!': x}}]",
            "labels",
        ),
    ],
)
def test_fake_nics_refused_like_the_register(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(FakeDevicesError, match=message):
        resolve_fake_nics(parse_fake_nics(text), tmp_path)


def test_register_value_round_trips_discovered_nics(tmp_path: Path) -> None:
    node = gpu_node(tmp_path / "sys")
    nics = discover_nics(node.sysfs.root)
    value = rdma_register_value(nics)
    assert decode_rdma_register(value) == tuple(n.info for n in nics)
    document = json.loads(value)
    assert document["v"] == 1
    assert document["nics"][0] == {
        "id": "0000:1a:00.0",
        "name": "mlx5_0",
        "pcieSwitch": "0000:16:00.0",
        "pcieRoot": "pci0000:15",
        "health": True,
        "vfGroups": [
            {
                "vfs": [
                    {"busID": "0000:1a:00.1"},
                    {"minor": 1, "busID": "0000:1a:00.2"},
                    {"minor": 2, "busID": "0000:1a:00.3"},
                    {"minor": 3, "busID": "0000:1a:00.4"},
                ]
            }
        ],
    }
    assert document["nics"][3]["minor"] == 3
    assert document["nics"][3]["numa"] == 1


def test_annotations_to_write_with_rdma() -> None:
    current = {NVIDIA_REGISTER: "[]", NVIDIA_HANDSHAKE: "Reported 2026-01-01 00:00:00"}
    value = rdma_register_value([Nic(RdmaNic(id="0000:1f:00.0", name="mlx5_0", healthy=True))])
    assert annotations_to_write(current, register="[]", now=NOW, rdma_register=value) == {
        RDMA_REGISTER: value
    }
    assert (
        annotations_to_write(
            {**current, RDMA_REGISTER: value}, register="[]", now=NOW, rdma_register=value
        )
        == {}
    )
    # RDMA off: a stale value is removed, an absent one costs nothing.
    assert annotations_to_write({**current, RDMA_REGISTER: value}, register="[]", now=NOW) == {
        RDMA_REGISTER: None
    }
    assert annotations_to_write(current, register="[]", now=NOW) == {}


def test_advertised_units() -> None:
    nics = [
        Nic(RdmaNic(id="0000:1f:00.0", name="mlx5_0", numa=1, healthy=True)),
        Nic(RdmaNic(id="0000:2f:00.0", name="mlx5_1", minor=1)),
    ]
    devices = rdma_plugin_devices(nics, numa_topology=True)
    assert len(devices) == 2 * RDMA_UNITS_PER_NIC == 200
    assert devices[0].id == "0000:1f:00.0-0"
    assert devices[99].id == "0000:1f:00.0-99"
    assert devices[100].id == "0000:2f:00.0-0"
    assert {d.healthy for d in devices[:100]} == {True}
    assert {d.healthy for d in devices[100:]} == {False}
    assert {d.numa for d in devices[:100]} == {1}
    assert {d.numa for d in rdma_plugin_devices(nics, numa_topology=False)} == {None}


def test_nic_inventory_and_metrics() -> None:
    healthy = Nic(RdmaNic(id="0000:2f:00.0", name="mlx5_1", minor=1, healthy=True))
    inventory = NicInventory([healthy, Nic(RdmaNic(id="0000:1f:00.0", name="mlx5_0"))])
    assert [n.id for n in inventory.nics] == ["0000:1f:00.0", "0000:2f:00.0"]  # by minor
    metrics = PluginMetrics(node="n1")
    inventory.subscribe(metrics.set_nics)
    assert metrics.rdma_nics.labels(health="unhealthy")._value.get() == 1
    event = inventory.changed
    assert not inventory.replace(list(reversed(inventory.nics)))
    assert inventory.replace([healthy])
    assert event.is_set()
    assert inventory.version == 1
    assert set(inventory.functions) == {"0000:2f:00.0"}
    assert metrics.rdma_nics.labels(health="unhealthy")._value.get() == 0


async def test_fake_nic_source_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    nic = {"name": "mlx5_0", "pci_bus_id": "0000:1f:00.0", "uverbs": "uverbs0"}
    write_devices(path, [], [nic])
    source = FakeNicSource(path, sysfs_root=tmp_path, poll_interval=0.02)
    (first,) = await source.open()
    assert first.healthy
    seen: list[tuple[Nic, ...]] = []

    async def follow() -> None:
        async for nics in source.updates():
            seen.append(nics)

    task = asyncio.create_task(follow(), name="follow-fake-nics")
    try:
        write_devices(path, [], [{**nic, "healthy": False}])
        await eventually(lambda: bool(seen), what="unhealthy NIC reported")
        assert [n.healthy for n in seen[-1]] == [False]
        assert len(seen) == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_example_node_file_parses(tmp_path: Path) -> None:
    from hami_deviceplugin.gpu.backends.fake import parse_fake_devices

    example = Path(__file__).parents[2] / "examples" / "fake-gpu-rdma-node.yaml"
    text = example.read_text()
    gpus = parse_fake_devices(text)
    nics = resolve_fake_nics(parse_fake_nics(text), tmp_path)
    assert len(gpus) == 8
    assert [n.name for n in nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert {g.pcie_switch for g in gpus} == {n.info.pcie_switch for n in nics}
    assert all(len(n.info.vfs) == 4 and len(n.vf_uverbs) == 4 for n in nics)
