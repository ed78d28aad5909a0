"""The HAMi-core stand-in: the region file it keeps, seen through a second mapping as the monitor
sees it, and how it reads a container's Allocate answer."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hami_kubesim.hamicore import (
    DEFAULT_PRIORITY,
    RegionWriter,
    devices_from_env,
    priority_from_env,
    region_for_allocation,
)
from hami_protocol.region.codec import DeviceMemory, decode_region
from hami_protocol.region.feedback import FeedbackField, field_offset
from hami_protocol.region.layout import V0, V1, RegionVersion, detect_layout
from hami_protocol.region.usage import read_usage

GIB = 1 << 30
DEVICES = (("GPU-aaaa", 3 * GIB, 30), ("GPU-bbbb", 2 * GIB, 30))


@contextmanager
def monitor_view(path: Path) -> Iterator[mmap.mmap]:
    """An independent read-write shared mapping of the file, as the vGPU monitor holds one."""
    with path.open("r+b") as file:
        mapped = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_SHARED)
        try:
            yield mapped
        finally:
            mapped.close()


@pytest.mark.parametrize("version", list(RegionVersion))
def test_create_writes_a_whole_region(tmp_path: Path, version: RegionVersion) -> None:
    path = tmp_path / "0b7f.cache"
    with RegionWriter.create(path, version=version, devices=DEVICES, priority=0, owner_pid=42):
        image = path.read_bytes()
        assert detect_layout(image) is (V1 if version is RegionVersion.V1 else V0)
        region = decode_region(image)
        assert region.version is version
        assert region.num == 2
        assert region.uuids[:3] == ("GPU-aaaa", "GPU-bbbb", "")
        assert region.limits[:3] == (3 * GIB, 2 * GIB, 0)
        assert region.sm_limits[:2] == (30, 30)
        assert (region.priority, region.owner_pid, region.procs) == (0, 42, ())
    assert not list(tmp_path.glob(".*"))  # no staging file left behind


def test_create_needs_the_parent_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RegionWriter.create(tmp_path / "missing" / "x.cache", devices=DEVICES)


def test_set_process_adds_and_updates_slots(tmp_path: Path) -> None:
    with RegionWriter.create(tmp_path / "r.cache", devices=DEVICES) as writer:
        writer.set_process(
            100,
            used_bytes=[GIB, 5],
            sm_util=[40, 7],
            context_bytes=[10, 0],
            module_bytes=[20, 0],
            buffer_bytes=[30, 0],
            hostpid=9100,
        )
        writer.set_process(200, used_bytes=[GIB], sm_util=[15])
        region = writer.read()
        assert [(p.pid, p.hostpid, p.status) for p in region.procs] == [(100, 9100, 1), (200, 0, 1)]
        assert region.procs[0].used[0] == DeviceMemory(10, 20, 30, 0, GIB)
        assert region.procs[0].used[1].total == 5
        assert region.procs[1].used[1].total == 0
        assert region.procs[0].device_util[0].sm_util == 40

        writer.set_process(100, used_bytes=[2 * GIB, 0], sm_util=[50, 0])
        region = writer.read()
        assert len(region.procs) == 2
        assert (region.procs[0].hostpid, region.procs[0].used[0].total) == (9100, 2 * GIB)
        assert region.procs[0].used[0].context_size == 0

        usage = read_usage(writer.path.read_bytes())
        assert [(d.uuid, d.used_bytes, d.sm_util) for d in usage.devices] == [
            ("GPU-aaaa", 3 * GIB, 65),
            ("GPU-bbbb", 0, 0),
        ]


def test_set_process_refuses_more_devices_than_the_region_has(tmp_path: Path) -> None:
    with RegionWriter.create(tmp_path / "r.cache", devices=DEVICES[:1]) as writer:
        with pytest.raises(ValueError, match="sm_util has 2 entries"):
            writer.set_process(1, used_bytes=[1], sm_util=[1, 2])
        assert writer.procnum == 0


def test_remove_process_moves_the_last_slot_into_the_hole(tmp_path: Path) -> None:
    with RegionWriter.create(tmp_path / "r.cache", devices=DEVICES) as writer:
        for pid in (1, 2, 3):
            writer.set_process(pid, used_bytes=[pid * 100], sm_util=[pid])
        writer.remove_process(1)
        region = writer.read()
        assert [(p.pid, p.used[0].total) for p in region.procs] == [(3, 300), (2, 200)]
        image = writer.path.read_bytes()
        third = V1.procs + 2 * V1.proc_size
        assert not any(image[third : third + V1.proc_size])
        writer.remove_process(2)
        writer.remove_process(3)
        assert writer.read().procs == ()
        with pytest.raises(KeyError):
            writer.remove_process(3)


def test_every_process_slot_can_be_taken_and_no_more(tmp_path: Path) -> None:
    with RegionWriter.create(tmp_path / "r.cache", version=RegionVersion.V0, devices=DEVICES) as w:
        for pid in range(1, 1025):
            w.set_process(pid, used_bytes=[1], sm_util=[0])
        with pytest.raises(ValueError, match="1024 process slots"):
            w.set_process(5000, used_bytes=[1], sm_util=[0])
        assert read_usage(w.path.read_bytes()).devices[0].used_bytes == 1024


@pytest.mark.parametrize("version", list(RegionVersion))
def test_launch_kernel(tmp_path: Path, version: RegionVersion) -> None:
    with RegionWriter.create(tmp_path / "r.cache", version=version, devices=DEVICES) as writer:
        writer.launch_kernel(now=1_700_000_123.9)
        region = writer.read()
        assert writer.recent_kernel == region.recent_kernel == 2
        expected = 1_700_000_123 if version is RegionVersion.V1 else 0
        assert region.last_kernel_time == expected


def test_a_second_mapping_sees_each_field_write(tmp_path: Path) -> None:
    with (
        RegionWriter.create(tmp_path / "r.cache", devices=DEVICES) as writer,
        monitor_view(writer.path) as monitor,
    ):
        with memoryview(monitor) as view:
            assert read_usage(view).active_procs == 0
        writer.set_process(7, used_bytes=[GIB, GIB], sm_util=[10, 20])
        writer.launch_kernel(now=50)
        with memoryview(monitor) as view:
            usage = read_usage(view)
        assert (usage.active_procs, usage.recent_kernel, usage.last_kernel_time) == (1, 2, 50)
        assert [d.sm_util for d in usage.devices] == [10, 20]
        writer.remove_process(7)
        with memoryview(monitor) as view:
            assert read_usage(view).active_procs == 0


def test_the_writer_sees_the_monitors_feedback(tmp_path: Path) -> None:
    with (
        RegionWriter.create(tmp_path / "r.cache", devices=DEVICES) as writer,
        monitor_view(writer.path) as monitor,
    ):
        writer.launch_kernel()
        struct.pack_into("<i", monitor, field_offset(V1, FeedbackField.RECENT_KERNEL), -1)
        struct.pack_into("<i", monitor, field_offset(V1, FeedbackField.UTILIZATION_SWITCH), 1)
        assert (writer.recent_kernel, writer.utilization_switch) == (-1, 1)
        writer.launch_kernel(now=99)  # blocked: HAMi-core leaves -1 alone
        assert writer.recent_kernel == -1
        assert writer.read().last_kernel_time == 99


def test_close_is_idempotent(tmp_path: Path) -> None:
    writer = RegionWriter.create(tmp_path / "r.cache", devices=DEVICES)
    writer.close()
    writer.close()
    assert decode_region((tmp_path / "r.cache").read_bytes()).num == 2


# --- the Allocate answer --------------------------------------------------------------------------
POD_UID = "5b0c2a4e-1f7e-4c53-9d0e-2a1f3c4d5e6f"
CACHE = "0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70"

# As hami_deviceplugin.gpu.plan.container_grant answers for container "train" with the default
# hook path /usr/local, two devices and priority 0 from the webhook.
GRANT_ENVS = {
    "NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb",
    "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
    "CUDA_DEVICE_MEMORY_LIMIT_1": "2000m",
    "CUDA_DEVICE_SM_LIMIT": "30",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/usr/local/vgpu/{CACHE}.cache",
    "CUDA_TASK_PRIORITY": "0",
}
GRANT_MOUNTS = (
    ("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so"),
    ("/usr/local/vgpu", f"/usr/local/vgpu/containers/{POD_UID}_train"),
    ("/tmp/vgpulock", "/tmp/vgpulock"),
    ("/etc/ld.so.preload", "/usr/local/vgpu/ld.so.preload"),
)


def test_region_for_allocation_follows_the_cache_mount(tmp_path: Path) -> None:
    path = region_for_allocation(tmp_path, GRANT_MOUNTS, GRANT_ENVS)
    expected = tmp_path / "usr/local/vgpu/containers" / f"{POD_UID}_train" / f"{CACHE}.cache"
    assert path == expected
    # The whole round: the plugin made the directory, HAMi-core the file, the monitor reads it.
    expected.parent.mkdir(parents=True)
    devices = devices_from_env(GRANT_ENVS)
    with RegionWriter.create(expected, devices=devices, priority=priority_from_env(GRANT_ENVS)):
        region = decode_region(expected.read_bytes())
    assert region.uuids[:2] == ("GPU-aaaa", "GPU-bbbb")
    assert region.limits[:2] == (3000 << 20, 2000 << 20)
    assert region.priority == 0


def test_the_deepest_mount_wins(tmp_path: Path) -> None:
    mounts = [("/usr", "/host/usr"), *GRANT_MOUNTS]
    assert region_for_allocation(tmp_path, mounts, GRANT_ENVS) == (
        tmp_path / "usr/local/vgpu/containers" / f"{POD_UID}_train" / f"{CACHE}.cache"
    )


def test_no_shared_cache_no_region(tmp_path: Path) -> None:
    envs = {k: v for k, v in GRANT_ENVS.items() if k != "CUDA_DEVICE_MEMORY_SHARED_CACHE"}
    assert region_for_allocation(tmp_path, GRANT_MOUNTS, envs) is None
    assert region_for_allocation(tmp_path, (), GRANT_ENVS) is None


def test_a_relative_cache_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="absolute"):
        region_for_allocation(tmp_path, GRANT_MOUNTS, {"CUDA_DEVICE_MEMORY_SHARED_CACHE": "x/y"})


def test_devices_from_env() -> None:
    assert devices_from_env(GRANT_ENVS) == (
        ("GPU-aaaa", 3000 << 20, 30),
        ("GPU-bbbb", 2000 << 20, 30),
    )
    assert devices_from_env(
        {"NVIDIA_VISIBLE_DEVICES": "GPU-a", "CUDA_DEVICE_MEMORY_LIMIT_0": "2g"}
    ) == (("GPU-a", 2 << 30, 0),)
    assert devices_from_env({"NVIDIA_VISIBLE_DEVICES": "GPU-a"}) == (("GPU-a", 0, 0),)
    assert devices_from_env({"NVIDIA_VISIBLE_DEVICES": "none"}) == ()
    assert devices_from_env({}) == ()


@pytest.mark.parametrize(
    ("envs", "message"),
    [
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, "names no device"),
        ({"NVIDIA_VISIBLE_DEVICES": "G", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000x"}, "not a size"),
        ({"NVIDIA_VISIBLE_DEVICES": "G", "CUDA_DEVICE_SM_LIMIT": "lots"}, "not an integer"),
        ({"NVIDIA_VISIBLE_DEVICES": ",".join(f"G{i}" for i in range(17))}, "17 devices"),
    ],
)
def test_devices_from_env_refuses(envs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        devices_from_env(envs)


def test_priority_from_env() -> None:
    assert priority_from_env({"CUDA_TASK_PRIORITY": "0"}) == 0
    assert priority_from_env({"CUDA_TASK_PRIORITY": "5"}) == 5
    assert priority_from_env({}) == DEFAULT_PRIORITY == 1
    with pytest.raises(ValueError, match="CUDA_TASK_PRIORITY"):
        priority_from_env({"CUDA_TASK_PRIORITY": "high"})
