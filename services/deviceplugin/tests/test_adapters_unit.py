"""Pod lookup decisions, the host-directory adapter and the metrics registry."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from hami_deviceplugin.allocation.lookup import lock_owner, pick_pending_pod
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_deviceplugin.gpu.backends.base import Gpu, GpuUsage
from hami_deviceplugin.gpu.plan import ContainerGrant, HookLayout
from hami_deviceplugin.hostdirs import HostDirs
from hami_deviceplugin.metrics import PluginMetrics
from hami_kube.objects import PodView
from hami_protocol.keys import BIND_PHASE, BIND_TIME, NODE_LOCK, VGPU_NODE

NODE = "n1"


def pending(name: str, bind_time: str | None, **changes: Any) -> dict[str, Any]:
    annotations = {VGPU_NODE: NODE, BIND_PHASE: "allocating"}
    if bind_time is not None:
        annotations[BIND_TIME] = bind_time
    annotations.update(changes.pop("annotations", {}))
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"nodeName": changes.pop("node", NODE)},
        "status": {"phase": changes.pop("phase", "Pending")},
    }
    pod["metadata"].update(changes)
    return pod


def test_pick_pending_pod_takes_the_oldest_bind_time() -> None:
    pods = [
        pending("newer", "200"),
        pending("older", "100"),
        pending("running", "50", phase="Running"),
        pending("done", "40", annotations={BIND_PHASE: "success"}),
        pending("elsewhere", "30", node="n2"),
        pending("other-node-annotation", "20", annotations={VGPU_NODE: "n2"}),
        pending("no-time", None),
        pending("bad-time", "soon"),
        pending("deleting", "10", deletionTimestamp="2026-01-01T00:00:00Z"),
    ]
    picked = pick_pending_pod(pods, NODE)
    assert picked is not None
    assert PodView(picked).name == "older"
    assert pick_pending_pod(pods[2:], NODE) is None


@pytest.mark.parametrize(
    ("value", "owner"),
    [
        ("2026-01-01T00:00:00Z,ns,p", ("ns", "p")),
        ("2026-01-01T00:00:00Z", None),  # legacy: no owner
        ("garbage", None),
        ("", None),
    ],
)
def test_lock_owner(value: str, owner: tuple[str, str] | None) -> None:
    lock = lock_owner({NODE_LOCK: value})
    assert (None if lock is None else (lock.namespace, lock.pod)) == owner


def grant(fresh: str) -> ContainerGrant:
    return ContainerGrant(0, "c", (), {}, (), fresh_dirs=(fresh,), shared_dirs=("/tmp/vgpulock",))


async def test_host_dirs_create_and_recreate(tmp_path: Path) -> None:
    host = HostDirs(tmp_path, plugin_version="1.2.3")
    cache = "/usr/local/vgpu/containers/uid_c"
    stale = tmp_path / "usr/local/vgpu/containers/uid_c/old.cache"
    stale.parent.mkdir(parents=True)
    stale.write_text("x")
    await host.prepare([grant(cache)])
    assert not stale.exists()  # recreated empty
    for path in (tmp_path / cache.lstrip("/"), tmp_path / "tmp/vgpulock"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o777
    assert await host.layout("/usr/local") == HookLayout("/usr/local")
    library = tmp_path / "usr/local/vgpu/libvgpu.so.1.2.3"
    library.write_text("elf")
    (tmp_path / "usr/local/vgpu/license").write_text("l")
    assert await host.layout("/usr/local") == HookLayout(
        "/usr/local", "/usr/local/vgpu/libvgpu.so.1.2.3", True
    )


async def test_host_dirs_refuse_escapes_and_can_be_off(tmp_path: Path) -> None:
    host = HostDirs(tmp_path, plugin_version="1")
    with pytest.raises(AllocateError) as caught:
        await host.prepare([grant("/usr/local/vgpu/containers/../../../etc")])
    assert caught.value.kind is FailureKind.HOST
    off = HostDirs(None, plugin_version="1")
    await off.prepare([grant("/anything")])  # touches nothing
    assert await off.layout("/usr/local") == HookLayout("/usr/local")


def test_metrics_carry_the_zone_label() -> None:
    metrics = PluginMetrics(node=NODE)
    gpus = [Gpu("GPU-a", 0, "Tesla T4", 1), Gpu("GPU-b", 1, "A30", 1, healthy=False)]
    metrics.set_gpus(gpus)
    metrics.set_usage(gpus, {"GPU-a": GpuUsage(1024, 40.0, 5.0), "GPU-b": GpuUsage()})
    metrics.observe_allocate(ok=False, seconds=0.01, reason="invalid")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
    }
    labels = (
        ("device_index", "0"),
        ("device_type", "NVIDIA-Tesla T4"),
        ("device_uuid", "GPU-a"),
        ("node", NODE),
        ("zone", "vGPU"),
    )
    assert samples[("hami_host_gpu_memory_used_bytes", labels)] == 1024
    assert samples[("hami_host_gpu_utilization_ratio", labels)] == 40
    assert samples[("hami_deviceplugin_devices", (("health", "unhealthy"), ("zone", "vGPU")))] == 1
    assert (
        samples[
            ("hami_deviceplugin_allocate_failures_total", (("reason", "invalid"), ("zone", "vGPU")))
        ]
        == 1
    )
    names = {name for name, _ in samples}
    assert "hami_build_info" in names
    assert all(dict(key).get("zone") == "vGPU" for _, key in samples)
    # GPU-b has no real usage values: no series at all.
    assert not any(
        name.startswith("hami_host_") and ("device_uuid", "GPU-b") in key for name, key in samples
    )
