"""GPU + RDMA NIC topology end to end: a GPU server with NICs, the real device plugin, the
extender and kube-scheduler's loop.

The node is the device plugin's example ``fake-gpu-rdma-node.yaml``: 8 GPUs and 4 NICs (4 SR-IOV
VFs each) on 4 PCIe switches, two switches per NUMA node, served by the fake backend — GPUs and
NICs alike registered by the plugin's own annotations and advertised to the kubelet stand-in
(``nvidia.com/gpu`` and ``koordinator.sh/rdma``, 100 units per NIC).  Pods go through the webhook,
the scheduling loop (the chart's KubeSchedulerConfiguration, which hands ``koordinator.sh/rdma``
to the extender), the extender's filter and bind, and both device plugins' Allocate; what the
containers got is read from the kubelet's allocation record.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
import yaml

from hami_kube.objects import ObjectView
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
from hami_kubesim.stack.system.spec import REPO_ROOT, FakeGpu, GpuNode, SchedulerOptions, SystemSpec
from hami_protocol import keys
from hami_protocol.pod.devices import decode_pod_devices_canonical
from hami_protocol.topology.koordinator import decode_device_allocated
from hami_protocol.topology.layout import bus_id_from_list_device_id

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE = "e2e-rdma"
NS = "topology"
EXAMPLE = REPO_ROOT / "services/deviceplugin/examples/fake-gpu-rdma-node.yaml"
RDMA = "koordinator.sh/rdma"
HINT = {
    "rdma": {
        "selector": {"matchLabels": {"type": "fakeW"}},
        "vfSelector": {"matchLabels": {"type": "general"}},
    }
}
JOINT = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}


@dataclass(frozen=True, slots=True)
class PlacedGpu(FakeGpu):
    """A fake GPU that also names its PCIe switch and root complex (the fake backend reads
    both; the stack's own GPU type leaves them out)."""

    pcie_switch: str = ""
    pcie_root: str = ""

    def to_document(self) -> dict[str, Any]:
        doc = FakeGpu.to_document(self)
        doc.update(pcie_switch=self.pcie_switch, pcie_root=self.pcie_root)
        return doc


def example() -> dict[str, Any]:
    loaded = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def rdma_node() -> GpuNode:
    document = example()
    gpus = tuple(
        PlacedGpu(
            uuid=gpu["uuid"],
            model=gpu["model"],
            memory_mib=gpu["memory_mib"],
            index=gpu["index"],
            numa=gpu["numa"],
            pci_bus_id=gpu["pci_bus_id"],
            pcie_switch=gpu["pcie_switch"],
            pcie_root=gpu["pcie_root"],
        )
        for gpu in document["gpus"]
    )
    return GpuNode(name=NODE, gpus=gpus, nics=tuple(document["nics"]))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def topology() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=(rdma_node(),),
        namespaces=("default", "kube-system", "hami-system", NS),
        scheduler=SchedulerOptions(node_lock_timeout="5s"),
    )
    async with running_system(spec) as running:
        await running.wait_for(_nics_registered, within=30, what="RDMA register and capacity")
        yield running


def _nics_registered(state: ClusterState) -> bool:
    node = state.node(NODE)
    if node is None:
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return (
        keys.RDMA_REGISTER in ObjectView(node).annotations
        and str(allocatable.get(RDMA, "0")) == "400"
    )


def _pod(name: str, limits: Mapping[str, str], annotations: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": dict(annotations)},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "train",
                    "image": "example.invalid/train",
                    "resources": {"limits": dict(limits)},
                }
            ],
        },
    }


def _stored(state: ClusterState, name: str) -> Mapping[str, Any]:
    found = state.pod(NS, name)
    assert found is not None, f"{NS}/{name} not found"
    return found


def _given(pod: Mapping[str, Any], resource: str) -> Mapping[str, Any]:
    container = record_containers(allocation_record(pod)).get("train") or {}
    for entry in container.get("resources") or ():
        if entry.get("resource") == resource:
            return dict(entry)
    raise AssertionError(f"container train got no {resource}: {allocation_record(pod)}")


def _device_paths(pod: Mapping[str, Any]) -> list[str]:
    given = _given(pod, RDMA)
    assert {d["permissions"] for d in given["devices"]} == {"rw"}
    return sorted(d["containerPath"] for d in given["devices"])


async def _run(system: System, pod: dict[str, Any]) -> ClusterState:
    name = pod["metadata"]["name"]
    await system.create(pod)
    state = await system.wait_for(settled([f"{NS}/{name}"]), within=60, what=f"{name} settles")
    stored = _stored(state, name)
    assert outcome(state, stored) is Outcome.RUNNING, (stored.get("status"), state.events[-5:])
    return state


