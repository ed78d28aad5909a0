"""The plugin against kubesim's API server and kubelet stand-in over real unix sockets.

Pods are prepared the way the scheduler leaves them (vgpu-node, to-allocate/allocated,
bind-phase allocating, bind-time, the node lock) and then bound through the Binding subresource;
the kubelet stand-in calls GetPreferredAllocation/Allocate and records what each container got.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hami_deviceplugin.app import serving
from hami_deviceplugin.errors import BackendError
from hami_kube.objects import PodView
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.testing import RunningApiServer
from hami_protocol.config.node import NodeSettings
from hami_protocol.keys import (
    BIND_PHASE,
    NODE_LOCK,
    NVIDIA_DEVICES_ALLOCATED,
    NVIDIA_DEVICES_TO_ALLOCATE,
    NVIDIA_HANDSHAKE,
    NVIDIA_REGISTER,
)
from hami_protocol.node.registry import decode_node_devices

from ..helpers import (
    NODE,
    RESOURCE,
    UUIDS,
    annotations_of,
    container,
    devices_value,
    eventually,
    gpu,
    http_get,
    node_stack,
    phase,
    plugin_settings,
    resource_counts,
    scheduled_pod,
    submit,
    write_devices,
)


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.yaml"
    write_devices(
        path,
        [
            gpu(UUIDS[0], 0, numa=0, pci_bus_id="00000000:1B:00.0"),
            gpu(UUIDS[1], 1, numa=1, memory_mib=32768),
        ],
    )
    return path


async def test_registration_list_and_watch_and_readiness(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, plugin):
        assert kubelet.registrations[RESOURCE] == 1
        await eventually(lambda: resource_counts(kubelet) == (8, 8), what="8 replicas advertised")
        await eventually(lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE))
        node_annotations = annotations_of(sim, "nodes", NODE)
        registered = decode_node_devices(node_annotations[NVIDIA_REGISTER])
        assert [
            (d.id, d.index, d.count, d.devmem, d.devcore, d.type, d.numa, d.health)
            for d in registered
        ] == [
            (UUIDS[0], 0, 4, 16384, 100, "NVIDIA-Tesla T4", 0, True),
            (UUIDS[1], 1, 4, 32768, 100, "NVIDIA-Tesla T4", 1, True),
        ]
        assert registered[0].pci_bus_id == "0000:1b:00.0"
        assert node_annotations[NVIDIA_HANDSHAKE].startswith("Reported ")
        status = sim.server.get("nodes", NODE)["status"]
        await eventually(
            lambda: sim.server.get("nodes", NODE)["status"]["capacity"].get(RESOURCE) == "8"
        )
        assert status["capacity"]["cpu"] == "8"
        assert (await http_get(plugin.metrics_port, "/readyz"))[0] == 200
        _, text = await http_get(plugin.metrics_port, "/metrics")
        assert 'hami_deviceplugin_devices{health="healthy",zone="vGPU"} 2.0' in text
        assert (
            'hami_deviceplugin_kubelet_registrations_total{outcome="success",zone="vGPU"} 1.0'
            in text
        )


async def test_single_container_allocation(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, plugin):
        value = devices_value([(UUIDS[1], 3000, 30)])
        await submit(sim, scheduled_pod("train", [container("main", 1)], to_allocate=value))
        await eventually(lambda: phase(sim, "train") == "Running", what="pod running")

        pod = sim.server.get("pods", "train", namespace="default")
        pod_annotations = PodView(pod).annotations
        assert pod_annotations[BIND_PHASE] == "success"
        assert pod_annotations[NVIDIA_DEVICES_TO_ALLOCATE] == ";"
        assert pod_annotations[NVIDIA_DEVICES_ALLOCATED] == value  # never rewritten
        await eventually(
            lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE), what="unlocked"
        )

        allocation = kubelet.allocation("default", "train")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        envs = main.envs
        assert envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
        assert envs["CUDA_DEVICE_SM_LIMIT"] == "30"
        assert envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith("/usr/local/vgpu/")
        assert "CUDA_OVERSUBSCRIBE" not in envs
        mounts = {m.container_path: (m.host_path, m.read_only) for m in main.resources[0].mounts}
        uid = PodView(pod).uid
        assert mounts == {
            "/usr/local/vgpu/libvgpu.so": ("/usr/local/vgpu/libvgpu.so", True),
            "/usr/local/vgpu": (f"/usr/local/vgpu/containers/{uid}_main", False),
            "/tmp/vgpulock": ("/tmp/vgpulock", False),
            "/etc/ld.so.preload": ("/usr/local/vgpu/ld.so.preload", True),
        }
        cache_dir = host_root / f"usr/local/vgpu/containers/{uid}_main"
        assert cache_dir.is_dir()
        assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o777
        assert (host_root / "tmp/vgpulock").is_dir()
        record = json.loads(pod_annotations["kubesim.hami.io/container-allocations"])
        assert record["containers"][0]["resources"][0]["envs"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        assert plugin.metrics.allocate_requests.labels(outcome="success")._value.get() == 1


async def test_init_and_multi_container_pod(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, _):
        value = devices_value(
            [(UUIDS[0], 1000, 10)],  # init "setup"
            [(UUIDS[0], 2000, 20), (UUIDS[1], 4000, 20)],  # "main"
            [],  # "sidecar" asks for no GPU
            [(UUIDS[1], 500, 5)],  # "helper"
        )
        pod = scheduled_pod(
            "multi",
            [
                container("main", 2),
                container("sidecar", env={"CUDA_DISABLE_CONTROL": "true"}),
                container("helper", 1, env={"CUDA_DISABLE_CONTROL": "true"}),
            ],
            init=[container("setup", 1)],
            to_allocate=value,
        )
        await submit(sim, pod)
        await eventually(lambda: phase(sim, "multi") == "Running", what="pod running")

        allocation = kubelet.allocation("default", "multi")
        assert allocation is not None
        got: dict[str, dict[str, str]] = {}
        for name in ("setup", "main", "helper"):
            found = allocation.container(name)
            assert found is not None
            got[name] = found.envs
        assert got["setup"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
        assert got["setup"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
        assert got["main"]["NVIDIA_VISIBLE_DEVICES"] == f"{UUIDS[0]},{UUIDS[1]}"
        assert got["main"]["CUDA_DEVICE_MEMORY_LIMIT_1"] == "4000m"
        assert got["main"]["CUDA_DEVICE_SM_LIMIT"] == "20"
        assert got["helper"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        sidecar = allocation.container("sidecar")
        assert sidecar is not None
        assert sidecar.resources == ()
        helper = allocation.container("helper")
        assert helper is not None
        helper_mounts = {m.container_path for m in helper.resources[0].mounts}
        assert "/etc/ld.so.preload" not in helper_mounts  # CUDA_DISABLE_CONTROL=true
        caches = {envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] for envs in got.values()}
        assert len(caches) == 3
        pod_annotations = annotations_of(sim, "pods", "multi")
        assert pod_annotations[NVIDIA_DEVICES_TO_ALLOCATE] == ";;;;"
        assert pod_annotations[BIND_PHASE] == "success"
        assert NODE_LOCK not in annotations_of(sim, "nodes", NODE)


async def test_preferred_allocation_follows_the_annotation(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    node = NodeSettings(device_split_count=4, enable_get_preferred_allocation=True)
    async with node_stack(sim, plugin_dir, host_root, devices, node=node) as (kubelet, _):
        value = devices_value([(UUIDS[1], 1000, 0)])
        await submit(sim, scheduled_pod("pref", [container("main", 1)], to_allocate=value))
        await eventually(lambda: phase(sim, "pref") == "Running", what="pod running")
        allocation = kubelet.allocation("default", "pref")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        # The kubelet asked for our preference: a replica of the annotated GPU.
        assert main.resources[0].device_ids[0].startswith(UUIDS[1])
        assert main.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]


async def test_pending_pod_fallback_without_lock(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, _):
        value = devices_value([(UUIDS[0], 1000, 0)])
        await submit(
            sim, scheduled_pod("legacy", [container("main", 1)], to_allocate=value), lock=False
        )
        await eventually(lambda: phase(sim, "legacy") == "Running", what="pod running")
        assert annotations_of(sim, "pods", "legacy")[BIND_PHASE] == "success"
        allocation = kubelet.allocation("default", "legacy")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        assert main.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]


async def test_health_change_is_streamed_and_registered(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, plugin):
        await eventually(lambda: resource_counts(kubelet) == (8, 8))
        write_devices(devices, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1, healthy=False)])
        await eventually(lambda: resource_counts(kubelet) == (8, 4), what="replicas unhealthy")

        def second_unhealthy() -> bool:
            value = annotations_of(sim, "nodes", NODE).get(NVIDIA_REGISTER, "[]")
            return [d.health for d in decode_node_devices(value)] == [True, False]

        await eventually(second_unhealthy, what="register shows the unhealthy GPU")
        assert plugin.metrics.devices.labels(health="unhealthy")._value.get() == 1


async def test_requesting_handshake_is_answered_promptly(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices, register_interval_s=300.0):
        await eventually(lambda: NVIDIA_HANDSHAKE in annotations_of(sim, "nodes", NODE))
        await sim.server.patch(
            "nodes",
            NODE,
            {"metadata": {"annotations": {NVIDIA_HANDSHAKE: "Requesting_2026-01-01 00:00:00"}}},
            patch_type="merge",
        )
        # Answered by a pass the node watch woke, not by the 300 s tick.  (How many patches
        # that took is not asserted: a pass woken at start by a watch copy older than the first
        # patch may write the same annotations again, and may do so after this point.)
        await eventually(
            lambda: annotations_of(sim, "nodes", NODE)[NVIDIA_HANDSHAKE].startswith("Reported "),
            within=30.0,
            what="handshake answered long before the 300 s tick",
        )


async def test_kubelet_restart_and_plugin_restart(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, plugin):
        await eventually(lambda: resource_counts(kubelet) == (8, 8))
        starts = plugin.server.starts
        await kubelet.restart()
        await eventually(lambda: kubelet.registrations.get(RESOURCE) == 2, what="re-registered")
        await eventually(lambda: resource_counts(kubelet) == (8, 8), what="devices listed again")
        assert plugin.server.starts == starts + 1
        assert plugin.server.socket_present()

        # The plugin still allocates after the kubelet restart.
        value = devices_value([(UUIDS[0], 1000, 0)])
        await submit(sim, scheduled_pod("after", [container("main", 1)], to_allocate=value))
        await eventually(lambda: phase(sim, "after") == "Running", what="pod running")

    # A new plugin process on a kubelet that kept running.
    kubelet = KubeletStandIn(
        KubeletSettings(node_name=NODE, plugin_dir=plugin_dir, api_url=sim.url)
    )
    settings = plugin_settings(url=sim.url, plugin_dir=plugin_dir, devices=devices, host_root=None)
    async with kubelet:
        async with serving(settings) as first:
            await eventually(first.ready)
        assert not settings.socket_path.exists()  # removed on a clean stop
        async with serving(settings) as second:
            await eventually(second.ready)
            await eventually(lambda: kubelet.registrations.get(RESOURCE) == 2)
            await eventually(lambda: resource_counts(kubelet) == (8, 8))


async def test_not_ready_without_kubelet_and_running_without_gpus(
    sim: RunningApiServer, plugin_dir: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.yaml"
    settings = plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=missing,
        host_root=None,
        fail_on_init_error=False,
    )
    async with serving(settings) as plugin:
        assert plugin.server.serving
        assert plugin.inventory.gpus == ()
        await eventually(lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE))
        assert annotations_of(sim, "nodes", NODE)[NVIDIA_REGISTER] == "[]"
        assert (await http_get(plugin.metrics_port, "/healthz"))[0] == 200
        # not ready: no kubelet to register with
        assert (await http_get(plugin.metrics_port, "/readyz"))[0] == 503
    strict = plugin_settings(url=sim.url, plugin_dir=plugin_dir, devices=missing, host_root=None)
    with pytest.raises(BackendError, match="cannot read"):
        async with serving(strict):
            pass
