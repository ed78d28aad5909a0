"""The host-directory adapter and the metrics registry."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.hostdirs import HostDirs
from hami_deviceplugin.gpu.plan import ContainerGrant, HookLayout
from hami_deviceplugin.metrics import PluginMetrics

NODE = "n1"


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
    gpus = [Gpu("GPU-a", 0, "Tesla T4", 1), Gpu("GPU-b", 1, "NVIDIA A30", 1, healthy=False)]
    metrics.set_gpus(gpus)
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
    assert samples[("hami_deviceplugin_device_health", labels)] == 1
    unhealthy = {**dict(labels), "device_index": "1", "device_uuid": "GPU-b"}
    unhealthy["device_type"] = "NVIDIA A30"  # already starts with NVIDIA: not prefixed again
    assert samples[("hami_deviceplugin_device_health", tuple(sorted(unhealthy.items())))] == 0
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
    # The host GPU gauges are the vGPU monitor's alone.
    assert not any(name.startswith("hami_host_") for name in names)
