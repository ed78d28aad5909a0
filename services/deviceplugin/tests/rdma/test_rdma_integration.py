"""The GPU and RDMA plugins of one daemon against kubesim's API server and kubelet stand-in.

The node is the fake sysfs GPU server (8 GPUs, 4 NICs with 4 VFs each, 4 PCIe switches); GPUs
come from the fake backend with their bus ids, NICs from sysfs discovery.  Pods are prepared as
the scheduler leaves them: vgpu and rdma to-allocate lists, node lock, bind-phase allocating.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hami_deviceplugin.app import RunningPlugin
from hami_kube.objects import PodView
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.testing import RunningApiServer
from hami_protocol.keys import (
    BIND_PHASE,
    NODE_LOCK,
    NVIDIA_DEVICES_TO_ALLOCATE,
    NVIDIA_REGISTER,
    RDMA_DEVICES_ALLOCATED,
    RDMA_DEVICES_TO_ALLOCATE,
    RDMA_REGISTER,
)
from hami_protocol.node.registry import decode_node_devices
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices
from hami_protocol.topology.layout import decode_rdma_register, list_device_id

from ..helpers import (
    NODE,
    RESOURCE,
    annotations_of,
    devices_value,
    events_for,
    eventually,
    gpu,
    http_get,
    node_stack,
    phase,
    resource_counts,
    scheduled_pod,
    submit,
    write_atomically,
    write_devices,
)
from .fake_sysfs import GpuNode, gpu_node

RDMA = "koordinator.sh/rdma"
GPU_UUIDS = tuple(f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(8))


@pytest.fixture
def machine(tmp_path: Path) -> GpuNode:
    return gpu_node(tmp_path / "sys")


@pytest.fixture
def devices(tmp_path: Path, machine: GpuNode) -> Path:
    path = tmp_path / "gpus.yaml"
    write_devices(
        path, [gpu(GPU_UUIDS[i], i, pci_bus_id=g.bus_id) for i, g in enumerate(machine.gpus)]
    )
    return path


@contextlib.asynccontextmanager
async def rdma_stack(
    sim: RunningApiServer, plugin_dir: Path, machine: GpuNode, devices: Path, **overrides: Any
) -> AsyncIterator[tuple[KubeletStandIn, RunningPlugin]]:
    values: dict[str, Any] = {
        "sysfs_root": machine.sysfs.root,
        "rdma_discovery": "sysfs",
        "rdma_poll_interval_s": 0.05,
    }
    values.update(overrides)
    async with node_stack(sim, plugin_dir, None, devices, **values) as (kubelet, plugin):
        if plugin.rdma is not None:
            await eventually(
                lambda: resource_counts(kubelet, RDMA)[1] > 0, what="kubelet knows the NICs"
            )
        yield kubelet, plugin


def rdma_value(*containers: Sequence[str]) -> str:
    return encode_pod_devices(
        tuple(
            tuple(ContainerDevice(list_device_id(bus), "RDMA", 0, 0) for bus in container)
            for container in containers
        )
    )


def container(name: str, **limits: int) -> dict[str, Any]:
    names = {"gpu": RESOURCE, "rdma": RDMA}
    spec: dict[str, Any] = {"name": name, "image": "cuda"}
    if limits:
        spec["resources"] = {"limits": {names[k]: str(v) for k, v in limits.items()}}
    return spec


def rdma_pod(
    name: str,
    containers: Sequence[dict[str, Any]],
    *,
    gpus: str,
    rdma: str,
    init: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    return scheduled_pod(
        name,
        containers,
        init=init,
        to_allocate=gpus,
        extra_annotations={RDMA_DEVICES_TO_ALLOCATE: rdma, RDMA_DEVICES_ALLOCATED: rdma},
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    gpus: str | None
    rdma: str | None
    phase: str | None


@contextlib.asynccontextmanager
async def recording(sim: RunningApiServer, name: str) -> AsyncIterator[list[Snapshot]]:
    """Every version of the pod's allocation annotations while the block runs."""
    seen: list[Snapshot] = []
    watch = sim.server.watch("pods", namespace="default", field_selector=f"metadata.name={name}")

    async def follow() -> None:
        async for event in watch:
            annotations = PodView(event.object).annotations
            snapshot = Snapshot(
                annotations.get(NVIDIA_DEVICES_TO_ALLOCATE),
                annotations.get(RDMA_DEVICES_TO_ALLOCATE),
                annotations.get(BIND_PHASE),
            )
            if not seen or seen[-1] != snapshot:
                seen.append(snapshot)

    task = asyncio.create_task(follow(), name=f"record-{name}")
    try:
        yield seen
    finally:
        await watch.aclose()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def consumed(value: str | None) -> bool:
    return value is not None and value.strip(";") == ""