async def test_four_gpus_and_rdma_get_the_nics_of_their_switches(topology: System) -> None:
    document = example()
    switch_of = {gpu["uuid"]: gpu["pcie_switch"] for gpu in document["gpus"]}
    nics = {nic["pci_bus_id"]: nic for nic in document["nics"]}
    vf_nic = {vf["bus_id"]: nic for nic in document["nics"] for vf in nic["vfs"]}
    annotations = {
        keys.KOORD_DEVICE_JOINT_ALLOCATE: json.dumps(JOINT),
        keys.KOORD_DEVICE_ALLOCATE_HINT: json.dumps(HINT),
    }
    state = await _run(topology, _pod("joint", {"nvidia.com/gpu": "4", RDMA: "1"}, annotations))
    pod = _stored(state, "joint")
    notes = ObjectView(pod).annotations
    assert pod["spec"]["nodeName"] == NODE
    assert notes[keys.BIND_PHASE] == "success"

    # The scheduler's decision: four GPUs on two switches, one VF of the NIC on each of them.
    [gpus] = decode_pod_devices_canonical(notes[keys.NVIDIA_DEVICES_ALLOCATED])
    gpu_switches = {switch_of[device.uuid] for device in gpus}
    assert len(gpus) == 4
    assert len(gpu_switches) == 2
    [nic_entries] = decode_pod_devices_canonical(notes[keys.RDMA_DEVICES_ALLOCATED])
    vfs = sorted(bus_id_from_list_device_id(device.uuid) for device in nic_entries)
    assert {vf_nic[vf]["pcie_switch"] for vf in vfs} == gpu_switches
    assert len(vfs) == 2
    # The lowest VF of each NIC, one unit each.
    assert vfs == sorted(vf_nic[vf]["vfs"][0]["bus_id"] for vf in vfs)
    assert {device.usedmem for device in nic_entries} == {1}
    koord = decode_device_allocated(notes[keys.KOORD_DEVICE_ALLOCATED])
    assert sorted(a.id for a in koord["rdma"]) == sorted(vf_nic[vf]["pci_bus_id"] for vf in vfs)
    assert {a.id for a in koord["gpu"]} == {device.uuid for device in gpus}
    # The device plugins consumed both lists.
    assert "RDMA" not in notes[keys.RDMA_DEVICES_TO_ALLOCATE]
    assert "NVIDIA" not in notes[keys.NVIDIA_DEVICES_TO_ALLOCATE]

    # What the container got: the GPUs' env and the VFs' uverbs devices plus rdma_cm.
    container = record_containers(allocation_record(pod))["train"]
    env = record_envs(container, "nvidia.com/gpu") or {}
    assert set(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == {device.uuid for device in gpus}
    uverbs = {vf["bus_id"]: vf["uverbs"] for nic in document["nics"] for vf in nic["vfs"]}
    assert _device_paths(pod) == sorted(
        ["/dev/infiniband/rdma_cm", *(f"/dev/infiniband/{uverbs[vf]}" for vf in vfs)]
    )
    assert record_envs(container, RDMA) == {}

    # A pod asking for a whole NIC and no GPU: the first NIC with 100 free units.
    state = await _run(topology, _pod("whole-nic", {RDMA: "100"}, {}))
    whole = _stored(state, "whole-nic")
    whole_notes = ObjectView(whole).annotations
    assert whole_notes[keys.BIND_PHASE] == "success"
    [[entry]] = decode_pod_devices_canonical(whole_notes[keys.RDMA_DEVICES_ALLOCATED])
    pf = bus_id_from_list_device_id(entry.uuid)
    assert entry.usedmem == 100
    used = {vf_nic[vf]["pci_bus_id"] for vf in vfs}
    assert pf in nics
    assert pf not in used
    assert pf == min(
        (nic["pci_bus_id"] for nic in document["nics"] if nic["pci_bus_id"] not in used),
        key=lambda bus: int(nics[bus]["name"].rsplit("_", 1)[1]),
    )
    assert _device_paths(whole) == sorted(
        ["/dev/infiniband/rdma_cm", f"/dev/infiniband/{nics[pf]['uverbs']}"]
    )
    # No node lock is left behind.
    node = state.node(NODE)
    assert node is not None
    assert keys.NODE_LOCK not in ObjectView(node).annotations
    await topology.clear_pods(NS)


async def test_a_garbage_hint_fails_only_that_pod(topology: System) -> None:
    bad = _pod(
        "bad-hint",
        {"nvidia.com/gpu": "1", RDMA: "1"},
        {keys.KOORD_DEVICE_ALLOCATE_HINT: '{"rdma":{"vfselector":{}}}'},
    )
    await topology.create(bad)
    state = await topology.wait_for(
        lambda s: any(
            e.get("reason") == "FailedScheduling"
            and (e.get("involvedObject") or {}).get("name") == "bad-hint"
            for e in s.events
        ),
        within=30,
        what="FailedScheduling for bad-hint",
    )
    messages = [
        e["message"]
        for e in state.events
        if (e.get("involvedObject") or {}).get("name") == "bad-hint"
        and e.get("reason") in {"FailedScheduling", "FilteringFailed"}
    ]
    assert messages
    assert all(keys.KOORD_DEVICE_ALLOCATE_HINT in m for m in messages), messages
    assert any("vfSelector" in m for m in messages), messages
    # Another pod is scheduled meanwhile.
    await _run(topology, _pod("fine", {"nvidia.com/gpu": "1", RDMA: "1"}, {}))
    assert not _stored(topology.state(), "bad-hint")["spec"].get("nodeName")
    await topology.clear_pods(NS)
