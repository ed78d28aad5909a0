"""The full flow for NVIDIA pods: webhook → scheduling loop → extender → kubelet → device plugin.

Every pod here goes through the real processes: the webhook mutates it at admission, the
scheduling loop (the chart's KubeSchedulerConfiguration) asks the extender to filter and bind,
the kubelet stand-in calls the device plugin's Allocate over its unix socket, and the env the
container got is compared with what the scheduler allocated.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_kube.objects import ObjectView
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
    allocated_devices,
    allocation_record,
    failed_scheduling,
    outcome,
    record_containers,
    record_envs,
)
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.settle import settled
from hami_protocol import keys

pytestmark = pytest.mark.asyncio(loop_scope="package")

NS = "flow"


def _pod(state: ClusterState, name: str, namespace: str = NS) -> dict[str, Any]:
    found = state.pod(namespace, name)
    assert found is not None, f"{namespace}/{name} not found"
    return dict(found)


def _env(pod: dict[str, Any], container: str) -> dict[str, str]:
    given = record_envs(
        record_containers(allocation_record(pod)).get(container) or {}, "nvidia.com/gpu"
    )
    assert given is not None, f"container {container} got no nvidia.com/gpu"
    return dict(given)


async def test_pods_run_with_what_the_scheduler_allocated(system: System) -> None:
    await system.ensure_namespace(NS)
    binpack = {"hami.io/gpu-scheduler-policy": "binpack", "nvidia.com/use-gputype": "T4"}
    multi = gpu_pod("multi", namespace=NS, memory_mib=2000, cores=10, containers=2)
    multi["spec"]["initContainers"] = [
        {
            "name": "warmup",
            "image": "example.invalid/warmup",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}},
        }
    ]
    pods = [
        gpu_pod("slice-1", namespace=NS, memory_mib=3000, cores=30, annotations=binpack),
        gpu_pod("slice-2", namespace=NS, memory_mib=5000, cores=20, annotations=binpack),
        gpu_pod("percent", namespace=NS, memory_percentage=25, cores=10),
        gpu_pod("whole-two", namespace=NS, gpus=2, annotations={"nvidia.com/use-gputype": "A100"}),
        multi,
    ]
    for pod in pods:
        await system.create(pod)
        await system.wait_for(settled([f"{NS}/{pod['metadata']['name']}"]), within=30, what="pod")
    state = system.state()
    for pod in pods:
        assert outcome(state, _pod(state, pod["metadata"]["name"])) is Outcome.RUNNING

    slice_1 = _pod(state, "slice-1")
    assert slice_1["spec"]["schedulerName"] == "hami-scheduler"  # set by the webhook
    annotations = ObjectView(slice_1).annotations
    assert annotations[keys.BIND_PHASE] == "success"
    assert annotations[keys.VGPU_NODE] == slice_1["spec"]["nodeName"] == "e2e-node-a"
    devices = allocated_devices(slice_1)
    assert devices is not None
    [[device]] = devices
    assert (device.usedmem, device.usedcores) == (3000, 30)
    env = _env(slice_1, "cuda")
    assert env["NVIDIA_VISIBLE_DEVICES"] == device.uuid
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"

    # binpack: the second slice shares the first one's card.
    slice_2 = allocated_devices(_pod(state, "slice-2"))
    assert slice_2 is not None
    assert slice_2[0][0].uuid == device.uuid

    # A count alone takes whole cards: all their memory.
    whole = _pod(state, "whole-two")
    assert whole["spec"]["nodeName"] == "e2e-node-b"
    whole_env = _env(whole, "cuda")
    assert whole_env["CUDA_DEVICE_MEMORY_LIMIT_0"] == whole_env["CUDA_DEVICE_MEMORY_LIMIT_1"]
    assert whole_env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "40960m"
    assert len(whole_env["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2

    # Each container, init containers included, got its own entry.
    multi_pod = _pod(state, "multi")
    assert [len(c) for c in allocated_devices(multi_pod) or ()] == [1, 1, 1]
    assert _env(multi_pod, "warmup")["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert _env(multi_pod, "cuda-1")["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"

    # No node lock is left once the device plugin answered.
    assert not any(keys.NODE_LOCK in ObjectView(n).annotations for n in state.nodes)
    assert check_all(state) == ()
    await system.clear_pods(NS)


async def test_a_pod_no_node_fits_reports_why(system: System) -> None:
    await system.ensure_namespace(NS)
    await system.create(gpu_pod("huge", namespace=NS, memory_mib=60000))
    state = await system.wait_for(settled([f"{NS}/huge"]), within=30, what="huge settles")
    pod = _pod(state, "huge")
    assert outcome(state, pod) is Outcome.UNSCHEDULABLE
    message = failed_scheduling(state, pod)[-1]
    assert message.startswith("0/3 nodes are available")
    assert "CardInsufficientMemory" in message
    await system.clear_pods(NS)


async def test_a_freed_card_goes_to_the_pod_waiting_for_it(system: System) -> None:
    await system.ensure_namespace(NS)
    target = system.node("e2e-node-c").gpus[0].uuid
    pinned = {"nvidia.com/use-gpuuuid": target}
    await system.create(gpu_pod("holder", namespace=NS, cores=100, annotations=pinned))
    await system.wait_for(settled([f"{NS}/holder"]), within=30, what="holder runs")
    await system.create(gpu_pod("waiter", namespace=NS, memory_mib=1000, annotations=pinned))
    state = await system.wait_for(settled([f"{NS}/waiter"]), within=30, what="waiter settles")
    assert outcome(state, _pod(state, "waiter")) is Outcome.UNSCHEDULABLE

    await system.delete_pod(NS, "holder")
    state = await system.wait_for(
        lambda s: (
            s.pod(NS, "waiter") is not None and outcome(s, _pod(s, "waiter")) is Outcome.RUNNING
        ),
        within=30,
        what="waiter runs once the card is free",
    )
    devices = allocated_devices(_pod(state, "waiter"))
    assert devices is not None
    assert devices[0][0].uuid == target
    assert check_all(state) == ()
    await system.clear_pods(NS)
