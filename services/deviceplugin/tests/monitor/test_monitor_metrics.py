"""The vGPU monitor's metrics through its real interfaces: region files on disk (written as
HAMi-core writes them), pods in kubesim, ``GET /metrics`` on its port; and its host GPU gauges
from one usage to the next, through a scrape's text."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from hami_deviceplugin.gpu.backends.base import Gpu, GpuUsage
from hami_deviceplugin.monitor.app import serving
from hami_deviceplugin.monitor.metrics import MonitorMetrics
from hami_kube.objects import PodView
from hami_kubesim.hamicore import RegionWriter
from hami_kubesim.testing import RunningApiServer
from hami_protocol.region.layout import RegionVersion

from ..helpers import NODE, UUIDS, eventually
from .monitor_helpers import (
    GIB,
    Samples,
    add_pod,
    container_dir,
    container_labels,
    monitor_settings,
    scrape,
)

LONG_UUID = UUIDS[1] + "-0000-extra"
"""Longer than the 40 characters the series keep."""


def cache_file(directory: Path) -> Path:
    return directory / f"{uuid.uuid4()}.cache"


async def test_a_two_gpu_container_reports_each_device_with_its_own_figures(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uid = await add_pod(sim, "train", ["main", "sidecar"])
    path = cache_file(container_dir(hook, uid, "main"))
    with RegionWriter.create(
        path, devices=[(UUIDS[0], 4 * GIB, 50), (LONG_UUID, 8 * GIB, 60)]
    ) as writer:
        writer.set_process(
            10,
            used_bytes=[GIB, 2 * GIB],
            sm_util=[30, 70],
            context_bytes=[100, 200],
            module_bytes=[300, 400],
            buffer_bytes=[500, 600],
        )
        writer.set_process(11, used_bytes=[GIB], sm_util=[90])  # device 0: 30 + 90 > 100
        writer.launch_kernel(now=time.time() - 30)
        async with serving(monitor_settings(url=sim.url, hook_path=hook, devices=devices)) as mon:
            await eventually(mon.ready, what="monitor ready")
            samples = await scrape(mon.metrics_port)

    first = container_labels("train", "main", 0, UUIDS[0])
    second = container_labels("train", "main", 1, LONG_UUID)
    assert second["device_uuid"] == UUIDS[1][:40]
    for name in ("hami_vgpu_memory_used_bytes", "hami_container_device_memory_bytes"):
        assert samples.get(name, **first) == 2 * GIB
        assert samples.get(name, **second) == 2 * GIB
    assert samples.get("hami_vgpu_memory_limit_bytes", **first) == 4 * GIB
    assert samples.get("hami_vgpu_memory_limit_bytes", **second) == 8 * GIB
    assert samples.get("hami_container_device_utilization_ratio", **first) == 100  # clamped
    assert samples.get("hami_container_device_utilization_ratio", **second) == 70
    assert samples.get("hami_vgpu_memory_context_bytes", **second) == 200
    assert samples.get("hami_vgpu_memory_module_bytes", **second) == 400
    assert samples.get("hami_vgpu_memory_buffer_bytes", **second) == 600
    elapsed = samples.get("hami_container_last_kernel_elapsed_seconds", **first)
    assert elapsed is not None
    assert 30 <= elapsed < 60
    assert len(samples.named("hami_vgpu_memory_used_bytes")) == 2

    host = {"node": NODE, "device_index": "0", "device_uuid": UUIDS[0], "zone": "vGPU"}
    assert samples.get("hami_host_gpu_memory_used_bytes", **host) == 1024 * 1024 * 1024
    assert samples.get("hami_host_gpu_utilization_ratio", **host) == 35
    controller = {"device_index": "0", "device_uuid": UUIDS[0], "device_type": "NVIDIA-Tesla T4"}
    assert samples.named("hami_host_gpu_memory_controller_utilization_ratio") == [
        ({**controller, "zone": "vGPU"}, 10)  # no node label, as HAMi's
    ]
    # The second GPU of the fake file has no usage figures: no host series at all.
    assert not [
        name
        for (name, labels) in samples.values
        if ("device_uuid", UUIDS[1]) in labels and name.startswith("hami_host_")
    ]
    assert samples.get("hami_build_info", zone="vGPU") == 1
    assert samples.get("hami_vgpu_monitor_regions", state="valid") == 1
    assert not samples.named("HostGPUMemoryUsage")
    assert not samples.named("vGPU_device_memory_usage_in_bytes")
    assert all(("zone", "vGPU") in labels for (_, labels) in samples.values)


async def test_legacy_names_only_with_the_flag(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uid = await add_pod(sim, "old", ["main"])
    path = cache_file(container_dir(hook, uid, "main"))
    with RegionWriter.create(path, devices=[(UUIDS[0], 4 * GIB, 50)]) as writer:
        writer.set_process(7, used_bytes=[GIB], sm_util=[140], context_bytes=[11])
        writer.launch_kernel(now=time.time() - 5)
        settings = monitor_settings(url=sim.url, hook_path=hook, devices=devices)
        async with serving(settings) as mon:
            await eventually(mon.ready)
            plain = await scrape(mon.metrics_port)
        legacy_settings = monitor_settings(
            url=sim.url, hook_path=hook, devices=devices, legacy_metrics=True
        )
        async with serving(legacy_settings) as mon:
            await eventually(mon.ready)
            legacy = await scrape(mon.metrics_port)

    old_names = (
        "vGPU_device_memory_usage_in_bytes",
        "vGPU_device_memory_limit_in_bytes",
        "Device_utilization_desc_of_container",
        "Device_last_kernel_of_container",
        "Device_memory_desc_of_container",
        "HostGPUMemoryUsage",
        "HostCoreUtilization",
    )
    for name in old_names:
        assert not plain.named(name), name
        assert legacy.named(name), name
    labels = {
        "podnamespace": "default",
        "podname": "old",
        "ctrname": "main",
        "vdeviceid": "0",
        "deviceuuid": UUIDS[0],
        "zone": "vGPU",
    }
    assert legacy.get("vGPU_device_memory_usage_in_bytes", **labels) == GIB
    assert legacy.get("vGPU_device_memory_limit_in_bytes", **labels) == 4 * GIB
    assert legacy.get("Device_utilization_desc_of_container", **labels) == 100
    memory = legacy.get("Device_memory_desc_of_container", **labels, context="11", offset="0")
    assert memory == GIB
    host = {"nodeid": NODE, "deviceidx": "0", "deviceuuid": UUIDS[0], "zone": "vGPU"}
    assert legacy.get("HostCoreUtilization", **host) == 35
    # The new names stay alongside the old ones.
    assert legacy.get("hami_vgpu_memory_used_bytes", podname="x") is None
    assert legacy.get("hami_vgpu_memory_used_bytes", pod="old") == GIB


async def test_a_v0_region_has_no_last_kernel_series(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uid = await add_pod(sim, "legacy-core", ["main"])
    path = cache_file(container_dir(hook, uid, "main"))
    with RegionWriter.create(
        path, version=RegionVersion.V0, devices=[(UUIDS[0], GIB, 0)]
    ) as writer:
        writer.set_process(3, used_bytes=[GIB // 2], sm_util=[12])
        writer.launch_kernel()
        async with serving(monitor_settings(url=sim.url, hook_path=hook, devices=devices)) as mon:
            await eventually(mon.ready)
            samples = await scrape(mon.metrics_port)
    assert samples.get("hami_vgpu_memory_used_bytes", pod="legacy-core") == GIB // 2
    assert samples.get("hami_container_device_utilization_ratio", pod="legacy-core") == 12
    assert not samples.named("hami_container_last_kernel_elapsed_seconds")


async def test_a_deleted_pods_series_go_and_its_directory_is_removed_after_the_resync_interval(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    stay_uid = await add_pod(sim, "stay", ["main"])
    gone_uid = await add_pod(sim, "gone", ["main"])
    gone_dir = container_dir(hook, gone_uid, "main")
    settings = monitor_settings(url=sim.url, hook_path=hook, devices=devices, resync_interval_s=0.3)
    with (
        RegionWriter.create(
            cache_file(container_dir(hook, stay_uid, "main")), devices=[(UUIDS[0], GIB, 0)]
        ) as stay,
        RegionWriter.create(cache_file(gone_dir), devices=[(UUIDS[1], GIB, 0)]) as gone,
    ):
        stay.set_process(1, used_bytes=[100], sm_util=[1])
        gone.set_process(1, used_bytes=[200], sm_util=[2])
        async with serving(settings) as mon:
            await eventually(mon.ready)
            before = await scrape(mon.metrics_port)
            assert before.get("hami_vgpu_memory_used_bytes", pod="gone") == 200

            await sim.server.delete("pods", "gone", namespace="default")

            async def series_gone() -> bool:
                samples = await scrape(mon.metrics_port)
                return samples.get("hami_vgpu_memory_used_bytes", pod="gone") is None

            await eventually(series_gone, what="the deleted pod's series gone")
            await eventually(lambda: not gone_dir.exists(), what="its directory removed")
            after = await scrape(mon.metrics_port)
            assert str(gone.path) not in mon.table.held

    assert after.get("hami_vgpu_memory_used_bytes", pod="stay") == 100
    assert after.errors("unknown_pod") == 0  # a pod deleted lately is not an unknown one
    assert (hook / "containers" / f"{stay_uid}_main").exists()


async def test_a_region_that_appears_is_exported_within_one_interval(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    interval = 0.5
    uid = await add_pod(sim, "late", ["main"])
    directory = container_dir(hook, uid, "main")
    settings = monitor_settings(
        url=sim.url, hook_path=hook, devices=devices, feedback_interval_s=interval
    )
    async with serving(settings) as mon:
        await eventually(mon.ready)
        assert (await scrape(mon.metrics_port)).get("hami_vgpu_memory_used_bytes") is None
        with RegionWriter.create(cache_file(directory), devices=[(UUIDS[0], GIB, 0)]) as writer:
            writer.set_process(5, used_bytes=[123], sm_util=[4])
            # Counted in passes, not seconds: the first pass that starts after the file exists
            # must pick it up, however slow the machine is.
            passes = mon.scanner.passes
            await eventually(lambda: mon.scanner.passes >= passes + 2, what="a whole pass")
            samples = await scrape(mon.metrics_port)
            assert samples.get("hami_vgpu_memory_used_bytes", pod="late") == 123
            # A process that starts later shows at the next scrape: values are read then.
            writer.set_process(6, used_bytes=[7], sm_util=[1])
            samples = await scrape(mon.metrics_port)
    assert samples.get("hami_vgpu_memory_used_bytes", pod="late") == 130


def test_host_gauges_hold_the_last_usage_only() -> None:
    metrics = MonitorMetrics(node=NODE, legacy=True)
    gpus = [Gpu("GPU-a", 0, "Tesla T4", 1), Gpu("GPU-b", 1, "NVIDIA A30", 1)]
    metrics.host.set_usage(gpus, {"GPU-a": GpuUsage(1024, 40.0, 5.0), "GPU-b": GpuUsage()})
    first = Samples(metrics.render([], now=0.0).decode())
    metrics.host.set_usage(gpus, {"GPU-b": GpuUsage(2048, 50.0)})
    second = Samples(metrics.render([], now=0.0).decode())

    a = {"node": NODE, "device_index": "0", "device_uuid": "GPU-a", "zone": "vGPU"}
    assert first.get("hami_host_gpu_memory_used_bytes", **a, device_type="NVIDIA-Tesla T4") == 1024
    assert first.get("hami_host_gpu_utilization_ratio", **a) == 40
    assert first.get("HostGPUMemoryUsage", nodeid=NODE, deviceuuid="GPU-a") == 1024
    assert first.get("HostCoreUtilization", devicetype="NVIDIA-Tesla T4", deviceidx="0") == 40
    controller = {"device_index": "0", "device_uuid": "GPU-a", "device_type": "NVIDIA-Tesla T4"}
    assert first.named("hami_host_gpu_memory_controller_utilization_ratio") == [
        ({**controller, "zone": "vGPU"}, 5)
    ]
    # GPU-b has no real usage values yet: no series at all, new names or legacy ones.
    assert not [labels for (_, labels) in first.values if ("device_uuid", "GPU-b") in labels]
    assert not [labels for (_, labels) in first.values if ("deviceuuid", "GPU-b") in labels]

    # The next usage replaces the last: GPU-a, gone from it, has no series left.
    assert not [labels for (_, labels) in second.values if ("device_uuid", "GPU-a") in labels]
    assert not [labels for (_, labels) in second.values if ("deviceuuid", "GPU-a") in labels]
    b = {"device_uuid": "GPU-b", "device_type": "NVIDIA A30"}
    assert second.get("hami_host_gpu_memory_used_bytes", **b) == 2048
    assert second.get("hami_host_gpu_utilization_ratio", **b) == 50
    assert not second.named("hami_host_gpu_memory_controller_utilization_ratio")


async def test_a_pod_bound_here_without_the_label_keeps_its_directory_and_is_exported(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    """Pods placed by HAMi before v2.5 carry no ``hami.io/vgpu-node`` label: a monitor listing by
    label would take their directories for a gone pod's and remove them under the running
    container.  Here every pod bound to the node counts; a pod bound elsewhere does not."""

    def bound(name: str, node: str) -> dict[str, object]:
        return {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "cuda"}]},
        }

    old = PodView(await sim.server.create("pods", bound("pre-v2-5", NODE)))
    elsewhere = PodView(await sim.server.create("pods", bound("elsewhere", "other-node")))
    old_dir = container_dir(hook, old.uid, "main")
    other_dir = container_dir(hook, elsewhere.uid, "main")
    settings = monitor_settings(
        url=sim.url,
        hook_path=hook,
        devices=devices,
        resync_interval_s=0.3,
        feedback_interval_s=0.1,
    )
    with RegionWriter.create(cache_file(old_dir), devices=[(UUIDS[0], GIB, 0)]) as writer:
        writer.set_process(1, used_bytes=[300], sm_util=[3])
        async with serving(settings) as mon:
            await eventually(mon.ready)
            await eventually(lambda: not other_dir.exists(), what="the other node's pod's dir")
            samples = await scrape(mon.metrics_port)
    assert old_dir.exists()
    assert samples.get("hami_vgpu_memory_used_bytes", pod="pre-v2-5") == 300
