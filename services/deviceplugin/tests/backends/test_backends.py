"""The fake and nvml backends, and sysfs lookups against a fake sysfs tree."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import AsyncGeneratorType
from typing import cast

import pytest
import yaml

from hami_deviceplugin.devices.fake_file import settled
from hami_deviceplugin.devices.sysfs import PciePlacement, pcie_placement, read_numa_node
from hami_deviceplugin.errors import BackendError, FakeDevicesError
from hami_deviceplugin.gpu.backends.base import Gpu, GpuUsage
from hami_deviceplugin.gpu.backends.fake import FakeBackend, parse_fake_devices
from hami_deviceplugin.gpu.backends.nvml import (
    DEFAULT_IGNORED_XIDS,
    HealthChecks,
    NvmlBackend,
    parse_health_env,
)

from ..fake_pynvml import NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN, FakeGpu, FakeNvml, NVMLError
from ..helpers import eventually, gpu, write_devices

MIB = 1024 * 1024


def fake_sysfs(root: Path) -> Path:
    """Two GPUs behind one PCIe switch, one on a root port, one NIC-less bridge path."""
    devices = root / "devices" / "pci0000:17"
    behind_switch = devices / "0000:17:00.0" / "0000:18:00.0" / "0000:19:04.0" / "0000:1b:00.0"
    on_root_port = devices / "0000:17:02.0" / "0000:2a:00.0"
    for path, numa in ((behind_switch, "1\n"), (on_root_port, "-1\n")):
        path.mkdir(parents=True)
        (path / "numa_node").write_text(numa)
    links = root / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    (links / "0000:1b:00.0").symlink_to(behind_switch)
    (links / "0000:2a:00.0").symlink_to(on_root_port)
    return root


def test_sysfs_numa_and_placement(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path / "sys")
    assert read_numa_node(root, "0000:1b:00.0") == 1
    assert read_numa_node(root, "0000:2a:00.0") == 0  # -1 means unknown
    assert read_numa_node(root, "0000:99:00.0") == 0
    assert pcie_placement(root, "0000:1b:00.0") == PciePlacement("0000:18:00.0", "pci0000:17")
    assert pcie_placement(root, "0000:2a:00.0") == PciePlacement("0000:17:02.0", "pci0000:17")
    assert pcie_placement(root, "0000:99:00.0") == PciePlacement()


# --- fake backend -----------------------------------------------------------------------------


def test_parse_fake_devices_defaults_and_fields() -> None:
    text = """
gpus:
  - {uuid: GPU-a, model: Tesla T4, memory_mib: 15360}
  - {uuid: GPU-b, model: A100, memory_mib: 81920, index: 7, numa: 1, healthy: false,
     pci_bus_id: "00000000:3B:00.0", memory_used_mib: 2, utilization: 50}
