"""GPU + RDMA NIC scheduling through HTTP against the emulated API server.

The node is a GPU server of 8 GPUs and 4 NICs on 4 PCIe switches (2 NUMA nodes), registered by
its annotations as the device plugin writes them (see rdma_helpers).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami_protocol import keys
from hami_protocol.node.lock import decode_node_lock
from hami_protocol.topology.koordinator import decode_device_allocated
from hami_scheduler.cache.nics import nic_pod_usage_of
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.joint.nics import NicUsage
from hami_scheduler.core.joint.route import NO_NIC_REASON

from ..service_helpers import (
    Harness,
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    node_object,
    pod_object,
    refused,
    register_annotations,
    scheduler_on,
)
from .rdma_helpers import (
    HINT,
    PCIE_LEVEL_BOTH,
    PFS,
    SAME_PCIE,
    SWITCHES,
    gpu_indices,
    rdma_entries,
    rdma_pod,
    switch_of_gpu,
    topo_annotations,
    topo_nics,
    vf_id,
)

pytestmark = pytest.mark.timeout(60)


async def topo_node(h: Harness, name: str = "n", **kwargs: Any) -> None:
    await h.add_node(name, annotations=topo_annotations(name, **kwargs))
    await h.synced_node(name)


def nic_view(usage: NicUsage) -> tuple[object, ...]:
    return (usage.units, usage.holders, dict(usage.vfs), dict(usage.claims))


def gpu_view(cache: SchedulerCache, node: str) -> list[tuple[int, int, int]]:
    return [(d.used, d.usedmem, d.usedcores) for d in cache.nodes[node].devices]


async def confirmed(h: Harness) -> None:
    await eventually(lambda: h.scheduler.cache.assumed_count() == 0, what="assumptions confirmed")


async def scheduled(h: Harness, pod: dict[str, Any], nodes: list[str] | None = None) -> str:
    """Filtered, bound (the Binding carries the decision) and allocated."""
    stored = await h.add_pod(pod)
    reply = await h.schedule(stored, nodes or ["n"])
    assert reply["Error"] == "", reply
    assert reply["NodeNames"], reply
    (node,) = reply["NodeNames"]
    return str(node)


async def test_four_gpus_and_rdma_get_the_nics_on_the_gpus_switches() -> None:
    async with harness() as h:
        await topo_node(h)
        assert await scheduled(h, rdma_pod("p", gpus=4)) == "n"
        notes = annotations_of(h.pod("p"))
        assert gpu_indices(notes[keys.NVIDIA_DEVICES_ALLOCATED]) == [0, 1, 2, 3]
        gpu_switches = {switch_of_gpu(i) for i in range(4)}
        assert notes[keys.RDMA_DEVICES_TO_ALLOCATE] == notes[keys.RDMA_DEVICES_ALLOCATED]
        ((first, second),) = rdma_entries(notes[keys.RDMA_DEVICES_ALLOCATED])
        # One VF (the lowest free one, 1 unit) of the NIC on each GPU switch.
        assert [first, second] == [(vf_id(0, 1), 1), (vf_id(1, 1), 1)]
        assert {SWITCHES[0], SWITCHES[1]} == gpu_switches
        koord = decode_device_allocated(notes[keys.KOORD_DEVICE_ALLOCATED])
        assert sorted(a.minor for a in koord["gpu"]) == [0, 1, 2, 3]
        assert [
            (a.id, [vf.bus_id for vf in (a.extension.vfs if a.extension else ())])
            for a in koord["rdma"]
        ] == [
            (PFS[0], [vf_id(0, 1)]),
            (PFS[1], [vf_id(1, 1)]),
        ]
        # Counted at once, and unchanged once the watch confirms the patch.
        nics = h.scheduler.cache.nics["n"]
        assert nics.units == (1, 1, 0, 0)
        assert set(nics.vfs) == {vf_id(0, 1), vf_id(1, 1)}
        live = nic_view(nics)
        await confirmed(h)
        assert nic_view(h.scheduler.cache.nics["n"]) == live
        # A second pod gets the next VFs.
        await scheduled(h, rdma_pod("q", gpus=4))
        ((a, b),) = rdma_entries(annotations_of(h.pod("q"))[keys.RDMA_DEVICES_ALLOCATED])
        assert {a[0], b[0]} == {vf_id(2, 1), vf_id(3, 1)}
        await eventually(lambda: bool(h.events("FilteringSucceed")), what="event")


async def test_same_pcie_names_the_rule_when_no_gpu_set_can_meet_it() -> None:
    async with harness() as h:
        # The NICs of switches 2 and 3 are down: only GPUs 0-3 can share a switch with a NIC.
        await topo_node(h, nics=topo_nics(healthy=(True, True, False, False)))
        pod = await h.add_pod(rdma_pod("p", gpus=6, joint=SAME_PCIE))
        reply = await h.filter(pod, ["n"])
        assert reply["NodeNames"] is None
        reason = refused(reply)["n"]
        assert "requiredScope SamePCIe" in reason
        assert "no usable RDMA NIC on their PCIe switch" in reason
        await eventually(lambda: bool(h.events("FilteringFailed")), what="event")
        assert "SamePCIe" in h.events("FilteringFailed")[0]["message"]
        # Four GPUs fit on the two switches that have NICs.
        assert await scheduled(h, rdma_pod("q", gpus=4, joint=SAME_PCIE)) == "n"
        notes = annotations_of(h.pod("q"))
        assert gpu_indices(notes[keys.NVIDIA_DEVICES_ALLOCATED]) == [0, 1, 2, 3]


async def test_same_pcie_moves_to_a_switch_whose_nic_has_room() -> None:
    async with harness() as h:
        await topo_node(h)
        # A pod asking for a whole NIC only (no GPU): the first NIC by minor.
        await scheduled(h, rdma_pod("whole", rdma=100, hint=None, joint=None))
        whole = annotations_of(h.pod("whole"))
        assert rdma_entries(whole[keys.RDMA_DEVICES_ALLOCATED]) == [[(PFS[0], 100)]]
        assert keys.NVIDIA_DEVICES_ALLOCATED not in whole
        assert h.scheduler.cache.nics["n"].units == (100, 0, 0, 0)
        await scheduled(h, rdma_pod("p", gpus=2, joint=SAME_PCIE))
        notes = annotations_of(h.pod("p"))
        assert gpu_indices(notes[keys.NVIDIA_DEVICES_ALLOCATED]) == [2, 3]
        assert rdma_entries(notes[keys.RDMA_DEVICES_ALLOCATED]) == [[(vf_id(1, 1), 1)]]


async def test_pcie_level_keeps_other_pods_off_the_claimed_switch_and_survives_a_restart() -> None:
    async with harness() as h:
        await topo_node(h)
        exclusive = rdma_pod("a", gpus=1, mem=8000, hint=PCIE_LEVEL_BOTH, joint=SAME_PCIE)
        await scheduled(h, exclusive)
        (a_gpu,) = gpu_indices(annotations_of(h.pod("a"))[keys.NVIDIA_DEVICES_ALLOCATED])
        claimed = switch_of_gpu(a_gpu)
        cache = h.scheduler.cache
        assert dict(cache.nics["n"].claims) == {("gpu", claimed): 1, ("rdma", claimed): 1}
        assert cache.gpu_claimed == {"n"}
        # A plain shared-GPU pod that would binpack onto pod a's GPU keeps off the claimed switch.
        binpack = {keys.GPU_SCHEDULER_POLICY: "binpack"}
        plain = pod_object("b", container(limits=gpu_limits(1, mem=1000)), annotations=binpack)
        await scheduled(h, plain)
        (b_gpu,) = gpu_indices(annotations_of(h.pod("b"))[keys.NVIDIA_DEVICES_ALLOCATED])
        assert switch_of_gpu(b_gpu) != claimed
        # Another exclusive pod takes neither the claimed switch nor the one pod b touches.
        await scheduled(h, rdma_pod("c", gpus=1, mem=8000, hint=PCIE_LEVEL_BOTH, joint=SAME_PCIE))
        (c_gpu,) = gpu_indices(annotations_of(h.pod("c"))[keys.NVIDIA_DEVICES_ALLOCATED])
        assert switch_of_gpu(c_gpu) not in {claimed, switch_of_gpu(b_gpu)}
        ((c_nic,),) = rdma_entries(annotations_of(h.pod("c"))[keys.RDMA_DEVICES_ALLOCATED])
        assert topo_nics()[PFS.index(c_nic[0][:-1] + "0")].pcie_switch == switch_of_gpu(c_gpu)
        # A NIC-only pod too.
        await scheduled(h, rdma_pod("d", rdma=2, hint=None, joint=None))
        await confirmed(h)
        live_nics, live_gpus = nic_view(cache.nics["n"]), gpu_view(cache, "n")
        assert len(cache.nics["n"].claims) == 4
        # A fresh scheduler rebuilds the same usage from the pods' annotations alone.
        async with scheduler_on(h.sim) as fresh:
            await eventually(lambda: fresh.cache.pod_count == 4, what="pods listed")
            assert nic_view(fresh.cache.nics["n"]) == live_nics
            assert gpu_view(fresh.cache, "n") == live_gpus
            assert fresh.cache.gpu_claimed == {"n"}


async def test_bad_koordinator_annotations_fail_that_pod_only() -> None:
    cases: list[tuple[str, dict[str, str], str]] = [
        ("invalid-json", {"raw_hint": "{not json"}, keys.KOORD_DEVICE_ALLOCATE_HINT),
        ("unknown-field", {"raw_hint": '{"rdma":{"vfselector":{}}}'}, "vfSelector"),
        ("unknown-type", {"raw_hint": '{"tpu":{}}'}, keys.KOORD_DEVICE_ALLOCATE_HINT),
        (
            "joint-unknown-type",
            {"raw_joint": '{"deviceTypes":["gpu","tpu"]}'},
            keys.KOORD_DEVICE_JOINT_ALLOCATE,
        ),
        ("joint-bad-scope", {"raw_joint": '{"requiredScope":"SameRack"}'}, "requiredScope"),
    ]
    async with harness() as h:
        await topo_node(h)
        for name, bad, expected in cases:
            pod = await h.add_pod(
                rdma_pod(name, gpus=1, raw_hint=bad.get("raw_hint"), raw_joint=bad.get("raw_joint"))
            )
            reply = await h.filter(pod, ["n"])
            assert expected in reply["Error"], (name, reply)
            assert reply["NodeNames"] is None
            assert keys.VGPU_NODE not in annotations_of(h.pod(name))

            def failed_event(pod_name: str = name) -> list[dict[str, Any]]:
                return [
                    e
                    for e in h.events("FilteringFailed")
                    if e["involvedObject"]["name"] == pod_name
                ]

            await eventually(lambda: bool(failed_event()), what=f"{name} event")
            assert expected in failed_event()[0]["message"]
        # Other pods are unaffected.
        assert await scheduled(h, rdma_pod("fine", gpus=1)) == "n"
        assert await scheduled(h, pod_object("plain")) == "n"
        assert h.scheduler.cache.nics["n"].units == (1, 0, 0, 0)


async def test_a_selector_matching_no_nic_is_the_nodes_reason() -> None:
    async with harness() as h:
        await topo_node(h)
        hint = {"rdma": {"selector": {"matchLabels": {"type": "none-such"}}}}
        pod = await h.add_pod(rdma_pod("p", gpus=1, hint=hint))
        reply = await h.filter(pod, ["n"])
        assert reply["NodeNames"] is None
        reason = refused(reply)["n"]
        assert "rdma.selector matches no RDMA NIC of this node" in reason
        assert keys.KOORD_DEVICE_ALLOCATE_HINT in reason


async def test_a_bad_rdma_quantity_names_the_resource() -> None:
    async with harness() as h:
        await topo_node(h)
        pod = await h.add_pod(rdma_pod("p", gpus=1, rdma=150, hint=None, joint=None))
        reply = await h.filter(pod, ["n"])
        assert "koordinator.sh/rdma" in reply["Error"]
        assert "multiple of 100" in reply["Error"]


async def test_a_garbage_rdma_register_fails_nic_pods_only_and_is_reported_once() -> None:
    async with harness() as h:
        await topo_node(h, "bad", rdma_register='{"v":1,"nics":[{"id":"nope"}]}')
        await topo_node(h, "good")
        await eventually(lambda: bool(h.events("InvalidDeviceAnnotation")), what="node event")
        (event,) = h.events("InvalidDeviceAnnotation")
        assert event["involvedObject"]["name"] == "bad"
        assert keys.RDMA_REGISTER in event["message"]
        pod = await h.add_pod(rdma_pod("p", gpus=1))
        reply = await h.filter(pod, ["bad", "good"])
        assert reply["NodeNames"] == ["good"]
        assert keys.RDMA_REGISTER in refused(reply)["bad"]
        # GPU pods still use the node.
        assert await scheduled(h, pod_object("plain"), ["bad"]) == "bad"
        # An unchanged value is not reported again.
        await h.api.patch("nodes", "bad", {"metadata": {"labels": {"x": "y"}}}, patch_type="merge")
        await eventually(
            lambda: (
                (h.scheduler.cache.facts("bad") or object()).__getattribute__("labels").get("x")
                == "y"
            ),
            what="node update seen",
        )
        assert len(h.events("InvalidDeviceAnnotation")) == 1


async def test_nodes_without_nics_are_refused_for_nic_pods() -> None:
    async with harness() as h:
        await h.add_node("plain", gpus("plain", 2))
        await topo_node(h)
        await h.synced_node("plain")
        pod = await h.add_pod(rdma_pod("p", gpus=1))
        reply = await h.filter(pod, ["plain", "n", "ghost"])
        assert reply["NodeNames"] == ["n"]
        assert refused(reply) == {
            "plain": "Insufficient rdma devices: the node has no RDMA NIC",
            "ghost": "node unregistered",
        }


async def test_pods_without_managed_requests_get_every_node_but_rdma_is_managed() -> None:
    async with harness() as h:
        await topo_node(h)
        cpu = await h.add_pod(pod_object("cpu", container(limits={"cpu": "1"})))
        reply = await h.filter(cpu, ["n", "x"])
        assert reply["NodeNames"] == ["n", "x"]
        assert refused(reply) == {}
        nic_only = await h.add_pod(rdma_pod("nic", hint=None, joint=None))
        reply = await h.schedule(nic_only, ["n", "x"])
        assert reply["NodeNames"] == ["n"]
        assert refused(reply) == {"x": "node unregistered"}
        assert annotations_of(h.pod("nic"))[keys.VGPU_NODE] == "n"


async def test_a_nic_only_pod_takes_the_node_lock_and_marks_allocating() -> None:
    async with harness() as h:
        await topo_node(h)
        pod = await h.add_pod(rdma_pod("p", hint=None, joint=None))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        assert await h.bind(pod, "n") == ""
        lock = decode_node_lock(annotations_of(h.node("n"))[keys.NODE_LOCK])
        assert (lock.namespace, lock.pod) == ("default", "p")
        stored = h.pod("p")
        assert annotations_of(stored)[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
        assert int(annotations_of(stored)[keys.BIND_TIME]) > 0
        assert stored["spec"]["nodeName"] == "n"


async def test_a_failed_binding_forgets_the_nics_and_ended_pods_release_them() -> None:
    async with harness() as h:
        await topo_node(h)
        cache = h.scheduler.cache
        pod = await h.add_pod(rdma_pod("p", gpus=2))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        assert cache.nics["n"].units == (1, 0, 0, 0)
        h.api.inject_error("create", "pods/binding", code=500)
        assert (await h.bind(pod, "n")).startswith("binding failed:")
        assert cache.nics["n"].units == (0, 0, 0, 0)
        assert cache.assumed_count() == 0
        h.api.clear_faults()
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        assert cache.nics["n"].units == (1, 0, 0, 0)
        # Filtered again (say kube-scheduler gave up on it): the first reservation is dropped,
        # not doubled.
        assert (await h.filter(h.pod("p"), ["n"]))["NodeNames"] == ["n"]
        assert cache.nics["n"].units == (1, 0, 0, 0)
        assert await h.bind(pod, "n") == ""
        await confirmed(h)
        assert cache.nics["n"].units == (1, 0, 0, 0)
        stored = h.pod("p")
        stored["status"] = {"phase": "Succeeded"}
        await h.api.update("pods", stored, subresource="status")
        await eventually(lambda: cache.nics["n"].units == (0, 0, 0, 0), what="released")
        await h.allocated("p", "n")
        await scheduled(h, rdma_pod("q", gpus=2))
        assert cache.nics["n"].units == (1, 0, 0, 0)
        await h.api.delete("pods", "q", namespace="default")
        await eventually(lambda: cache.nics["n"].units == (0, 0, 0, 0), what="deleted")
        assert not cache.nics["n"].vfs


async def test_the_assumed_nics_equal_what_the_annotations_rebuild() -> None:
    async with harness() as h:
        await topo_node(h)
        await scheduled(
            h,
            rdma_pod(
                "p",
                gpus=3,
                hint={"rdma": {**HINT["rdma"], "allocateStrategy": "RequestsAsCount"}},
                rdma=2,
            ),
        )
        cache = h.scheduler.cache
        holding = cache.holding(h.pod("p")["metadata"]["uid"])
        assert holding is not None
        assert holding.nics is not None
        rebuilt = nic_pod_usage_of(holding.nics, cache.nics["n"].layout)
        assert sum(hold.units for hold in rebuilt.holds) == sum(cache.nics["n"].units)
        assert json.loads(annotations_of(h.pod("p"))[keys.KOORD_DEVICE_ALLOCATED])["rdma"]


async def test_filter_mode_all_decides_the_joint_allocation_at_bind() -> None:
    async with harness(filter_mode="all") as h:
        await topo_node(h, "n")
        await topo_node(h, "m", nics=topo_nics(healthy=(False,) * 4))
        pod = await h.add_pod(rdma_pod("p", gpus=2, joint=SAME_PCIE))
        reply = await h.filter(pod, ["n", "m"])
        assert reply["NodeNames"] == ["n"]
        assert "requiredScope SamePCIe" in refused(reply)["m"]
        assert keys.VGPU_NODE not in annotations_of(h.pod("p"))
        assert await h.bind(pod, "n") == ""
        notes = annotations_of(h.pod("p"))
        gpus_given = gpu_indices(notes[keys.NVIDIA_DEVICES_ALLOCATED])
        ((nic,),) = rdma_entries(notes[keys.RDMA_DEVICES_ALLOCATED])
        assert {switch_of_gpu(i) for i in gpus_given} == {SWITCHES[PFS.index(nic[0][:-1] + "0")]}
        assert keys.KOORD_DEVICE_ALLOCATED in notes
        assert sum(h.scheduler.cache.nics["n"].units) == 1
        # A node whose NICs are down cannot take it at bind either.
        other = await h.add_pod(rdma_pod("q", gpus=2, joint=SAME_PCIE))
        error = await h.bind(other, "m")
        assert error.startswith("node m no longer fits:")
        assert "SamePCIe" in error


async def test_the_autoscaler_simulation_places_nics_from_the_given_nodes() -> None:
    async with harness() as h:
        await topo_node(h)
        await scheduled(h, rdma_pod("whole", rdma=100, hint=None, joint=None))
        pod = await h.add_pod(rdma_pod("p", gpus=8, joint=SAME_PCIE))
        given = [h.node("n"), node_object("plain", register_annotations(gpus("plain", 8)))]
        body = {"Pod": pod, "Nodes": {"items": given}, "NodeNames": None}
        status, reply = await h.post("filter", body)
        assert status == 200
        # NIC 0 is taken whole by the pod the cache knows: its switch cannot meet SamePCIe.
        assert reply["Nodes"] is None
        assert "SamePCIe" in refused(reply)["n"]
        # The same rule as the filter's: a node without NICs is refused for a NIC pod at once.
        assert refused(reply)["plain"] == NO_NIC_REASON
        smaller = await h.add_pod(rdma_pod("q", gpus=6, joint=SAME_PCIE))
        status, reply = await h.post("filter", {**body, "Pod": smaller})
        assert [node["metadata"]["name"] for node in reply["Nodes"]["items"]] == ["n"]
        assert keys.VGPU_NODE not in annotations_of(h.pod("q"))
        assert h.scheduler.cache.nics["n"].units == (100, 0, 0, 0)


@pytest.mark.parametrize(("policy", "expected"), [("binpack", "n"), ("spread", "m")])
async def test_plain_pods_weigh_claimed_and_unclaimed_nodes_by_the_node_policy(
    policy: str, expected: str
) -> None:
    async with harness() as h:
        await topo_node(h, "n")
        await topo_node(h, "m")
        exclusive = rdma_pod("a", gpus=1, mem=8000, hint=PCIE_LEVEL_BOTH, joint=SAME_PCIE)
        await scheduled(h, exclusive, ["n"])
        (a_gpu,) = gpu_indices(annotations_of(h.pod("a"))[keys.NVIDIA_DEVICES_ALLOCATED])
        assert h.scheduler.cache.gpu_claimed == {"n"}
        notes = {keys.NODE_SCHEDULER_POLICY: policy, keys.GPU_SCHEDULER_POLICY: "binpack"}
        plain = pod_object("b", container(limits=gpu_limits(1, mem=1000)), annotations=notes)
        assert await scheduled(h, plain, ["m", "n"]) == expected
        (b_gpu,) = gpu_indices(annotations_of(h.pod("b"))[keys.NVIDIA_DEVICES_ALLOCATED])
        if expected == "n":
            assert switch_of_gpu(b_gpu) != switch_of_gpu(a_gpu)