def assert_success_only_when_both_consumed(history: list[Snapshot]) -> None:
    for snapshot in history:
        if snapshot.phase == "success":
            assert consumed(snapshot.gpus)
            assert consumed(snapshot.rdma)
    assert history[-1].phase == "success"


async def test_registration_of_both_plugins(
    sim: RunningApiServer, plugin_dir: Path, machine: GpuNode, devices: Path
) -> None:
    async with rdma_stack(sim, plugin_dir, machine, devices) as (kubelet, plugin):
        assert plugin.rdma is not None
        assert kubelet.registrations[RDMA] == 1
        assert kubelet.registrations[RESOURCE] == 1
        assert resource_counts(kubelet, RDMA) == (400, 400)
        assert plugin.settings.rdma_socket_path.name == "koordinator-rdma.sock"
        await eventually(lambda: RDMA_REGISTER in annotations_of(sim, "nodes", NODE))
        node_annotations = annotations_of(sim, "nodes", NODE)
        nics = decode_rdma_register(node_annotations[RDMA_REGISTER])
        assert [(n.id, n.name, n.minor, n.numa, n.healthy) for n in nics] == [
            (p.bus_id, p.name, i, p.numa, True) for i, p in enumerate(machine.nics)
        ]
        assert [len(n.vfs) for n in nics] == [4, 4, 4, 4]
        # GPUs and NICs name the same switches and root complexes.
        registered = decode_node_devices(node_annotations[NVIDIA_REGISTER])
        nic_places = {(n.pcie_switch, n.pcie_root, n.numa) for n in nics}
        gpu_places = {(d.pcie_switch, d.pcie_root, d.numa) for d in registered}
        assert gpu_places == nic_places
        assert len(nic_places) == 4
        await eventually(
            lambda: sim.server.get("nodes", NODE)["status"]["allocatable"].get(RDMA) == "400"
        )
        assert (await http_get(plugin.metrics_port, "/readyz"))[0] == 200
        _, text = await http_get(plugin.metrics_port, "/metrics")
        assert 'hami_deviceplugin_rdma_nics{health="healthy",zone="vGPU"} 4.0' in text
        assert (
            'hami_deviceplugin_rdma_kubelet_registrations_total{outcome="success",zone="vGPU"} 1.0'
            in text
        )

        # A port goes down: 100 units unhealthy, the register says so.
        state = machine.sysfs.root / "class" / "infiniband" / "mlx5_2" / "ports" / "1" / "state"
        write_atomically(state, "1: DOWN\n")  # as sysfs shows it: never an empty state file
        await eventually(lambda: resource_counts(kubelet, RDMA) == (400, 300), what="NIC unhealthy")

        def third_unhealthy() -> bool:
            value = annotations_of(sim, "nodes", NODE).get(RDMA_REGISTER)
            return value is not None and [n.healthy for n in decode_rdma_register(value)] == [
                True,
                True,
                False,
                True,
            ]

        await eventually(third_unhealthy, what="register shows the unhealthy NIC")


