"""Dynamic MIG end to end: the whole system (webhook, extender, kube-scheduler stand-in, kubelet
stand-in, device plugin with the fake backend's MIG) on one node of two A100-40GB GPUs in
``operatingmode: mig``.

A pod asking for MIG memory goes from creation to Running with the MIG UUIDs of the instances
the plugin created at the placements the scheduler reserved; a plugin restart (SIGKILL) keeps
them; deleting the pod destroys them; a request the remaining slices cannot place is refused with
a clear reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from hami_kube.objects import ObjectView
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
    allocation_record,
    outcome,
    record_containers,
    record_envs,
)
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SystemSpec, mig_node
from hami_protocol import keys
from hami_protocol.node.registry import decode_node_devices
from hami_protocol.pod.mig import decode_mig_reservations

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE = "e2e-mig"
NS = "mig"
MIG_NODE = mig_node(NODE, "NVIDIA A100-SXM4-40GB", count=2)


def _registered_mig(state: ClusterState) -> bool:
    node = state.node(NODE)
    if node is None:
        return False
    raw = ObjectView(node).annotations.get(keys.NVIDIA_REGISTER)
    if not raw:
        return False
    devices = decode_node_devices(raw)
    return len(devices) == 2 and all(d.mode == "mig" and d.mig_profiles for d in devices)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system() -> AsyncIterator[System]:
    spec = SystemSpec(nodes=(MIG_NODE,), namespaces=("default", "kube-system", "hami-system", NS))
    async with running_system(spec) as running:
        await running.wait_for(_registered_mig, within=30, what="MIG GPUs registered")
        await running.wait_schedulers_see_nodes(1)
        yield running


def _pod(name: str, *, mem: int, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"nvidia.com/vgpu-mode": "mig"},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(count), "nvidia.com/gpumem": str(mem)}
                    },
                }
            ],
        },
    }


def _instances(system: System) -> dict[str, list[dict[str, Any]]]:
    """GPU UUID → the instances the fake GPUs hold now (the fake backend's state file)."""
    devices = system.fake_devices_file(NODE)
    path = devices.with_name(devices.name + ".mig-state.json")
    if not path.exists():
        return {}
    document = json.loads(path.read_text())
    return {uuid: list(gpu["instances"]) for uuid, gpu in document["gpus"].items()}


def _mig_uuids(system: System) -> set[str]:
    return {i["uuid"] for found in _instances(system).values() for i in found}


async def _running(system: System, pod: dict[str, Any]) -> tuple[dict[str, Any], ClusterState]:
    name = pod["metadata"]["name"]
    await system.create(pod)
    state = await system.wait_for(settled([f"{NS}/{name}"]), within=60, what=f"{name} settles")
    stored = state.pod(NS, name)
    assert stored is not None
    assert outcome(state, stored) is Outcome.RUNNING, stored.get("status")
    return stored, state


def _env(pod: dict[str, Any]) -> dict[str, str]:
    [container] = record_containers(allocation_record(pod)).values()
    given = record_envs(container, "nvidia.com/gpu")
    assert given is not None
    return dict(given)


async def test_mig_pods_run_with_their_instances_survive_a_restart_and_free_them(
    system: System,
) -> None:
    small, _ = await _running(system, _pod("small", mem=4000))
    pair, state = await _running(system, _pod("pair", mem=9000, count=2))
    assert check_all(state) == ()

    small_reservations = decode_mig_reservations(
        ObjectView(small).annotations[keys.NVIDIA_MIG_ALLOCATIONS]
    )
    assert [r.profile for r in small_reservations] == ["1g.5gb"]
    runtime = small_reservations[0].runtime
    assert runtime is not None
    assert _env(small) == {"NVIDIA_VISIBLE_DEVICES": runtime.mig_uuid}

    pair_reservations = decode_mig_reservations(
        ObjectView(pair).annotations[keys.NVIDIA_MIG_ALLOCATIONS]
    )
    assert [r.profile for r in pair_reservations] == ["2g.10gb", "2g.10gb"]
    pair_uuids = [r.runtime.mig_uuid for r in pair_reservations if r.runtime is not None]
    assert _env(pair)["NVIDIA_VISIBLE_DEVICES"] == ",".join(pair_uuids)
    created = _mig_uuids(system)
    assert created == {runtime.mig_uuid, *pair_uuids}

    # A SIGKILLed plugin comes back and adopts the running pods' instances: nothing is
    # destroyed or recreated, and a new pod still gets a fresh instance beside them.
    plugin = system.deviceplugins[NODE]
    await plugin.restart(crash=True)
    late, state = await _running(system, _pod("late", mem=4000))
    assert _mig_uuids(system) >= created
    late_uuid = _env(late)["NVIDIA_VISIBLE_DEVICES"]
    assert late_uuid.startswith("MIG-")
    assert late_uuid not in created
    assert check_all(state) == ()

    # Deleting a pod destroys its instance (the reconciler), and only its.
    await system.delete_pod(NS, "small")
    await system.wait_for(
        lambda _: runtime.mig_uuid not in _mig_uuids(system),
        within=30,
        what="the deleted pod's instance destroyed",
    )
    assert _mig_uuids(system) == {*pair_uuids, late_uuid}
    await system.clear_pods(NS)
    await system.wait_for(lambda _: not _mig_uuids(system), within=30, what="every instance gone")


async def test_a_request_no_gpu_has_room_for_waits_unschedulable(system: System) -> None:
    # Two whole-GPU instances fill both GPUs; a third 7g request has nowhere to go.
    for name in ("whole-a", "whole-b"):
        await _running(system, _pod(name, mem=40000))
    await system.create(_pod("third", mem=40000))
    state = await system.wait_for(settled([f"{NS}/third"]), within=60, what="third settles")
    third = state.pod(NS, "third")
    assert third is not None
    assert outcome(state, third) is Outcome.UNSCHEDULABLE
    messages = [
        str(event.get("message", ""))
        for event in state.events
        if event.get("reason") == "FailedScheduling"
        and event.get("involvedObject", {}).get("name") == "third"
    ]
    assert any("CardInsufficientMemory" in m for m in messages), messages
    await system.clear_pods(NS)