nics: [{name: mlx5_0}]
"""
    first, second = parse_fake_devices(text)
    assert (first.index, first.healthy, first.numa, first.pci_bus_id) == (0, True, None, "")
    assert (second.index, second.healthy, second.numa) == (7, False, 1)
    assert second.pci_bus_id == "0000:3b:00.0"
    assert second.usage == GpuUsage(2 * MIB, 50.0, None)
    assert parse_fake_devices("") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: {}", "gpus: expected a list"),
        ("[1]", "expected a mapping"),
        ("gpus: [{model: T, memory_mib: 1}]", "uuid is required"),
        ("gpus: [{uuid: a, model: T}]", "memory_mib is required"),
        ("gpus: [{uuid: a, model: T, memory_mib: -1}]", "non-negative integer"),
        ("gpus: [{uuid: a, model: T, memory_mib: 1, healthy: maybe}]", "true or false"),
        ("gpus: [{uuid: a, model: T, memory_mib: 1, colour: red}]", "unknown keys colour"),
        ("gpus: [{uuid: a, model: T, memory_mib: 1, pci_bus_id: nope}]", "pci_bus_id"),
        (
            "gpus: [{uuid: a, model: T, memory_mib: 1}, {uuid: a, model: T, memory_mib: 1}]",
            "distinct uuid",
        ),
        ("extra: 1", "unknown keys extra"),
        ("gpus: [", "not valid YAML"),
    ],
)
def test_parse_fake_devices_errors(text: str, message: str) -> None:
    with pytest.raises(FakeDevicesError, match=message):
        parse_fake_devices(text)


@contextlib.asynccontextmanager
async def following(backend: FakeBackend | NvmlBackend) -> AsyncIterator[list[tuple[Gpu, ...]]]:
    seen: list[tuple[Gpu, ...]] = []

    async def follow() -> None:
        async for gpus in backend.updates():
            seen.append(gpus)

    task = asyncio.create_task(follow(), name="test-follow")
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_fake_backend_reports_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    sysfs = fake_sysfs(tmp_path / "sys")
    write_devices(path, [gpu("GPU-a", 0, pci_bus_id="0000:1b:00.0"), gpu("GPU-b", 1)])
    backend = FakeBackend(path, sysfs_root=sysfs, poll_interval=0.01)
    first = await backend.open()
    assert [(g.uuid, g.numa, g.pcie_switch, g.pcie_root) for g in first] == [
        ("GPU-a", 1, "0000:18:00.0", "pci0000:17"),  # from the fake sysfs
        ("GPU-b", 0, "", ""),
    ]
    async with following(backend) as seen:
        write_devices(
            path, [gpu("GPU-a", 0, pci_bus_id="0000:1b:00.0"), gpu("GPU-b", 1, healthy=False)]
        )
        await eventually(lambda: len(seen) == 1, what="health change reported")
        assert [g.healthy for g in seen[0]] == [True, False]
        assert seen[0][1].reason
        staging = path.with_suffix(".broken")
        staging.write_text("gpus: [")
        staging.replace(path)  # a broken rewrite keeps the previous list
        write_devices(
            path,
            [
                gpu("GPU-a", 0, pci_bus_id="0000:1b:00.0"),
                gpu("GPU-b", 1, healthy=False, memory_used_mib=5),
            ],
        )

        async def usage_reported() -> bool:
            return await backend.usage() == {"GPU-b": GpuUsage(5 * MIB, None, None)}

        await eventually(usage_reported, what="the usage figures of the last rewrite")
        assert len(seen) == 1  # usage fields alone do not change the GPU list
    await backend.close()


async def test_fake_backend_takes_a_file_written_in_place_once_two_polls_agree(
    tmp_path: Path,
) -> None:
    """A poll that lands between an in-place write's truncation and its last byte reads an
    empty file ("no GPUs"); taken at once, every GPU would vanish for a poll."""
    path = tmp_path / "gpus.yaml"
    write_devices(path, [gpu("GPU-a", 0)])
    backend = FakeBackend(path, sysfs_root=fake_sysfs(tmp_path / "sys"), poll_interval=0.01)
    await backend.open()
    async with following(backend) as seen:
        path.write_text("")  # in place: what a poll sees mid-write, held for many polls
        await eventually(lambda: len(seen) == 1, what="an empty file that stays is taken")
        assert seen == [()]
        path.write_text(yaml.safe_dump({"gpus": [gpu("GPU-a", 0), gpu("GPU-b", 1)]}))
        await eventually(lambda: len(seen) == 2, what="the rewrite is taken")
        assert [g.uuid for g in seen[1]] == ["GPU-a", "GPU-b"]
    await backend.close()


def test_a_content_is_settled_when_taken_or_read_twice() -> None:
    assert settled(b"a", previous_read=None, taken=b"a")
    assert not settled(b"", previous_read=None, taken=b"a")  # first sight of a truncated file
    assert not settled(b"b", previous_read=b"", taken=b"a")  # still changing
    assert settled(b"b", previous_read=b"b", taken=b"a")


async def test_fake_backend_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot read"):
        await FakeBackend(tmp_path / "none.yaml", sysfs_root=tmp_path).open()


# --- nvml backend -----------------------------------------------------------------------------


def nvml_with(*gpus: FakeGpu, **kwargs: object) -> FakeNvml:
    return FakeNvml(gpus=list(gpus), **kwargs)  # type: ignore[arg-type]


T4 = FakeGpu(
    "GPU-t4", "Tesla T4", 16 * 1024 * MIB, b"00000000:1B:00.0", used=MIB, utilization=(40, 7)
)
A100 = FakeGpu("GPU-a100", "NVIDIA A100-SXM4-80GB", 80 * 1024 * MIB, b"00000000:2A:00.0")


async def test_nvml_discovery(tmp_path: Path) -> None:
    nvml = nvml_with(T4, A100)
    backend = NvmlBackend(nvml=nvml, sysfs_root=fake_sysfs(tmp_path / "sys"))
    gpus = await backend.open()
    assert gpus == (
        Gpu("GPU-t4", 0, "Tesla T4", 16384, 1, True, "0000:1b:00.0", "0000:18:00.0", "pci0000:17"),
        Gpu(
            "GPU-a100",
            1,
            "NVIDIA A100-SXM4-80GB",
            81920,
            0,
            True,
            "0000:2a:00.0",
            "0000:17:02.0",
            "pci0000:17",
        ),
    )
    usage = await backend.usage()
    assert usage["GPU-t4"] == GpuUsage(MIB, 40.0, 7.0)
    await backend.close()
    assert nvml.calls[-1] == "nvmlShutdown"


async def test_nvml_errors_mark_one_gpu_unhealthy(tmp_path: Path) -> None:
    broken = FakeGpu("GPU-broken", "X", 1024 * MIB, b"0000:99:00.0")
    unknown = FakeGpu("GPU-unknown", "X", 1024 * MIB, b"0000:98:00.0")
    nvml = nvml_with(
        T4,
        broken,
        unknown,
        failures={
            ("nvmlDeviceGetMemoryInfo", 1): NVML_ERROR_UNKNOWN,
            ("nvmlDeviceGetUUID", 2): NVML_ERROR_UNKNOWN,
        },
    )
    gpus = await NvmlBackend(nvml=nvml, sysfs_root=tmp_path).open()
    assert [g.uuid for g in gpus] == ["GPU-t4", "GPU-broken"]  # no UUID: cannot be advertised
    assert gpus[0].healthy
    assert not gpus[1].healthy
    assert "memory" in gpus[1].reason


async def test_nvml_unsupported_memory_uses_preconfigured(tmp_path: Path) -> None:
    failures = {("nvmlDeviceGetMemoryInfo", 0): NVML_ERROR_NOT_SUPPORTED}
    gpus = await NvmlBackend(
        nvml=nvml_with(T4, failures=failures), sysfs_root=tmp_path, preconfigured_memory_mib=4096
    ).open()
    assert gpus[0].memory_mib == 4096
    assert gpus[0].healthy
    skipped = await NvmlBackend(nvml=nvml_with(T4, failures=failures), sysfs_root=tmp_path).open()
    assert skipped == ()


async def test_nvml_init_failure(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="initialisation failed"):
        await NvmlBackend(nvml=nvml_with(init_error=9), sysfs_root=tmp_path).open()


async def test_nvml_xid_events(tmp_path: Path) -> None:
    nvml = nvml_with(T4, A100)
    backend = NvmlBackend(nvml=nvml, sysfs_root=tmp_path, event_wait_ms=20)
    await backend.open()
    async with following(backend) as seen:
        await eventually(lambda: "nvmlDeviceRegisterEvents" in nvml.calls, what="events registered")
        nvml.push_xid(0, 43)  # ignored: an application error
        nvml.push_event(0, nvml.nvmlEventTypeDoubleBitEccError, 1)  # not an Xid event
        nvml.push_xid(1, 79)  # fallen off the bus
        await eventually(lambda: len(seen) == 1, what="A100 unhealthy")
        assert [(g.uuid, g.healthy) for g in seen[0]] == [("GPU-t4", True), ("GPU-a100", False)]
        assert seen[0][1].reason == "critical Xid 79"
        nvml.events.put(NVMLError(NVML_ERROR_UNKNOWN))  # wait error: everything unhealthy
        await eventually(lambda: len(seen) == 2, what="all unhealthy")
        assert not any(g.healthy for g in seen[1])
    await backend.close()
    assert "nvmlEventSetFree" in nvml.calls


async def test_nvml_unwatchable_gpu_is_unhealthy(tmp_path: Path) -> None:
    nvml = nvml_with(T4, A100, failures={("nvmlDeviceRegisterEvents", 1): NVML_ERROR_NOT_SUPPORTED})
    backend = NvmlBackend(nvml=nvml, sysfs_root=tmp_path, event_wait_ms=20)
    await backend.open()
    async with following(backend) as seen:
        await eventually(lambda: len(seen) == 1)
        assert [g.healthy for g in seen[0]] == [True, False]
    await backend.close()


async def test_nvml_health_checks_disabled(tmp_path: Path) -> None:
    nvml = nvml_with(T4)
    backend = NvmlBackend(nvml=nvml, sysfs_root=tmp_path, health=HealthChecks(enabled=False))
    await backend.open()
    updates = cast(AsyncGeneratorType[tuple[Gpu, ...], None], backend.updates())
    first = asyncio.ensure_future(anext(updates))
    try:
        # Suspended: past the point where it would have created an event set.
        await eventually(lambda: updates.ag_await is not None, what="updates waiting")
        assert not first.done()
    finally:
        first.cancel()
        await asyncio.wait({first})
        await updates.aclose()
    assert "nvmlEventSetCreate" not in nvml.calls
    await backend.close()


@pytest.mark.parametrize(
    ("disable", "enable", "expected"),
    [
        (None, None, HealthChecks()),
        ("all", None, HealthChecks(enabled=False)),
        ("xids", None, HealthChecks(enabled=False)),
        ("48, 63", None, HealthChecks(ignored_xids=DEFAULT_IGNORED_XIDS | {48, 63})),
        (None, "13,31", HealthChecks(ignored_xids=DEFAULT_IGNORED_XIDS - {13, 31})),
    ],
)
def test_health_env(disable: str | None, enable: str | None, expected: HealthChecks) -> None:
    assert parse_health_env(disable, enable) == expected


def test_health_env_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="DP_DISABLE_HEALTHCHECKS"):
        parse_health_env("48,x", None)


async def test_nvml_smoke_prints_what_the_plugin_would_register(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from hami_deviceplugin.gpu.nvml_smoke import smoke
    from hami_protocol.config.node import NodeSettings

    status = await smoke(
        sysfs_root=fake_sysfs(tmp_path / "sys"),
        node=NodeSettings(device_split_count=2),
        nvml=nvml_with(T4),
    )
    assert status == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_kind = {line["kind"]: line["data"] for line in lines}
    assert by_kind["gpu"]["uuid"] == "GPU-t4"
    assert [r["id"] for r in by_kind["replicas"]] == ["GPU-t4-0", "GPU-t4-1"]
    assert by_kind["register"][0]["type"] == "NVIDIA-Tesla T4"
    assert by_kind["register"][0]["count"] == 2
    assert by_kind["usage"]["GPU-t4"]["memory_used_bytes"] == MIB
    assert await smoke(sysfs_root=tmp_path, node=NodeSettings(), nvml=nvml_with(init_error=9)) == 2


def test_example_file_parses() -> None:
    example = Path(__file__).parents[2] / "examples" / "fake-gpus.yaml"
    parsed = parse_fake_devices(example.read_text())
    assert [g.index for g in parsed] == [0, 1]
