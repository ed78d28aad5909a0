"""Bad input and failures on the Allocate path, end to end through the kubelet stand-in.

Every failure must give the kubelet a gRPC error with the reason (the pod then fails with
UnexpectedAdmissionError), write bind-phase ``failed``, release the node lock, record an Event,
and leave the to-allocate list as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_kubesim.testing import RunningApiServer
from hami_protocol.keys import BIND_PHASE, NODE_LOCK, NVIDIA_DEVICES_TO_ALLOCATE

from ..helpers import (
    NODE,
    UUIDS,
    annotations_of,
    container,
    devices_value,
    events_for,
    eventually,
    gpu,
    lock_annotation,
    node_stack,
    phase,
    scheduled_pod,
    submit,
    write_devices,
)


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.yaml"
    write_devices(path, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1)])
    return path


def status_message(sim: RunningApiServer, name: str) -> str:
    pod = sim.server.get("pods", name, namespace="default")
    return str((pod.get("status") or {}).get("message", ""))


async def expect_failure(sim: RunningApiServer, name: str, reason_text: str) -> None:
    await eventually(lambda: phase(sim, name) == "Failed", what=f"{name} rejected by the kubelet")
    assert reason_text in status_message(sim, name)
    assert (
        sim.server.get("pods", name, namespace="default")["status"].get("reason")
        == "UnexpectedAdmissionError"
    )
    assert annotations_of(sim, "pods", name)[BIND_PHASE] == "failed"
    await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE), what="unlocked")
    await eventually(lambda: bool(events_for(sim, name)), what="event recorded")
    assert reason_text in events_for(sim, name)[0]["message"]
    assert events_for(sim, name)[0]["type"] == "Warning"


@pytest.mark.parametrize(
    ("to_allocate", "gpus", "reason_text"),
    [
        ("GPU-x,NVIDIA,notanumber,0:;", 1, "memory and cores must be integers"),
        ("GPU-x,NVIDIA:;", 1, "missing fields"),
        (devices_value([(UUIDS[0], 1000, 0)]), 2, "device number not matched"),
        (devices_value([("GPU-not-here", 1000, 0)]), 1, "is not a GPU of node"),
        (devices_value([]), 1, "is waiting for devices"),
    ],
    ids=["garbage", "missing-fields", "count-mismatch", "unknown-uuid", "nothing-pending"],
)
async def test_bad_annotations_fail_cleanly(
    sim: RunningApiServer,
    plugin_dir: Path,
    host_root: Path,
    devices: Path,
    to_allocate: str,
    gpus: int,
    reason_text: str,
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (_, plugin):
        pod = scheduled_pod("bad", [container("main", gpus)], to_allocate=to_allocate)
        await submit(sim, pod)
        await expect_failure(sim, "bad", reason_text)
        # Nothing half-written: the list is as the scheduler wrote it.
        assert annotations_of(sim, "pods", "bad")[NVIDIA_DEVICES_TO_ALLOCATE] == to_allocate
        assert plugin.metrics.allocate_failures.labels(reason="invalid")._value.get() == 1


async def test_missing_annotation(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices):
        pod = scheduled_pod("bare", [container("main", 1)], to_allocate="")
        del pod["metadata"]["annotations"][NVIDIA_DEVICES_TO_ALLOCATE]
        await submit(sim, pod)
        await expect_failure(sim, "bare", f"pod has no {NVIDIA_DEVICES_TO_ALLOCATE} annotation")


async def test_a_lock_naming_another_pod_is_neither_trusted_nor_touched(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    # HAMi takes the pod named by the lock; here the lock plays no part in identity, and a lock
    # that is not the served pod's stays (the scheduler frees a lock whose owner is gone).
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, plugin):
        value = devices_value([(UUIDS[0], 1000, 0)])
        pod = scheduled_pod("orphan", [container("main", 1)], to_allocate=value)
        await sim.server.create("pods", pod)
        gone = lock_annotation("default", "gone")
        await sim.server.patch(
            "nodes", NODE, {"metadata": {"annotations": gone}}, patch_type="merge"
        )
        await sim.server.bind("default", "orphan", NODE)
        await eventually(lambda: phase(sim, "orphan") == "Running", what="orphan running")
        allocation = kubelet.allocation("default", "orphan")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        assert main.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
        assert annotations_of(sim, "pods", "orphan")[BIND_PHASE] == "success"
        assert annotations_of(sim, "nodes", NODE)[NODE_LOCK] == gone[NODE_LOCK]
        assert plugin.metrics.allocate_failures.labels(reason="no_pod")._value.get() == 0


async def test_no_pod_to_allocate(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices):
        # Bound without any of the scheduler's annotations and without a lock.
        pod = scheduled_pod("stray", [container("main", 1)], to_allocate="")
        pod["metadata"]["annotations"] = {}
        await submit(sim, pod, lock=False)
        await eventually(lambda: phase(sim, "stray") == "Failed", what="rejected")
        assert f"no binding pod found on node {NODE}" in status_message(sim, "stray")


async def test_api_error_on_commit_marks_failed(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (_, plugin):
        value = devices_value([(UUIDS[0], 1000, 0)])
        sim.server.inject_error("patch", "pods", code=500, times=1, message="etcd is down")
        await submit(sim, scheduled_pod("flaky", [container("main", 1)], to_allocate=value))
        await expect_failure(sim, "flaky", "etcd is down")
        assert annotations_of(sim, "pods", "flaky")[NVIDIA_DEVICES_TO_ALLOCATE] == value
        assert plugin.metrics.allocate_failures.labels(reason="api")._value.get() == 1


async def test_deadline(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices, allocate_timeout_s=2.0) as (
        kubelet,
        plugin,
    ):
        value = devices_value([(UUIDS[0], 1000, 0)])
        # The commit meets a conflict and the re-read hangs: the deadline passes after the pod
        # was identified, so it is marked failed and its lock released.  The pod is identified
        # from the watch (the kubelet admits it once the plugin's watch has it, so no GET of the
        # pod meets the latency), within 2 s however loaded the machine; the re-read would take
        # a minute.
        kubelet.pause()
        await submit(sim, scheduled_pod("slow", [container("main", 1)], to_allocate=value))
        await eventually(
            lambda: "default/slow" in plugin.node_pods.snapshot(), what="the plugin watches it"
        )
        sim.server.inject_error("patch", "pods", code=409, times=1)
        sim.server.inject_latency(60.0, "get", "pods")
        kubelet.resume()
        await eventually(lambda: phase(sim, "slow") == "Failed", what="rejected")
        sim.server.clear_faults()
        assert "did not finish within 2s" in status_message(sim, "slow")
        await eventually(lambda: annotations_of(sim, "pods", "slow")[BIND_PHASE] == "failed")
        await eventually(
            lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE), what="unlocked"
        )
        assert annotations_of(sim, "pods", "slow")[NVIDIA_DEVICES_TO_ALLOCATE] == value
        assert plugin.metrics.allocate_failures.labels(reason="timeout")._value.get() == 1


async def test_write_conflicts_are_retried(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (_, plugin):
        value = devices_value([(UUIDS[1], 1000, 0)])
        # The commit is the first pod patch over HTTP; a 409 makes the plugin re-read the pod
        # and decide again instead of failing the pod.
        sim.server.inject_error("patch", "pods", code=409, times=1)
        await submit(sim, scheduled_pod("busy", [container("main", 1)], to_allocate=value))
        await eventually(lambda: phase(sim, "busy") == "Running", what="pod running")
        assert annotations_of(sim, "pods", "busy")[BIND_PHASE] == "success"
        await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        assert plugin.metrics.allocate_requests.labels(outcome="failed")._value.get() == 0
        assert [e["fired"] for e in sim.server.faults.to_dict()["errors"]] == [1]