async def test_gpu_and_vf_in_one_container(
    sim: RunningApiServer, plugin_dir: Path, machine: GpuNode, devices: Path
) -> None:
    async with rdma_stack(sim, plugin_dir, machine, devices) as (kubelet, plugin):
        vf_bus, vf_uverbs = machine.nics[1].vfs[2]
        gpus = devices_value([(GPU_UUIDS[2], 4000, 50)])
        rdma = rdma_value([vf_bus])
        pod = rdma_pod("train", [container("main", gpu=1, rdma=1)], gpus=gpus, rdma=rdma)
        async with recording(sim, "train") as history:
            await submit(sim, pod)
            await eventually(lambda: phase(sim, "train") == "Running", what="pod running")
            await eventually(lambda: bool(history) and history[-1].phase == "success")

        # Whichever plugin the kubelet called first left the pod allocating for the other.
        partial = [s for s in history if consumed(s.gpus) != consumed(s.rdma)]
        assert partial
        assert {s.phase for s in partial} == {"allocating"}
        assert_success_only_when_both_consumed(history)
        assert NODE_LOCK not in annotations_of(sim, "nodes", NODE)

        allocation = kubelet.allocation("default", "train")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        assert main.envs["NVIDIA_VISIBLE_DEVICES"] == GPU_UUIDS[2]
        assert main.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
        given = main.resource(RDMA)
        assert given is not None
        assert len(given.device_ids) == 1
        assert [(d.container_path, d.host_path, d.permissions) for d in given.devices] == [
            (f"/dev/infiniband/{vf_uverbs}", f"/dev/infiniband/{vf_uverbs}", "rw"),
            ("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw"),
        ]
        pod_annotations = annotations_of(sim, "pods", "train")
        assert pod_annotations[RDMA_DEVICES_ALLOCATED] == rdma  # never rewritten
        record = json.loads(pod_annotations["kubesim.hami.io/container-allocations"])
        kinds = {r["resource"] for r in record["containers"][0]["resources"]}
        assert kinds == {RESOURCE, RDMA}
        assert plugin.rdma is not None
        rdma_ok = plugin.metrics.rdma_allocate_requests.labels(outcome="success")._value.get()
        assert rdma_ok == 1
        assert plugin.metrics.allocate_requests.labels(outcome="success")._value.get() == 1


async def test_rdma_last_completes_the_pod(
    sim: RunningApiServer, plugin_dir: Path, machine: GpuNode, devices: Path
) -> None:
    async with rdma_stack(sim, plugin_dir, machine, devices) as (kubelet, _):
        gpus = devices_value([(GPU_UUIDS[0], 1000, 0)], [])  # init "setup", then "main"
        pf = machine.nics[0]
        rdma = rdma_value([], [pf.bus_id, machine.nics[1].bus_id])  # two whole NICs
        pod = rdma_pod(
            "late",
            [container("main", rdma=200)],
            init=[container("setup", gpu=1)],
            gpus=gpus,
            rdma=rdma,
        )
        async with recording(sim, "late") as history:
            await submit(sim, pod)
            await eventually(lambda: phase(sim, "late") == "Running", what="pod running")
            await eventually(lambda: bool(history) and history[-1].phase == "success")
        # The GPU plugin went first and left the pod to the RDMA plugin.
        assert Snapshot(";;", rdma, "allocating") in history
        assert_success_only_when_both_consumed(history)
        assert NODE_LOCK not in annotations_of(sim, "nodes", NODE)
        allocation = kubelet.allocation("default", "late")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        given = main.resource(RDMA)
        assert given is not None
        assert len(given.device_ids) == 200
        assert [d.host_path for d in given.devices] == [
            "/dev/infiniband/uverbs0",
            "/dev/infiniband/uverbs1",
            "/dev/infiniband/rdma_cm",
        ]
        assert RESOURCE not in {r.resource for r in main.resources}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown-nic", "0000:5e:00.0 is not an RDMA NIC or VF of node"),
        ("misaligned", "device number not matched"),
    ],
)
async def test_bad_rdma_input_fails_the_pod(
    sim: RunningApiServer,
    plugin_dir: Path,
    machine: GpuNode,
    devices: Path,
    case: str,
    message: str,
) -> None:
    async with rdma_stack(sim, plugin_dir, machine, devices) as (_, plugin):
        gpus = devices_value([(GPU_UUIDS[0], 1000, 0)], [])
        if case == "unknown-nic":
            rdma = rdma_value(["0000:5e:00.0"], [])
        else:
            # The scheduler put the NIC on the first container, the pod asks for it on the second.
            rdma = rdma_value([machine.nics[0].vfs[0][0]], [])
        containers = (
            [container("main", gpu=1, rdma=1), container("side")]
            if case == "unknown-nic"
            else [container("main", gpu=1), container("side", rdma=1)]
        )
        name = f"bad-{case}"
        await submit(sim, rdma_pod(name, containers, gpus=gpus, rdma=rdma))
        await eventually(lambda: phase(sim, name) == "Failed", what="rejected by the kubelet")
        pod = sim.server.get("pods", name, namespace="default")
        assert message in str(pod["status"].get("message", ""))
        assert pod["status"].get("reason") == "UnexpectedAdmissionError"
        pod_annotations = PodView(pod).annotations
        assert pod_annotations[BIND_PHASE] == "failed"
        assert pod_annotations[RDMA_DEVICES_TO_ALLOCATE] == rdma  # untouched
        await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        await eventually(lambda: bool(events_for(sim, name)), what="AllocateFailed event")
        assert message in events_for(sim, name)[0]["message"]
        assert plugin.rdma is not None
        assert plugin.metrics.rdma_allocate_failures.labels(reason="invalid")._value.get() == 1


