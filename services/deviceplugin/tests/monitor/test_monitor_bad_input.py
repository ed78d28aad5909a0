"""Bad region files and directories: each counted by its reason once per occurrence, logged once,
never exported and never fatal, while the good regions beside them are still exported."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog.testing

from hami_deviceplugin.monitor.app import serving
from hami_kubesim.hamicore import RegionWriter
from hami_kubesim.testing import RunningApiServer
from hami_protocol.region.layout import V1

from ..helpers import UUIDS, eventually, http_get
from .monitor_helpers import GIB, add_pod, container_dir, monitor_settings, patch_file, scrape

BAD_CONTENT = ("truncated", "oversized", "magic", "version", "devices", "procnum")
"""Containers of the ``bad`` pod, each named after the fault its region has."""


def write_region(directory: Path) -> Path:
    path = directory / f"{uuid.uuid4()}.cache"
    with RegionWriter.create(path, devices=[(UUIDS[0], GIB, 0)]) as writer:
        writer.set_process(1, used_bytes=[GIB], sm_util=[5])
        writer.launch_kernel()
    return path


def spoil(path: Path, fault: str) -> None:
    """Give the region file ``fault``."""
    if fault == "truncated":
        with path.open("r+b") as file:
            file.truncate(1_000_000)  # below the v0 size
    elif fault == "oversized":
        with path.open("ab") as file:
            file.write(bytes(V1.size + 8))
    elif fault == "magic":
        patch_file(path, 0, "<i", 12345)
    elif fault == "version":
        patch_file(path, 4, "<i", 2)
    elif fault == "devices":
        patch_file(path, V1.num, "<Q", 17)
    elif fault == "procnum":
        patch_file(path, V1.procnum, "<i", 2000)


def skipped(logs: Sequence[Mapping[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter(
        (str(entry["path"]), str(entry["reason"]))
        for entry in logs
        if entry.get("event") == "region skipped"
    )


async def test_every_bad_input_is_counted_once_logged_once_and_the_rest_exported(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    good_uid = await add_pod(sim, "good", ["main"])
    write_region(container_dir(hook, good_uid, "main"))
    bad_uid = await add_pod(sim, "bad", [*BAD_CONTENT, "unreadable", "crowded", "vanishing"])
    for fault in BAD_CONTENT:
        spoil(write_region(container_dir(hook, bad_uid, fault)), fault)
    (container_dir(hook, bad_uid, "unreadable") / "a.cache").mkdir()  # not a file
    crowded = container_dir(hook, bad_uid, "crowded")
    for name in ("a.cache", "b.cache", "libvgpu.so"):
        (crowded / name).write_bytes(b"")
    vanishing = write_region(container_dir(hook, bad_uid, "vanishing"))
    stranger = container_dir(hook, str(uuid.uuid4()), "main")
    write_region(stranger)
    write_region(container_dir(hook, good_uid, "ghost"))  # no such container in the pod
    # The pod's init container asked for a GPU too: its directory is no error, and no series.
    write_region(container_dir(hook, good_uid, "init"))
    no_separator = hook / "containers" / "no-separator"
    no_separator.mkdir()
    write_region(no_separator)

    settings = monitor_settings(url=sim.url, hook_path=hook, devices=devices)
    with structlog.testing.capture_logs() as logs:
        async with serving(settings) as mon:
            await eventually(mon.ready)
            await eventually(lambda: mon.scanner.passes >= 3, what="three passes")
            first = await scrape(mon.metrics_port)
            assert str(vanishing) in mon.table.held

            vanishing.unlink()
            await eventually(
                lambda: str(vanishing) not in mon.table.held, what="vanished file closed"
            )
            passes = mon.scanner.passes
            await eventually(lambda: mon.scanner.passes >= passes + 3, what="three more passes")
            later = await scrape(mon.metrics_port)
            assert (await http_get(mon.metrics_port, "/healthz"))[0] == 200

    expected = {
        **dict.fromkeys(BAD_CONTENT, 1.0),
        "unreadable": 1.0,
        "too_many_files": 1.0,
        "bad_directory": 1.0,
        "unknown_pod": 1.0,
        "unknown_container": 1.0,
        "vanished": 0.0,
    }
    assert {reason: first.errors(reason) for reason in expected} == expected
    assert {reason: later.errors(reason) for reason in expected} == {**expected, "vanished": 1.0}

    # Only the good region is exported; the region of the unknown container validates (it takes
    # part in the feedback) but has no series.
    assert [labels["pod"] for labels, _ in later.named("hami_vgpu_memory_used_bytes")] == ["good"]
    assert later.get("hami_vgpu_memory_used_bytes", pod="good", container="main") == GIB
    # good, ghost, init, vanishing
    assert first.get("hami_vgpu_monitor_regions", state="valid") == 4
    assert first.get("hami_vgpu_monitor_regions", state="invalid") == len(BAD_CONTENT) + 1
    assert later.get("hami_vgpu_monitor_regions", state="valid") == 3

    lines = skipped(logs)
    assert all(count == 1 for count in lines.values()), lines
    assert sorted(reason for _, reason in lines) == sorted(expected)
    assert lines[str(no_separator), "bad_directory"] == 1
    assert lines[str(stranger), "unknown_pod"] == 1
    assert lines[str(vanishing), "vanished"] == 1
    assert stranger.exists()  # younger than the resync interval: kept


async def test_a_region_that_recovers_and_fails_again_is_counted_again(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uid = await add_pod(sim, "flaky", ["main"])
    path = write_region(container_dir(hook, uid, "main"))
    settings = monitor_settings(url=sim.url, hook_path=hook, devices=devices)
    with structlog.testing.capture_logs() as logs:
        async with serving(settings) as mon:
            await eventually(mon.ready)
            for round_ in (1, 2):
                patch_file(path, V1.num, "<Q", 17)

                async def counted(times: int = round_) -> bool:
                    return (await scrape(mon.metrics_port)).errors("devices") == times

                await eventually(counted, what=f"fault {round_} counted")
                patch_file(path, V1.num, "<Q", 1)

                async def exported() -> bool:
                    samples = await scrape(mon.metrics_port)
                    return samples.get("hami_vgpu_memory_used_bytes", pod="flaky") == GIB

                await eventually(exported, what=f"recovered after fault {round_}")
    assert skipped(logs) == {(str(path), "devices"): 1}


async def test_a_held_file_that_shrinks_is_closed_as_truncated(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uid = await add_pod(sim, "shrinking", ["main"])
    path = write_region(container_dir(hook, uid, "main"))
    settings = monitor_settings(url=sim.url, hook_path=hook, devices=devices)
    async with serving(settings) as mon:
        await eventually(mon.ready)
        assert str(path) in mon.table.held
        with path.open("r+b") as file:
            file.truncate(V1.size // 2)
        samples = await scrape(mon.metrics_port)  # reads the shrunk file: must not SIGBUS
        assert samples.get("hami_vgpu_memory_used_bytes", pod="shrinking") is None
        assert samples.errors("truncated") == 1
        assert str(path) not in mon.table.held
