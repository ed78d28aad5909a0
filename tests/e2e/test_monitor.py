"""The vGPU monitor in the whole system: the device plugin prepares each container's cache
directory under the node's host root, the kubelet stand-in's containers keep their HAMi-core
regions there, and the node's monitor process reports each container's devices on ``/metrics``
with the memory limit the scheduler allocated, until the pod is deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from hami_kube.objects import PodView
from hami_kubesim.stack.checks.usage import monitor_problems
from hami_kubesim.stack.state import Outcome, container_devices, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.services import HOOK_PATH
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, gpu_model_node
from hami_kubesim.testing import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE = "e2e-monitor"
NS = "monitored"
MIB = 1 << 20


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def monitored() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=(gpu_model_node(NODE, "Tesla T4", count=2, memory_mib=15360),),
        namespaces=("default", "kube-system", "hami-system", NS),
        scheduler=SchedulerOptions(node_lock_timeout="5s"),
        vgpu_monitor=True,
        workload_interval=0.2,
    )
    async with running_system(spec) as running:
        yield running


async def test_the_monitor_reports_each_container_as_allocated_until_the_pod_goes(
    monitored: System,
) -> None:
    system = monitored
    assert set(system.monitors) == {NODE}
    await system.create(gpu_pod("train", namespace=NS, gpus=2, memory_mib=3000, cores=30))
    await system.create(gpu_pod("serve", namespace=NS, memory_mib=1000, containers=2))
    keys = [f"{NS}/train", f"{NS}/serve"]
    state = await system.wait_for(settled(keys), within=30, what="both pods settle")
    pods = [state.pod(NS, "train"), state.pod(NS, "serve")]
    assert all(p is not None and outcome(state, p) is Outcome.RUNNING for p in pods)

    async def reported() -> bool:
        return not monitor_problems(system.state(), await system.monitor_usage())

    await eventually(reported, within=20, what="the monitor reports every container")
    usage = await system.monitor_usage()
    train = state.pod(NS, "train")
    assert train is not None
    ((name, devices),) = container_devices(train)
    readings = usage.of(NS, "train", name)
    assert [r.uuid for r in readings] == [d.uuid for d in devices]
    assert len({r.uuid for r in readings}) == 2
    for reading in readings:
        assert reading.limit_bytes == 3000 * MIB
        assert reading.used_bytes is not None
        assert 0.2 * 3000 * MIB - 1 <= reading.used_bytes <= 0.9 * 3000 * MIB
        assert reading.utilization is not None
        assert 0 <= reading.utilization <= 30
    serving = {c for ns, pod, c in usage.containers if (ns, pod) == (NS, "serve")}
    assert serving == {"cuda-0", "cuda-1"}
    uid = PodView(train).uid
    cache_dir = system.host_roots[NODE] / HOOK_PATH / "containers" / f"{uid}_{name}"
    assert [p.suffix for p in cache_dir.iterdir()] == [".cache"]

    await system.delete_pod(NS, "train")
    await system.wait_for(
        lambda s: s.pod(NS, "train") is None, within=30, what="the pod is deleted"
    )

    async def gone() -> bool:
        return (NS, "train", name) not in (await system.monitor_usage()).containers

    await eventually(gone, within=20, what="the deleted pod's series leave /metrics")
    still = await system.monitor_usage()
    assert still.of(NS, "serve", "cuda-0")
    await system.clear_pods(NS)
