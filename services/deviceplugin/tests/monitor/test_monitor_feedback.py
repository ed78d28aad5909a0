"""HAMi's priority feedback written into the regions, read back as HAMi-core reads it (through the
stand-in writer's own mapping of the same files).  The loop's interval is long: the first pass
runs at start, later ones are run by the test through the monitor's scanner, one at a time."""

from __future__ import annotations

import uuid
from pathlib import Path

import structlog.testing

from hami_deviceplugin.monitor.app import serving
from hami_deviceplugin.monitor.metrics import MonitorMetrics
from hami_deviceplugin.monitor.pods import PodIndex, PodRef
from hami_deviceplugin.monitor.problems import ProblemLog
from hami_deviceplugin.monitor.regions import RegionTable
from hami_kubesim.hamicore import RegionWriter
from hami_kubesim.testing import RunningApiServer
from hami_protocol.region.layout import V1

from ..helpers import UUIDS, eventually
from .monitor_helpers import GIB, add_pod, container_dir, monitor_settings, patch_file, scrape

SLOW = 3600.0


def region(hook: Path, pod_uid: str, *, priority: int) -> RegionWriter:
    path = container_dir(hook, pod_uid, "main") / f"{uuid.uuid4()}.cache"
    writer = RegionWriter.create(path, devices=[(UUIDS[0], GIB, 50)], priority=priority)
    writer.set_process(1, used_bytes=[GIB], sm_util=[10])
    return writer


