"""DRA in the whole system: a node whose device plugin runs ``--mode dra`` publishes its 16 GiB
GPU in a ResourceSlice; the cluster's kube-scheduler (the scheduling loop) allocates claims from
it, the kubelet stand-in prepares them through the plugin's socket and runs the containers with
the CDI spec's HAMi-core env, and the node's vGPU monitor reports them.  Two 4 GiB claims (one
from a ResourceClaimTemplate, one written by hand) share the GPU, a 10 GiB one is refused with
the allocator's reason until one of them goes; deleting a pod unprepares its claim (CDI spec
gone) and the claim made for it goes with it.  The extender never counts the DRA node's GPU."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from hami_kube.objects import ObjectView, PodView
from hami_kubesim import dra_objects as dra
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.checks.usage import monitor_problems
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
    allocation_record,
    failed_scheduling,
    outcome,
    record_containers,
    record_envs,
)
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import (
    DRA_CLAIMS_LABEL,
    SCHEDULER_GPUMAP_PROXY,
    claim_pod,
    gpu_pod,
)
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, dra_node, gpu_model_node
from hami_kubesim.testing import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

DRA_NODE = "e2e-dra"
PLUGIN_NODE = "e2e-dp"
NS = "claims"
CONVERTED = "converted"
"""A namespace labelled for the webhook's DRA conversion (``SystemSpec.dra_claims``)."""
MIB = 1 << 20


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=(
            dra_node(DRA_NODE, memory_mib=16384),
            gpu_model_node(PLUGIN_NODE, "Tesla T4", count=1, memory_mib=15360),
        ),
        namespaces=("default", "kube-system", "hami-system", NS),
        scheduler=SchedulerOptions(node_lock_timeout="5s"),
        vgpu_monitor=True,
        workload_interval=0.2,
        dra_claims=True,
    )
    async with running_system(spec) as running:
        key, value = DRA_CLAIMS_LABEL
        await running.create(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": CONVERTED, "labels": {key: value}},
            }
        )
        yield running


def _request(memory: str) -> dict[str, Any]:
    return dra.exact_request("gpu", capacity={"memory": memory})


async def _create(system: System, resource: str, obj: Mapping[str, Any]) -> None:
    await system.api.create(resource, dict(obj))


def _claim_env(state: ClusterState, name: str) -> Mapping[str, str]:
    pod = state.pod(NS, name)
    assert pod is not None
    container = record_containers(allocation_record(pod))["cuda"]
    env = record_envs(container, "claim:gpu")
    assert env is not None, f"{name}: no claim entry in {container}"
    return env


def _claim_name(state: ClusterState, pod_name: str) -> str:
    pod = state.pod(NS, pod_name)
    assert pod is not None
    (status,) = PodView(pod).status.get("resourceClaimStatuses") or [{}]
    return str(status.get("resourceClaimName") or "")