async def test_fake_nics_and_whole_nic(
    sim: RunningApiServer, plugin_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "devices.yaml"
    nic = {
        "name": "mlx5_0",
        "pci_bus_id": "0000:1f:00.0",
        "numa": 1,
        "pcie_switch": "0000:1a:00.0",
        "pcie_root": "pci0000:17",
        "labels": {"type": "fakeW"},
        "uverbs": "uverbs3",
    }
    write_devices(path, [gpu(GPU_UUIDS[0], 0)], [nic])
    async with node_stack(sim, plugin_dir, None, path) as (kubelet, plugin):
        assert plugin.rdma is not None
        await eventually(lambda: resource_counts(kubelet, RDMA) == (100, 100))
        await eventually(lambda: RDMA_REGISTER in annotations_of(sim, "nodes", NODE))
        (registered,) = decode_rdma_register(annotations_of(sim, "nodes", NODE)[RDMA_REGISTER])
        assert (registered.id, registered.numa, dict(registered.labels)) == (
            "0000:1f:00.0",
            1,
            {"type": "fakeW"},
        )
        rdma = rdma_value(["0000:1f:00.0"])
        pod = scheduled_pod(
            "whole",
            [container("main", rdma=100)],
            to_allocate=";",
            extra_annotations={RDMA_DEVICES_TO_ALLOCATE: rdma},
        )
        await submit(sim, pod)
        await eventually(lambda: phase(sim, "whole") == "Running", what="pod running")
        allocation = kubelet.allocation("default", "whole")
        assert allocation is not None
        main = allocation.container("main")
        assert main is not None
        given = main.resource(RDMA)
        assert given is not None
        assert [d.host_path for d in given.devices] == [
            "/dev/infiniband/uverbs3",
            "/dev/infiniband/rdma_cm",
        ]
        assert annotations_of(sim, "pods", "whole")[BIND_PHASE] == "success"


async def test_rdma_off_removes_a_stale_register(
    sim: RunningApiServer, plugin_dir: Path, machine: GpuNode, devices: Path
) -> None:
    await sim.server.patch(
        "nodes",
        NODE,
        {"metadata": {"annotations": {RDMA_REGISTER: '{"v":1,"nics":[]}'}}},
        patch_type="merge",
    )
    async with rdma_stack(sim, plugin_dir, machine, devices, enable_rdma=False) as (
        kubelet,
        plugin,
    ):
        assert plugin.rdma is None
        await eventually(lambda: RDMA_REGISTER not in annotations_of(sim, "nodes", NODE))
        assert RDMA not in kubelet.registrations
        assert not plugin.settings.rdma_socket_path.exists()


async def test_kubelet_restart_reregisters_both_plugins(
    sim: RunningApiServer, plugin_dir: Path, machine: GpuNode, devices: Path
) -> None:
    async with rdma_stack(sim, plugin_dir, machine, devices) as (kubelet, plugin):
        assert plugin.rdma is not None
        starts = plugin.rdma.server.starts
        await kubelet.restart()
        await eventually(lambda: kubelet.registrations.get(RDMA) == 2, what="RDMA re-registered")
        await eventually(lambda: kubelet.registrations.get(RESOURCE) == 2, what="GPU re-registered")
        await eventually(
            lambda: resource_counts(kubelet, RDMA) == (400, 400), what="NICs listed again"
        )
        assert plugin.rdma.server.starts == starts + 1
        assert plugin.rdma.server.socket_present()
        await eventually(plugin.ready, what="ready again")
    assert not plugin.settings.rdma_socket_path.exists()  # removed on a clean stop
