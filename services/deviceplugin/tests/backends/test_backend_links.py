"""The links between GPUs as the backends read them: the fake devices file's ``links`` list and
its placement defaults, and NVML's common ancestors and NVLink tables (through the NVML stand-in).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import yaml

from hami_deviceplugin.errors import FakeDevicesError
from hami_deviceplugin.gpu.backends.fake import FakeBackend, parse_fake_devices
from hami_deviceplugin.gpu.backends.nvml import NvmlBackend
from hami_protocol.topology.links import PairLinks, PcieLink, pair_scores

from ..fake_pynvml import (
    NVML_ERROR_UNKNOWN,
    NVML_NVLINK_DEVICE_TYPE_GPU,
    NVML_NVLINK_DEVICE_TYPE_SWITCH,
    NVML_TOPOLOGY_HOSTBRIDGE,
    NVML_TOPOLOGY_INTERNAL,
    NVML_TOPOLOGY_MULTIPLE,
    NVML_TOPOLOGY_NODE,
    NVML_TOPOLOGY_SINGLE,
    FakeGpu,
    FakeNvml,
)
from ..helpers import eventually, gpu, write_atomically

MIB = 1024 * 1024

# --- fake backend -----------------------------------------------------------------------------


def placed_gpus() -> list[dict[str, object]]:
    """a, b share a switch; c shares their root; d is on their NUMA node; e is on the other."""
    return [
        gpu("GPU-a", 0, numa=0, pcie_switch="0000:18:00.0", pcie_root="pci0000:17"),
        gpu("GPU-b", 1, numa=0, pcie_switch="0000:18:00.0", pcie_root="pci0000:17"),
        gpu("GPU-c", 2, numa=0, pcie_switch="0000:28:00.0", pcie_root="pci0000:17"),
        gpu("GPU-d", 3, numa=0, pcie_switch="", pcie_root=""),
        gpu("GPU-e", 4, numa=1, pcie_switch="", pcie_root=""),
    ]


async def fake_links(
    tmp_path: Path, links: list[dict[str, object]]
) -> dict[tuple[str, str], PairLinks]:
    path = tmp_path / "devices.yaml"
    write_atomically(path, yaml.safe_dump({"gpus": placed_gpus(), "links": links}))
    backend = FakeBackend(path, sysfs_root=tmp_path / "sys")
    await backend.open()
    return dict(await backend.links())


async def test_unnamed_pairs_take_their_class_from_the_placement(tmp_path: Path) -> None:
    table = await fake_links(tmp_path, [])
    assert len(table) == 5 * 4
    assert table[("GPU-a", "GPU-b")] == PairLinks(PcieLink.SINGLE_SWITCH)
    assert table[("GPU-a", "GPU-c")] == PairLinks(PcieLink.HOST_BRIDGE)
    assert table[("GPU-c", "GPU-d")] == PairLinks(PcieLink.SAME_CPU)
    assert table[("GPU-e", "GPU-a")] == PairLinks(PcieLink.CROSS_CPU)


async def test_named_pairs_override_both_directions_unless_one_sided(tmp_path: Path) -> None:
    links = [
        {"from": "GPU-a", "to": "GPU-e", "nvlinks": 4},
        {"from": "GPU-c", "to": "GPU-d", "pcie": "SameBoard", "nvlinks": 2},
        {"from": "GPU-b", "to": "GPU-c", "nvlinks": 2, "symmetric": False},
    ]
    table = await fake_links(tmp_path, links)
    assert table[("GPU-a", "GPU-e")] == table[("GPU-e", "GPU-a")]
    assert table[("GPU-a", "GPU-e")] == PairLinks(PcieLink.CROSS_CPU, 4)
    assert table[("GPU-d", "GPU-c")] == PairLinks(PcieLink.SAME_BOARD, 2)
    assert table[("GPU-b", "GPU-c")] == PairLinks(PcieLink.HOST_BRIDGE, 2)
    assert table[("GPU-c", "GPU-b")] == PairLinks(PcieLink.HOST_BRIDGE, 0)
    scores, asymmetric = pair_scores([f"GPU-{n}" for n in "abcde"], table)
    assert [(pair.first, pair.second) for pair in asymmetric] == [("GPU-b", "GPU-c")]
    assert dict(scores[0].scores)["GPU-e"] == 10 + 400


async def test_links_follow_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    write_atomically(path, yaml.safe_dump({"gpus": placed_gpus()}))
    backend = FakeBackend(path, sysfs_root=tmp_path / "sys", poll_interval=0.01)
    await backend.open()
    assert (await backend.links())[("GPU-a", "GPU-b")].nvlinks == 0
    # Only the links change: no new GPU list, but the next read sees them.
    write_atomically(
        path,
        yaml.safe_dump(
            {"gpus": placed_gpus(), "links": [{"from": "GPU-a", "to": "GPU-b", "nvlinks": 6}]}
        ),
    )
    seen: list[object] = []

    async def follow() -> None:
        async for gpus in backend.updates():
            seen.append(gpus)

    async def linked() -> bool:
        return (await backend.links())[("GPU-b", "GPU-a")] == PairLinks(PcieLink.SINGLE_SWITCH, 6)

    task = asyncio.create_task(follow(), name="test-follow-links")
    try:
        await eventually(linked, what="the rewritten links")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert seen == []


_TWO = "gpus: [{uuid: A, model: T, memory_mib: 1}, {uuid: B, model: T, memory_mib: 1}]\n"


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ("links: [{from: A, to: C}]", r"links\[0\]: to 'C' is not a GPU of this file"),
        ("links: [{from: A}]", r"links\[0\]: to is required"),
        ("links: [{from: A, to: A}]", r"links\[0\]: from and to must be different"),
        ("links: [{from: A, to: B, pcie: PIX}]", r"links\[0\]: pcie must be one of CrossCPU"),
        ("links: [{from: A, to: B, nvlinks: 19}]", r"links\[0\]: nvlinks must be 0..18"),
        ("links: [{from: A, to: B, nvlinks: -1}]", r"links\[0\]: nvlinks must be a non-negative"),
        ("links: [{from: A, to: B, symmetric: 1}]", r"links\[0\]: symmetric must be true"),
        ("links: [{from: A, to: B, speed: 3}]", r"links\[0\]: unknown keys speed"),
        ("links: [{from: A, to: B}, {from: B, to: A}]", r"links\[1\]: B -> A is already"),
        ("links: {from: A}", "links: expected a list"),
    ],
)
def test_bad_link_entries_are_refused_by_name(links: str, message: str) -> None:
    with pytest.raises(FakeDevicesError, match=message):
        parse_fake_devices(_TWO + links)


def test_one_sided_entries_for_each_direction_are_allowed() -> None:
    text = _TWO + (
        "links: [{from: A, to: B, nvlinks: 2, symmetric: false},"
        " {from: B, to: A, nvlinks: 1, symmetric: false}]"
    )
    assert len(parse_fake_devices(text)) == 2


# --- nvml backend -----------------------------------------------------------------------------


def bus(n: int) -> bytes:
    return f"00000000:{n:02X}:00.0".encode()


def nvlinked(uuid: str, bus_id: int, links: list[tuple[bytes, int, bool]] | None) -> FakeGpu:
    return FakeGpu(uuid, "NVIDIA H100", 80 * 1024 * MIB, bus(bus_id), nvlinks=links)


GPU = NVML_NVLINK_DEVICE_TYPE_GPU
SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH


async def nvml_links(nvml: FakeNvml, tmp_path: Path) -> dict[tuple[str, str], PairLinks]:
    backend = NvmlBackend(nvml=nvml, sysfs_root=tmp_path / "sys")
    await backend.open()
    try:
        return dict(await backend.links())
    finally:
        await backend.close()


async def test_nvml_direct_nvlinks_and_common_ancestors(tmp_path: Path) -> None:
    # 0 and 1: three links (one disabled) to each other; 2: no NVLink at all.
    nvml = FakeNvml(
        gpus=[
            nvlinked("GPU-0", 0x1B, [(bus(0x2A), GPU, True)] * 2 + [(bus(0x2A), GPU, False)]),
            nvlinked("GPU-1", 0x2A, [(b"0000:1b:00.0", GPU, True)] * 2 + [(bus(0x1B), GPU, False)]),
            nvlinked("GPU-2", 0x3C, None),
        ],
        ancestors={
            frozenset((0, 1)): NVML_TOPOLOGY_SINGLE,
            frozenset((0, 2)): NVML_TOPOLOGY_HOSTBRIDGE,
            frozenset((1, 2)): NVML_TOPOLOGY_NODE,
        },
    )
    table = await nvml_links(nvml, tmp_path)
    assert table[("GPU-0", "GPU-1")] == table[("GPU-1", "GPU-0")]
    assert table[("GPU-0", "GPU-1")] == PairLinks(PcieLink.SINGLE_SWITCH, 2)
    assert table[("GPU-2", "GPU-0")] == PairLinks(PcieLink.HOST_BRIDGE, 0)
    assert table[("GPU-1", "GPU-2")] == PairLinks(PcieLink.SAME_CPU, 0)
    assert table[("GPU-2", "GPU-1")] == PairLinks(PcieLink.SAME_CPU, 0)


@pytest.mark.parametrize(
    ("level", "pcie"),
    [
        (NVML_TOPOLOGY_INTERNAL, PcieLink.SAME_BOARD),
        (NVML_TOPOLOGY_MULTIPLE, PcieLink.MULTI_SWITCH),
        (50, PcieLink.CROSS_CPU),
        (77, None),
    ],
)
async def test_nvml_ancestor_levels(tmp_path: Path, level: int, pcie: PcieLink | None) -> None:
    nvml = FakeNvml(
        gpus=[nvlinked("GPU-0", 0x1B, None), nvlinked("GPU-1", 0x2A, None)],
        ancestors={frozenset((0, 1)): level},
    )
    assert (await nvml_links(nvml, tmp_path))[("GPU-0", "GPU-1")] == PairLinks(pcie, 0)


async def test_nvml_switch_fabric_counts_the_smaller_switch_link_count(tmp_path: Path) -> None:
    switch = bus(0xF0)
    nvml = FakeNvml(
        gpus=[
            nvlinked("GPU-0", 0x1B, [(switch, SWITCH, True)] * 18),
            nvlinked("GPU-1", 0x2A, [(switch, SWITCH, True)] * 12),
            nvlinked("GPU-2", 0x3C, None),
        ]
    )
    table = await nvml_links(nvml, tmp_path)
    assert (
        table[("GPU-0", "GPU-1")] == table[("GPU-1", "GPU-0")] == PairLinks(PcieLink.CROSS_CPU, 12)
    )
    assert table[("GPU-0", "GPU-2")].nvlinks == 0


async def test_nvml_errors_leave_pairs_without_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nvml = FakeNvml(
        gpus=[
            nvlinked("GPU-0", 0x1B, [(bus(0x2A), GPU, True)]),
            nvlinked("GPU-1", 0x2A, [(bus(0x1B), GPU, True)]),
            nvlinked("GPU-2", 0x3C, [(bus(0x1B), GPU, True)]),
        ],
        failures={
            ("nvmlDeviceGetNvLinkRemotePciInfo", 2): NVML_ERROR_UNKNOWN,
            ("nvmlDeviceGetTopologyCommonAncestor", 1): NVML_ERROR_UNKNOWN,
        },
    )
    backend = NvmlBackend(nvml=nvml, sysfs_root=tmp_path / "sys")
    await backend.open()
    try:
        table = await backend.links()
        again = await backend.links()
    finally:
        await backend.close()
    assert table == again
    # GPU-2's NVLink table is unreadable: none of its pairs; GPU-1's ancestor calls fail.
    assert set(table) == {("GPU-0", "GPU-1")}
    assert table[("GPU-0", "GPU-1")].nvlinks == 1
    scores, asymmetric = pair_scores(["GPU-0", "GPU-1", "GPU-2"], table)
    assert asymmetric == ()
    assert all(score == 0 for entry in scores for _, score in entry.scores)
    logged = capsys.readouterr()
    text = logged.out + logged.err
    # Logged once per distinct problem, however many passes.
    assert text.count("GPU link data unavailable") == 2


async def test_nvml_single_gpu_reads_nothing(tmp_path: Path) -> None:
    nvml = FakeNvml(gpus=[nvlinked("GPU-0", 0x1B, None)])
    assert await nvml_links(nvml, tmp_path) == {}
    assert "nvmlDeviceGetTopologyCommonAncestor" not in nvml.calls
