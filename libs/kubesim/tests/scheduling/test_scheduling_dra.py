"""The scheduling loop's DynamicResources plugin end to end: the emulated API server serves the
resource.k8s.io objects, the loop follows them and writes the claims' status before binding."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hami_kube.resources import (
    DEVICE_CLASSES,
    EVENTS,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from hami_kube.rest import KubeClient
from hami_kubesim.dra_objects import (
    device_class,
    exact_request,
    gpu_device,
    pod_claim,
    resource_claim,
    resource_slice,
)
from hami_kubesim.scheduler.config import SchedulerConfig
from hami_kubesim.scheduler.dynamic_resources import DELETE_PROTECTION
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.testing import RunningApiServer, eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.looptime]


async def add_node(api: KubeClient, name: str) -> None:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    await api.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "status": {"capacity": allocatable, "allocatable": allocatable},
        },
    )


async def add_pod(api: KubeClient, name: str, *claims: dict[str, Any]) -> dict[str, Any]:
    return await api.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "main", "image": "busybox"}],
                "resourceClaims": list(claims),
            },
        },
    )


async def add_claim(api: KubeClient, name: str, memory: str) -> dict[str, Any]:
    claim = resource_claim(name, exact_request("gpu", capacity={"memory": memory}))
    return await api.create(RESOURCE_CLAIMS, claim)


async def gpu_node(api: KubeClient, node: str = "node-a", *, with_class: bool = True) -> None:
    """A node with one shared 16Gi GPU in its slice (and the DeviceClass, unless told not)."""
    if with_class:
        await api.create(DEVICE_CLASSES, device_class())
    await add_node(api, node)
    await api.create(RESOURCE_SLICES, resource_slice(node, [gpu_device(0)]))


async def wait_bound(api: KubeClient, pod: str) -> str:
    seen: list[str] = []

    async def bound() -> bool:
        node = (await api.get(PODS, pod, namespace="default"))["spec"].get("nodeName")
        seen.extend([node] if node else [])
        return bool(node)

    await eventually(bound, within=30, what=f"pod {pod} bound")
    return seen[-1]


async def failure_message(api: KubeClient, pod: str) -> str:
    found: list[str] = []

    async def recorded() -> bool:
        items = (await api.list(EVENTS, namespace="default"))["items"]
        found[:] = [
            e["message"]
            for e in items
            if e["involvedObject"]["name"] == pod and e.get("reason") == "FailedScheduling"
        ]
        return bool(found)

    await eventually(recorded, within=30, what=f"FailedScheduling for {pod}")
    return found[-1]


def loop_for(sim: RunningApiServer, **changes: Any) -> SchedulingLoop:
    return SchedulingLoop(dataclasses.replace(SchedulerConfig(), **changes), api_url=sim.url)


async def test_two_claims_share_a_gpu_and_a_third_is_refused(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await gpu_node(kube)
    async with loop_for(sim):
        pods = {}
        for name, memory in (("a", "4Gi"), ("b", "4Gi")):
            await add_claim(kube, f"claim-{name}", memory)
            pods[name] = await add_pod(kube, f"pod-{name}", pod_claim("gpu", claim=f"claim-{name}"))
        assert await wait_bound(kube, "pod-a") == "node-a"
        assert await wait_bound(kube, "pod-b") == "node-a"
        await add_claim(kube, "claim-c", "10Gi")
        await add_pod(kube, "pod-c", pod_claim("gpu", claim="claim-c"))
        message = await failure_message(kube, "pod-c")
    # Preemption (not helpful: the node's status is unresolvable) adds its own sentence.
    assert message.startswith("0/1 nodes are available: 1 cannot allocate all claims. ")
    shares = set()
    for name in ("a", "b"):
        claim = await kube.get(RESOURCE_CLAIMS, f"claim-{name}", namespace="default")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["device"], result["consumedCapacity"]) == (
            "gpu-0",
            {"memory": "4Gi", "cores": "0"},
        )
        shares.add(result["shareID"])
        assert claim["status"]["reservedFor"] == [
            {"resource": "pods", "name": f"pod-{name}", "uid": pods[name]["metadata"]["uid"]}
        ]
        assert DELETE_PROTECTION in claim["metadata"]["finalizers"]
    assert len(shares) == 2
    refused = await kube.get(RESOURCE_CLAIMS, "claim-c", namespace="default")
    assert "allocation" not in (refused.get("status") or {})


async def test_an_allocated_claim_is_shared_by_a_second_pod_on_its_node(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await gpu_node(kube, "node-a")
    await add_node(kube, "node-b")  # no GPU: the claim's node selector keeps pods off it
    await add_claim(kube, "shared", "2Gi")
    async with loop_for(sim):
        await add_pod(kube, "first", pod_claim("gpu", claim="shared"))
        assert await wait_bound(kube, "first") == "node-a"
        await add_pod(kube, "second", pod_claim("gpu", claim="shared"))
        assert await wait_bound(kube, "second") == "node-a"
    claim = await kube.get(RESOURCE_CLAIMS, "shared", namespace="default")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["first", "second"]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1


async def test_a_missing_claim_waits_and_the_pod_schedules_once_it_exists(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await gpu_node(kube)
    async with loop_for(sim):
        await add_pod(kube, "early", pod_claim("gpu", claim="later"))
        message = await failure_message(kube, "early")
        assert message == (
            '0/1 nodes are available: resourceclaim.resource.k8s.io "later" not found.'
        )
        await add_claim(kube, "later", "1Gi")
        assert await wait_bound(kube, "early") == "node-a"


async def test_a_template_claim_not_yet_created(sim: RunningApiServer, kube: KubeClient) -> None:
    await gpu_node(kube)
    async with loop_for(sim):
        await add_pod(kube, "templated", pod_claim("gpu", template="tmpl"))
        message = await failure_message(kube, "templated")
    assert message == (
        '0/1 nodes are available: pod "default/templated": ResourceClaim not created yet.'
    )


async def test_a_missing_device_class_is_named(sim: RunningApiServer, kube: KubeClient) -> None:
    await gpu_node(kube, with_class=False)
    await add_claim(kube, "c", "1Gi")
    async with loop_for(sim):
        await add_pod(kube, "p", pod_claim("gpu", claim="c"))
        message = await failure_message(kube, "p")
    assert message.startswith("0/1 nodes are available: 1 device class gpu.hami.io does not exist.")


async def test_with_dynamic_resources_off_claims_are_ignored(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await add_node(kube, "node-a")
    async with loop_for(sim, dynamic_resources=False):
        await add_pod(kube, "p", pod_claim("gpu", claim="nowhere"))
        assert await wait_bound(kube, "p") == "node-a"
