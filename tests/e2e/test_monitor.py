"""The vGPU monitor in the whole system: the device plugin prepares each container's cache
directory under the node's host root, the kubelet stand-in's containers keep their HAMi-core
regions there, and the node's monitor process reports each container's devices on ``/metrics``
with the memory limit the scheduler allocated, until the pod is deleted; the scheduler's GPU map
shows those figures beside the allocation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
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


async def test_the_gpu_map_shows_a_running_pods_memory_used_beside_its_limit(
    monitored: System,
) -> None:
    system = monitored
    await system.create(gpu_pod("infer", namespace=NS, memory_mib=2000, cores=20))
    state = await system.wait_for(settled([f"{NS}/infer"]), within=30, what="the pod settles")
    pod = state.pod(NS, "infer")
    assert pod is not None
    assert outcome(state, pod) is Outcome.RUNNING
    ((_, (device,)),) = container_devices(pod)
    (port,) = system.gpumap_ports.values()
    found: list[dict[str, Any]] = []

    async def shown() -> bool:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/api/v1/map") as response,
        ):
            doc = await response.json()
        (node,) = doc["nodes"]
        (card,) = [d for d in node["devices"] if d["id"] == device.uuid]
        holders = [h for h in card["holders"] if (h["namespace"], h["pod"]) == (NS, "infer")]
        found[:] = [node, card, *holders]
        return bool(holders) and holders[0]["usage"] is not None

    # The monitor is found through its Service's EndpointSlice (as the chart's), asked when the
    # map is, and remembered 15 s: the first view may find no region written yet.
    await eventually(shown, within=40, what="the map shows the pod's measured usage")
    node, card, holder = found
    assert node["monitor"]["error"] is None
    assert holder["memory"] == 2000
    usage = holder["usage"]
    assert usage["memoryLimit"] == 2000
    assert 0.2 * 2000 - 1 <= usage["memoryUsed"] <= 0.9 * 2000 + 1
    assert usage["utilization"] is not None
    assert usage["overLimit"] is False
    assert card["usage"]["memoryUsed"] >= usage["memoryUsed"]
    await system.clear_pods(NS)