async def test_the_lower_priority_task_on_a_shared_gpu_is_blocked_and_limited(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    high_uid = await add_pod(sim, "high", ["main"])
    low_uid = await add_pod(sim, "low", ["main"])
    broken_uid = await add_pod(sim, "broken", ["main"])
    settings = monitor_settings(
        url=sim.url, hook_path=hook, devices=devices, feedback_interval_s=SLOW
    )
    with (
        region(hook, high_uid, priority=0) as high,
        region(hook, low_uid, priority=1) as low,
        region(hook, broken_uid, priority=1) as broken,
    ):
        high.launch_kernel()
        low.launch_kernel()
        broken.launch_kernel()
        patch_file(broken.path, V1.num, "<Q", 17)  # invalid: never written
        broken_bytes = broken.path.read_bytes()

        async with serving(settings) as mon:
            await eventually(mon.ready)  # the first pass has run
            assert (low.recent_kernel, low.utilization_switch) == (-1, 1)
            assert (high.recent_kernel, high.utilization_switch) == (1, 0)
            samples = await scrape(mon.metrics_port)
            assert (
                samples.get("hami_vgpu_monitor_feedback_writes_total", field="recent_kernel") == 2
            )
            assert (
                samples.get("hami_vgpu_monitor_feedback_writes_total", field="utilization_switch")
                == 1
            )

            # The high-priority task goes idle: the low one is released.
            await mon.scanner.run_once()
            assert high.recent_kernel == 0
            assert (low.recent_kernel, low.utilization_switch) == (0, 0)
            # A kernel of the low one alone: it runs unthrottled.
            low.launch_kernel()
            await mon.scanner.run_once()
            assert (low.recent_kernel, low.utilization_switch) == (1, 0)

        assert broken.path.read_bytes() == broken_bytes


async def test_two_tasks_of_one_priority_on_a_gpu_are_both_limited(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uids = [await add_pod(sim, f"peer-{i}", ["main"]) for i in range(2)]
    settings = monitor_settings(
        url=sim.url, hook_path=hook, devices=devices, feedback_interval_s=SLOW
    )
    with region(hook, uids[0], priority=1) as one, region(hook, uids[1], priority=1) as two:
        one.launch_kernel()
        two.launch_kernel()
        async with serving(settings) as mon:
            await eventually(mon.ready)
            assert [(w.recent_kernel, w.utilization_switch) for w in (one, two)] == [(1, 1)] * 2


async def test_the_feedback_pauses_while_the_mig_lock_file_exists(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    high_uid = await add_pod(sim, "high", ["main"])
    low_uid = await add_pod(sim, "low", ["main"])
    settings = monitor_settings(
        url=sim.url, hook_path=hook, devices=devices, feedback_interval_s=SLOW
    )
    settings.mig_lock_file.write_text("")
    with (
        structlog.testing.capture_logs() as logs,
        region(hook, high_uid, priority=0) as high,
        region(hook, low_uid, priority=1) as low,
    ):
        high.launch_kernel()
        low.launch_kernel()
        async with serving(settings) as mon:
            await eventually(mon.ready)
            await mon.scanner.run_once()
            assert (high.recent_kernel, low.recent_kernel, low.utilization_switch) == (2, 2, 0)
            samples = await scrape(mon.metrics_port)
            assert samples.get("hami_vgpu_monitor_feedback_paused") == 1
            assert (
                samples.get("hami_vgpu_monitor_feedback_writes_total", field="recent_kernel") == 0
            )
            # Paused, the regions are still read and exported.
            assert samples.get("hami_vgpu_memory_used_bytes", pod="low") == GIB

            settings.mig_lock_file.unlink()
            await mon.scanner.run_once()
            assert (low.recent_kernel, low.utilization_switch) == (-1, 1)
            assert (await scrape(mon.metrics_port)).get("hami_vgpu_monitor_feedback_paused") == 0

    events = [entry["event"] for entry in logs if "feedback" in str(entry.get("event"))]
    assert events == [
        "feedback paused while the MIG lock file exists",
        "feedback resumed: the MIG lock file is gone",
    ]


def test_a_pass_taken_in_small_chunks_reads_and_writes_every_region(hook: Path) -> None:
    """A pass takes the table's lock a chunk at a time (so scrapes interleave); with chunks of
    two, five regions on one GPU are all read, and the feedback reaches every one of them."""
    pods: dict[str, PodRef] = {}
    writers: list[RegionWriter] = []
    for i in range(5):
        uid = f"uid-{i}"
        pods[uid] = PodRef(
            uid=uid, namespace="default", name=f"p{i}", containers=frozenset({"main"})
        )
        writer = region(hook, uid, priority=0 if i == 0 else 1)
        writer.launch_kernel()
        writers.append(writer)
    metrics = MonitorMetrics(node="n")
    table = RegionTable(
        hook / "containers",
        ProblemLog(metrics.count_error),
        resync_s=SLOW,
        pause_file=hook / "no-lock",
        chunk=2,
    )
    try:
        report = table.run_pass(PodIndex(pods=pods))
        rows = table.read(PodIndex(pods=pods))
        kernels = [w.recent_kernel for w in writers]
        switches = [w.utilization_switch for w in writers]
    finally:
        table.close()
        for writer in writers:
            writer.close()
    assert report.valid == 5
    assert sorted(row.pod for row in rows) == [f"p{i}" for i in range(5)]
    assert kernels == [1, -1, -1, -1, -1]
    assert switches == [0, 1, 1, 1, 1]


def test_a_cache_linked_to_another_containers_region_is_not_followed(hook: Path) -> None:
    """A container that links its cache to a neighbour's region gets no series and no feedback,
    and the neighbour is not counted twice (two tasks would limit it)."""
    pods = {
        uid: PodRef(uid=uid, namespace="default", name=uid, containers=frozenset({"main"}))
        for uid in ("victim", "linker")
    }
    victim = region(hook, "victim", priority=1)
    victim.launch_kernel()
    linked = container_dir(hook, "linker", "main") / "a.cache"
    linked.symlink_to(victim.path)
    metrics = MonitorMetrics(node="n")
    table = RegionTable(
        hook / "containers",
        ProblemLog(metrics.count_error),
        resync_s=SLOW,
        pause_file=hook / "no-lock",
    )
    try:
        report = table.run_pass(PodIndex(pods=pods))
        rows = table.read(PodIndex(pods=pods))
        switch = victim.utilization_switch
    finally:
        table.close()
        victim.close()
    assert (report.valid, report.invalid) == (1, 1)
    assert [row.pod for row in rows] == ["victim"]
    assert switch == 0
