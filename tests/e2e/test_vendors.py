"""A heterogeneous cluster end to end: mixed nodes, pods asking two vendors, and bad vendor input.

Vendor plugin stand-ins register the devices the way each vendor's plugin does, the scheduling
loop asks the extender (over HTTP) to place the pods, and the stand-ins give the containers what
the annotations say.  What a node says that cannot be read (a register that does not decode,
node capacity without the vendor's memory resource, a MetaX inventory missing fields) fails
only that vendor on that node: FailedNodes names the key, one Warning Event is recorded on the
node, and the node's other vendors and the other nodes keep working.  Each vendor on its own:
``test_every_vendor.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from hami_kube.objects import PodView
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import ClusterState, Outcome, failed_scheduling, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import device_pod
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SystemSpec, gpu_model_node, vendor_node
from hami_kubesim.testing import eventually
from hami_kubesim.vendors.inventory import VendorDevices, device_ids
from hami_protocol import keys
from hami_protocol.pod.devices import decode_pod_devices_canonical

pytestmark = pytest.mark.asyncio(loop_scope="module")

NS = "vendors"
DCU = VendorDevices(vendor="DCU", devices=2, memory_mib=16000, split=4)
MLU = VendorDevices(vendor="MLU", devices=2, memory_mib=24576)
MLU_NO_MEMORY = VendorDevices(
    vendor="MLU", devices=2, unserved=frozenset({"cambricon.com/mlu.smlu.vmemory"})
)
METAX_S_MISSING = VendorDevices(
    vendor="Metax-SGPU",
    annotations={keys.METAX_SGPU_DEVICES: '[{"uuid": "GPU-1", "bdf": "0000:10:00.0"}]'},
)
T4 = gpu_model_node("mixed-node", "Tesla T4", count=2, memory_mib=15360)
GARBAGE_DCU = VendorDevices(
    vendor="DCU", annotations={keys.node_register_key("dcu"): "DCU-x,not,a,device"}
)
NODES = (
    vendor_node("dcu-node", DCU),
    vendor_node("mixed-node", DCU, gpus=T4.gpus),
    vendor_node("mlu-node", MLU),
    vendor_node("mlu-bare-node", MLU_NO_MEMORY, VendorDevices(vendor="Mthreads", devices=1)),
    vendor_node("metax-bad-node", METAX_S_MISSING, DCU),
    vendor_node(
        "garbage-node",
        GARBAGE_DCU,
        gpus=gpu_model_node("g", "Tesla T4", count=1, memory_mib=15360).gpus,
    ),
)
DCU_ALLOCATED = keys.devices_allocated_key("dcu")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[System]:
    spec = SystemSpec(nodes=NODES, namespaces=("default", "kube-system", "hami-system", NS))
    async with running_system(spec) as running:
        yield running


def _pod(state: ClusterState, name: str) -> dict[str, Any]:
    found = state.pod(NS, name)
    assert found is not None, f"{NS}/{name} not found"
    return dict(found)


def _dcu_devices(pod: dict[str, Any]) -> list[str]:
    listed = decode_pod_devices_canonical(PodView(pod).annotations[DCU_ALLOCATED])
    return [device.uuid for container in listed for device in container]


async def test_dcu_pods_run_on_dcu_nodes_with_their_plugin_reading_the_annotations(
    cluster: System,
) -> None:
    pods = [
        device_pod(f"dcu-{i}", {"hygon.com/dcunum": 1, "hygon.com/dcumem": 6000}, namespace=NS)
        for i in range(3)
    ]
    for pod in pods:
        await cluster.create(pod)
    names = [f"{NS}/dcu-{i}" for i in range(3)]
    state = await cluster.wait_for(settled(names), within=60, what="DCU pods settle")
    for i in range(3):
        pod = _pod(state, f"dcu-{i}")
        view = PodView(pod)
        assert view.phase == "Running", (view.phase, failed_scheduling(state, pod))
        assert view.node_name in {"dcu-node", "mixed-node", "metax-bad-node"}
        assert set(_dcu_devices(pod)) <= set(device_ids(DCU, view.node_name))
        assert view.annotations[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        assert view.annotations[keys.devices_to_allocate_key("dcu")].strip(";") == ""
    assert check_all(state) == ()
    await cluster.clear_pods(NS)


async def test_a_pod_asking_nvidia_and_dcu_lands_on_the_mixed_node(cluster: System) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "hygon.com/dcunum": 1}
    await cluster.create(device_pod("both", limits, namespace=NS))
    state = await cluster.wait_for(settled([f"{NS}/both"]), within=60, what="both settles")
    pod = _pod(state, "both")
    view = PodView(pod)
    assert view.phase == "Running", failed_scheduling(state, pod)
    assert view.node_name == "mixed-node"
    assert keys.NVIDIA_DEVICES_ALLOCATED in view.annotations
    assert set(_dcu_devices(pod)) <= set(device_ids(DCU, "mixed-node"))
    assert check_all(state) == ()
    await cluster.clear_pods(NS)


def _pinned(name: str, limits: Mapping[str, str | int], node: str) -> dict[str, Any]:
    pod = device_pod(name, limits, namespace=NS)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def _warnings(state: ClusterState, node: str) -> list[str]:
    """The InvalidDeviceAnnotation Warning Events recorded on ``node``."""
    return [
        str(event.get("message", ""))
        for event in state.events
        if event.get("reason") == "InvalidDeviceAnnotation"
        and (event.get("involvedObject") or {}).get("name") == node
    ]


def _log_lines(cluster: System, node: str) -> list[str]:
    """The scheduler's ``invalid_node_annotation`` log lines about ``node``."""
    (scheduler,) = (p for p in cluster.services() if p.name.startswith("scheduler"))
    text = scheduler.spec.log_file.read_text(errors="replace")
    return [
        line for line in text.splitlines() if "invalid_node_annotation" in line and node in line
    ]


