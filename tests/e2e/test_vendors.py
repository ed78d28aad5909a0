"""A heterogeneous cluster end to end: vendor plugin stand-ins register the devices the way each
vendor's plugin does, the scheduling loop asks the extender (over HTTP) to place vendor pods,
and the stand-ins give the containers what the annotations say."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from hami_kube.objects import PodView
from hami_kubesim.stack.invariants import check_all
from hami_kubesim.stack.objects import device_pod
from hami_kubesim.stack.settle import settled
from hami_kubesim.stack.spec import SystemSpec, gpu_model_node, vendor_node
from hami_kubesim.stack.state import ClusterState, Outcome, failed_scheduling, outcome
from hami_kubesim.stack.system import System, running_system
from hami_kubesim.vendors.inventory import VendorDevices, device_ids
from hami_protocol import keys
from hami_protocol.pod.devices import decode_pod_devices_canonical

pytestmark = pytest.mark.asyncio(loop_scope="module")

NS = "vendors"
DCU = VendorDevices(vendor="DCU", devices=2, memory_mib=16000, split=4)
NPU = VendorDevices(vendor="Ascend910B3", devices=8, memory_mib=65536)
NPU_CORE = VendorDevices(
    vendor="Ascend910B3",
    devices=2,
    memory_mib=65536,
    annotations={keys.ASCEND_NODE_VNPU_CORE: "true"},
)
T4 = gpu_model_node("mixed-node", "Tesla T4", count=2, memory_mib=15360)
GARBAGE_DCU = VendorDevices(
    vendor="DCU", annotations={keys.node_register_key("dcu"): "DCU-x,not,a,device"}
)
NODES = (
    vendor_node("dcu-node", DCU),
    vendor_node("npu-node", NPU),
    vendor_node("npu-core-node", NPU_CORE),
    vendor_node("mixed-node", DCU, gpus=T4.gpus),
    vendor_node("mlu-node", VendorDevices(vendor="MLU", devices=2, memory_mib=24576)),
    vendor_node("mt-node", VendorDevices(vendor="Mthreads", devices=2)),
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
        assert view.node_name in {"dcu-node", "mixed-node"}
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


async def test_a_garbage_dcu_register_fails_only_that_vendor_of_the_node(cluster: System) -> None:
    pinned = {"kubernetes.io/hostname": "garbage-node"}
    dcu = device_pod("dcu-there", {"hygon.com/dcunum": 1}, namespace=NS)
    gpu = device_pod("gpu-there", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, namespace=NS)
    for pod in (dcu, gpu):
        pod["spec"]["nodeSelector"] = pinned
        await cluster.create(pod)
    keys_ = [f"{NS}/dcu-there", f"{NS}/gpu-there"]
    state = await cluster.wait_for(settled(keys_), within=60, what="both settle")
    assert PodView(_pod(state, "gpu-there")).phase == "Running"
    refused = _pod(state, "dcu-there")
    assert outcome(state, refused) is Outcome.UNSCHEDULABLE
    assert "garbage-node" not in PodView(refused).node_name
    (message,) = failed_scheduling(state, refused)[-1:]
    assert "1 node annotation hami.io/node-dcu-register is invalid" in message
    await cluster.clear_pods(NS)


async def test_cambricon_and_moore_threads_pods_run_from_capacity_devices(cluster: System) -> None:
    mlu = {
        "cambricon.com/vmlu": 1,
        "cambricon.com/mlu.smlu.vmemory": 20,
        "cambricon.com/mlu.smlu.vcore": 25,
    }
    await cluster.create(device_pod("mlu", mlu, namespace=NS))
    await cluster.create(device_pod("mt", {"mthreads.com/vgpu": 1}, namespace=NS))
    names = [f"{NS}/mlu", f"{NS}/mt"]
    state = await cluster.wait_for(settled(names), within=60, what="MLU and MT pods settle")
    mlu_pod, mt_pod = PodView(_pod(state, "mlu")), PodView(_pod(state, "mt"))
    assert (mlu_pod.phase, mlu_pod.node_name) == ("Running", "mlu-node")
    assert mlu_pod.annotations[keys.CAMBRICON_DSMLU_ASSIGNED] == "true"
    assert mlu_pod.annotations[keys.devices_allocated_key("cambricon-mlu")].startswith(
        "mlu-node-cambricon-mlu-"
    )
    node = state.node("mlu-node")
    assert node is not None
    assert keys.CAMBRICON_DSMLU_LOCK not in PodView(node).annotations
    assert (mt_pod.phase, mt_pod.node_name) == ("Running", "mt-node")
    assert mt_pod.annotations[keys.devices_allocated_key("mthreads-vgpu")].startswith(
        "mt-node-mthreads-"
    )
    assert check_all(state) == ()
    await cluster.clear_pods(NS)


def _ascend_record(pod: dict[str, Any]) -> list[dict[str, Any]]:
    record = json.loads(PodView(pod).annotations["huawei.com/Ascend910B3"])
    assert isinstance(record, list)
    return record


async def test_an_ascend_template_pod_runs_on_the_npu_node_with_its_template(
    cluster: System,
) -> None:
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 16384}
    mode = {keys.ASCEND_VNPU_MODE: "template"}
    await cluster.create(device_pod("npu", limits, namespace=NS, annotations=mode))
    try:
        state = await cluster.wait_for(settled([f"{NS}/npu"]), within=10, what="npu settles")
        pod = _pod(state, "npu")
        view = PodView(pod)
        assert view.phase == "Running", failed_scheduling(state, pod)
        assert view.node_name == "npu-node"
        allocated = view.annotations[keys.devices_allocated_key("Ascend910B3")]
        assert allocated.split(",")[0] in device_ids(NPU, "npu-node")
        (entry,) = _ascend_record(pod)
        assert entry["temp"] == "vir05_1c_16g"
        assert entry["memory"] == 16384
        assert entry["UUID"] == allocated.split(",")[0]
        assert int(view.annotations[keys.ASCEND_PREDICATE_TIME]) > 0
        assert check_all(state) == ()
    finally:
        await cluster.clear_pods(NS)


async def test_an_ascend_hami_core_pod_runs_only_on_the_hami_core_node(cluster: System) -> None:
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 8192}
    mode = {keys.ASCEND_VNPU_MODE: "hami-core"}
    await cluster.create(device_pod("npu-soft", limits, namespace=NS, annotations=mode))
    try:
        state = await cluster.wait_for(
            settled([f"{NS}/npu-soft"]), within=10, what="npu-soft settles"
        )
        pod = _pod(state, "npu-soft")
        view = PodView(pod)
        assert view.phase == "Running", failed_scheduling(state, pod)
        assert view.node_name == "npu-core-node"
        (entry,) = _ascend_record(pod)
        assert entry["temp"] == ""
        assert entry["memory"] == 8192
        assert check_all(state) == ()
    finally:
        await cluster.clear_pods(NS)