async def test_two_4gib_claims_share_the_gpu_and_a_10gib_one_waits_for_room(
    system: System,
) -> None:
    await _create(
        system,
        "resourceclaimtemplates",
        dra.claim_template("gpu-4g", _request("4Gi"), namespace=NS),
    )
    await _create(
        system, "resourceclaims", dra.resource_claim("by-hand", _request("4Gi"), namespace=NS)
    )
    await _create(
        system, "resourceclaims", dra.resource_claim("big", _request("10Gi"), namespace=NS)
    )
    await system.create(claim_pod("templated", namespace=NS, template="gpu-4g"))
    await system.create(claim_pod("handmade", namespace=NS, claim="by-hand"))
    pair = [f"{NS}/templated", f"{NS}/handmade"]
    state = await system.wait_for(settled(pair), within=40, what="both claim pods settle")
    for name in ("templated", "handmade"):
        pod = state.pod(NS, name)
        assert pod is not None, name
        assert outcome(state, pod) is Outcome.RUNNING, name
        assert PodView(pod).node_name == DRA_NODE
        env = _claim_env(state, name)
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert env["CUDA_DEVICE_SM_LIMIT"] == "0"
        assert env["NVIDIA_VISIBLE_DEVICES"] == system.node(DRA_NODE).gpus[0].uuid
    generated = _claim_name(state, "templated")
    assert generated.startswith("templated-gpu-")
    await _map_shows_both_claims(system, generated)

    usage, problems = await system.wait_monitors(within=30)
    assert not problems, problems
    for name in ("templated", "handmade"):
        (reading,) = usage.of(NS, name, "cuda")
        assert reading.limit_bytes == 4096 * MIB

    await system.create(claim_pod("too-big", namespace=NS, claim="big"))
    state = await system.wait_for(
        settled([f"{NS}/too-big"]), within=30, what="the 10 GiB claim is refused"
    )
    big = state.pod(NS, "too-big")
    assert big is not None
    assert outcome(state, big) is Outcome.UNSCHEDULABLE
    assert any("cannot allocate all claims" in m for m in failed_scheduling(state, big))
    assert not check_all(state), check_all(state)
    cdi = {f.claim_uid for f in state.cdi_files}
    assert len(cdi) == 2

    # The templated pod goes: its claim is unprepared (CDI spec removed) and deleted with it,
    # and the 10 GiB claim now fits beside the hand-written one.
    uid = ObjectView(next(c for c in state.claims if ObjectView(c).name == generated)).uid
    await system.delete_pod(NS, "templated")
    state = await system.wait_for(
        lambda s: (
            s.pod(NS, "templated") is None
            and all(ObjectView(c).name != generated for c in s.claims)
            and uid not in {f.claim_uid for f in s.cdi_files}
        ),
        within=30,
        what="the templated pod, its claim and its CDI spec gone",
    )
    state = await system.wait_for(
        settled([f"{NS}/too-big"]), within=40, what="the 10 GiB claim runs"
    )
    big = state.pod(NS, "too-big")
    assert big is not None
    assert outcome(state, big) is Outcome.RUNNING
    assert _claim_env(state, "too-big")["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
    assert not check_all(state), check_all(state)
    await eventually(
        lambda: _monitored(system), within=30, what="the monitor reports the 10 GiB container"
    )

    # A hand-written claim outlives its pod, deallocated; its spec goes.
    await system.clear_pods(NS)
    state = await system.wait_for(
        lambda s: not s.cdi_files and not s.unpreparing, within=30, what="every claim unprepared"
    )
    hand = next(c for c in state.claims if ObjectView(c).name == "by-hand")
    assert not (hand.get("status") or {}).get("allocation")
    assert not check_all(state), check_all(state)


async def _map_shows_both_claims(system: System, generated: str) -> None:
    """The scheduler's GPU map (through the API server's service proxy) shows the DRA node's
    GPU with the two claims the allocator placed, each with its pod."""
    url = system.url + SCHEDULER_GPUMAP_PROXY + "api/v1/map"
    seen: dict[str, Any] = {}

    async def shown() -> bool:
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, params={"node": DRA_NODE}) as response,
        ):
            seen.update(await response.json())
        nodes = [node for node in seen.get("nodes", ()) if node["name"] == DRA_NODE]
        if not nodes or not all(d["dra"]["published"] for d in nodes[0]["devices"]):
            return False  # the slice and the claims come through two watches
        return sum(len(d["holders"]) for d in nodes[0]["devices"]) == 2

    await eventually(shown, within=30, what="the map shows both claims on the DRA GPU")
    (node,) = seen["nodes"]
    (card,) = node["devices"]
    assert (card["mode"], card["schedulable"]) == ("dra", False)
    assert card["id"] == system.node(DRA_NODE).gpus[0].uuid
    holders = {h["claim"]: [p["name"] for p in h["pods"]] for h in card["holders"]}
    assert holders == {generated: ["templated"], "by-hand": ["handmade"]}
    assert card["memory"]["allocated"] == 8192
    assert seen["cluster"]["dra"]["devices"] == 1


async def _monitored(system: System) -> bool:
    return not monitor_problems(system.state(), await system.monitor_usage())


async def test_the_extender_does_not_count_the_dra_nodes_gpu(system: System) -> None:
    node = system.api.get("nodes", DRA_NODE)
    annotations = ObjectView(node).annotations
    assert not any(key.startswith("hami.io/node-nvidia") for key in annotations)
    assert "nvidia.com/gpu" not in (node.get("status") or {}).get("allocatable", {})
    # Asked for a card of the DRA node's size, a device-plugin pod fits only the other node.
    for index in range(3):
        await system.create(gpu_pod(f"plugin-{index}", namespace=NS, memory_mib=4000))
    keys = [f"{NS}/plugin-{i}" for i in range(3)]
    state = await system.wait_for(settled(keys), within=40, what="the device-plugin pods settle")
    nodes = {PodView(p).node_name for p in state.pods if PodView(p).namespace == NS}
    assert nodes == {PLUGIN_NODE}
    pinned = gpu_pod("pinned", namespace=NS, memory_mib=1000)
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": DRA_NODE}
    await system.create(pinned)
    state = await system.wait_for(settled([f"{NS}/pinned"]), within=30, what="pinned settles")
    pod = state.pod(NS, "pinned")
    assert pod is not None
    assert outcome(state, pod) is Outcome.UNSCHEDULABLE
    assert not check_all(state), check_all(state)
    await system.clear_pods(NS)


async def test_a_hami_request_the_webhook_converts_takes_the_same_path(system: System) -> None:
    """``nvidia.com/gpu: 1`` + ``nvidia.com/gpumem: 4096`` in a namespace labelled for the
    conversion: the webhook turns it into a claim from a shared ResourceClaimTemplate, and the
    pod runs on the DRA node with the same HAMi-core limit a device-plugin pod would get."""
    await system.create(gpu_pod("converted", namespace=CONVERTED, memory_mib=4096))
    key = f"{CONVERTED}/converted"
    state = await system.wait_for(settled([key]), within=60, what="the converted pod settles")
    pod = state.pod(CONVERTED, "converted")
    assert pod is not None
    assert outcome(state, pod) is Outcome.RUNNING, failed_scheduling(state, pod)
    view = PodView(pod)
    assert view.node_name == DRA_NODE
    limits = view.containers[0].limits
    assert not any(name.startswith("nvidia.com/") for name in limits), limits
    (claim,) = view.spec["resourceClaims"]
    assert claim["resourceClaimTemplateName"].startswith("hami-gpu-")
    container = record_containers(allocation_record(pod))["cuda"]
    env = record_envs(container, f"claim:{claim['name']}")
    assert env is not None, container
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
    assert check_all(state) == ()
    await system.clear_pods(CONVERTED)