async def _only_that_vendor_fails(
    cluster: System,
    node: str,
    bad: Mapping[str, str | int],
    beside: Mapping[str, str | int],
    *,
    elsewhere: str | None = None,
) -> tuple[str, str]:
    """A pod asking ``bad`` pinned to ``node`` is refused while one asking ``beside`` there runs
    (and, with ``elsewhere``, an unpinned ``bad`` pod runs on that node): the refused pod's last
    FailedScheduling message and the node's one InvalidDeviceAnnotation Warning (logged once)."""
    pods = [_pinned("there", bad, node), _pinned("beside", beside, node)]
    if elsewhere is not None:
        pods.append(device_pod("elsewhere", bad, namespace=NS))
    try:
        for pod in pods:
            await cluster.create(pod)
        names = [f"{NS}/{pod['metadata']['name']}" for pod in pods]
        state = await cluster.wait_for(settled(names), within=60, what=f"{names} settle")
        assert PodView(_pod(state, "beside")).phase == "Running"
        if elsewhere is not None:
            placed = PodView(_pod(state, "elsewhere"))
            assert (placed.phase, placed.node_name) == ("Running", elsewhere)
        refused = _pod(state, "there")
        assert outcome(state, refused) is Outcome.UNSCHEDULABLE
        (message,) = failed_scheduling(state, refused)[-1:]
        (warning,) = _warnings(state, node)
        await eventually(lambda: bool(_log_lines(cluster, node)), what="the problem is logged")
        assert len(_log_lines(cluster, node)) == 1
        assert check_all(state) == ()
        return message, warning
    finally:
        await cluster.clear_pods(NS)


async def test_a_garbage_dcu_register_fails_only_that_vendor_of_the_node(cluster: System) -> None:
    message, warning = await _only_that_vendor_fails(
        cluster,
        "garbage-node",
        {"hygon.com/dcunum": 1},
        {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000},
        elsewhere="dcu-node",
    )
    assert "1 node annotation hami.io/node-dcu-register is invalid" in message
    assert "hami.io/node-dcu-register" in warning


async def test_capacity_without_the_memory_resource_fails_only_that_vendor_of_the_node(
    cluster: System,
) -> None:
    message, warning = await _only_that_vendor_fails(
        cluster,
        "mlu-bare-node",
        {"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 4},
        {"mthreads.com/vgpu": 1},
        elsewhere="mlu-node",
    )
    assert "node capacity cambricon.com/mlu.smlu.vmemory is invalid" in message
    assert "cambricon.com/mlu.smlu.vmemory" in warning


async def test_a_metax_inventory_missing_fields_fails_only_metax_on_the_node(
    cluster: System,
) -> None:
    message, warning = await _only_that_vendor_fails(
        cluster,
        "metax-bad-node",
        {"metax-tech.com/sgpu": 1, "metax-tech.com/vcore": 10, "metax-tech.com/vmemory": 1},
        {"hygon.com/dcunum": 1},
    )
    assert f"node annotation {keys.METAX_SGPU_DEVICES} is invalid" in message
    assert "missing field" in warning
