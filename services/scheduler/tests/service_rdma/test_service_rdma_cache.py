"""The NIC side of the cache: layouts, pods seen before their node, re-registration, bad input,
and no sequence of filters and watch deliveries over-committing a NIC or a VF."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.cache.nics import nic_pod_usage_of
from hami_scheduler.cache.nodes import read_node, slim_node
from hami_scheduler.cache.pods import NIC_ANNOTATIONS, PodNicAllocation, read_pod, slim_pod
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.joint.nics import NicUsage, build_nic_usage
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.plan import Planner
from hami_scheduler.wire import ExtenderArgs

from ..service.test_service_properties import MemoryApi
from ..service_helpers import container, gpu_limits, gpus, node_object, pod_object
from ..service_helpers import register_annotations as gpu_register
from .rdma_helpers import HINT, JOINT, PFS, SAME_PCIE, rdma_pod, topo_annotations, topo_nics, vf_id

PCIE_LEVEL_BOTH = {
    "rdma": {**HINT["rdma"], "exclusivePolicy": "PCIeLevel"},
    "gpu": {"exclusivePolicy": "PCIeLevel"},
}


def cache() -> SchedulerCache:
    return SchedulerCache(DEFAULT_VENDORS)


def topo_node(name: str = "n", **kwargs: Any) -> dict[str, Any]:
    return node_object(name, topo_annotations(name, **kwargs))


def placed(
    name: str, node: str, annotations: Mapping[str, str], *, phase: str | None = None
) -> dict[str, Any]:
    pod = pod_object(name, annotations={keys.VGPU_NODE: node, **annotations})
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["labels"] = {keys.VGPU_NODE: node}
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def units(c: SchedulerCache, node: str = "n") -> tuple[int, ...]:
    return c.nics[node].units


ONE_VF = {keys.RDMA_DEVICES_ALLOCATED: f"{vf_id(1, 2).replace(':', '_')},RDMA,1,0:;"}


def test_a_pod_seen_before_its_node_counts_once_the_node_arrives() -> None:
    c = cache()
    c.upsert_pod(placed("p", "n", ONE_VF))
    assert "n" not in c.nics
    c.upsert_node(topo_node())
    assert units(c) == (0, 1, 0, 0)
    assert set(c.nics["n"].vfs) == {vf_id(1, 2)}
    c.remove_pod(placed("p", "n", ONE_VF))
    assert units(c) == (0, 0, 0, 0)
    assert not c.nics["n"].vfs


def test_a_changed_register_recomputes_what_pods_hold() -> None:
    c = cache()
    c.upsert_node(topo_node(nics=topo_nics(count=1)))
    c.upsert_pod(placed("p", "n", ONE_VF))
    # The VF's NIC is not registered yet: it holds nothing.
    assert c.nics["n"].units == (0,)
    c.upsert_node(topo_node())
    assert units(c) == (0, 1, 0, 0)
    # The NIC leaves the register: nothing is held on it any more, and removal stays exact.
    c.upsert_node(topo_node(nics=topo_nics(count=1)))
    assert c.nics["n"].units == (0,)
    c.remove_pod(placed("p", "n", ONE_VF))
    c.upsert_node(topo_node())
    assert units(c) == (0, 0, 0, 0)


def test_a_terminal_pod_holds_no_nics() -> None:
    c = cache()
    c.upsert_node(topo_node())
    c.upsert_pod(placed("p", "n", ONE_VF))
    c.upsert_pod(placed("p", "n", ONE_VF, phase="Failed"))
    assert units(c) == (0, 0, 0, 0)


def test_claims_come_from_the_hint_and_the_devices_held() -> None:
    c = cache()
    c.upsert_node(topo_node())
    notes = {
        **ONE_VF,
        keys.NVIDIA_DEVICES_ALLOCATED: "GPU-n-2,NVIDIA,1000,0:;",
        keys.KOORD_DEVICE_ALLOCATE_HINT: json.dumps(PCIE_LEVEL_BOTH),
    }
    c.upsert_pod(placed("p", "n", notes))
    switch = topo_nics()[1].pcie_switch
    assert dict(c.nics["n"].claims) == {("gpu", switch): 1, ("rdma", switch): 1}
    assert c.gpu_claimed == {"n"}
    c.remove_pod(placed("p", "n", notes))
    assert not c.nics["n"].claims
    assert c.gpu_claimed == set()


def test_a_node_without_nic_layout_gets_one_for_a_pod_with_claims() -> None:
    c = cache()
    c.upsert_node(node_object("plain", gpu_register(gpus("plain", 2))))
    assert "plain" not in c.nics
    notes = {
        keys.NVIDIA_DEVICES_ALLOCATED: "GPU-plain-0,NVIDIA,1000,0:;",
        keys.KOORD_DEVICE_ALLOCATE_HINT: json.dumps({"gpu": {"exclusivePolicy": "PCIeLevel"}}),
    }
    c.upsert_pod(placed("p", "plain", notes))
    # No PCI placement registered: the GPU is a PCIe scope of its own.
    assert dict(c.nics["plain"].claims) == {("gpu", "gpu/GPU-plain-0"): 1}
    assert c.gpu_claimed == {"plain"}


def test_undecodable_nic_annotations_are_reported_and_hold_nothing() -> None:
    problems: list[str] = []
    c = SchedulerCache(DEFAULT_VENDORS, on_pod_problem=lambda _p, _u, text: problems.append(text))
    c.upsert_node(topo_node())
    bad = {
        keys.RDMA_DEVICES_ALLOCATED: "a,b:;",
        keys.KOORD_DEVICE_ALLOCATED: "{not json",
    }
    c.upsert_pod(placed("p", "n", bad))
    c.upsert_pod(placed("p", "n", bad))
    assert len(problems) == 2
    assert any(keys.RDMA_DEVICES_ALLOCATED in text for text in problems)
    assert any(keys.KOORD_DEVICE_ALLOCATED in text for text in problems)
    assert units(c) == (0, 0, 0, 0)


def test_device_allocated_alone_is_read_back() -> None:
    c = cache()
    c.upsert_node(topo_node())
    written = {
        "rdma": [
            {
                "minor": 2,
                "resources": {"koordinator.sh/rdma": "100"},
                "id": PFS[2],
            }
        ]
    }
    c.upsert_pod(placed("p", "n", {keys.KOORD_DEVICE_ALLOCATED: json.dumps(written)}))
    assert units(c) == (0, 0, 100, 0)


def test_slimming_keeps_what_the_nic_cache_reads() -> None:
    node = topo_node()
    node["metadata"]["annotations"]["other"] = "x"
    slim_node(node, DEFAULT_VENDORS)
    kept = node["metadata"]["annotations"]
    assert keys.RDMA_REGISTER in kept
    assert "other" not in kept
    assert read_node(node, DEFAULT_VENDORS).nics == tuple(topo_nics())
    notes = {k: f"v-{k}" for k in NIC_ANNOTATIONS}
    pod = placed("p", "n", {**notes, "other": "x"})
    slim_pod(pod, DEFAULT_VENDORS)
    assert {k: pod["metadata"]["annotations"][k] for k in NIC_ANNOTATIONS} == notes
    assert "other" not in pod["metadata"]["annotations"]


def test_pods_without_nic_annotations_carry_no_nic_allocation() -> None:
    pod = placed("p", "n", {keys.NVIDIA_DEVICES_ALLOCATED: "GPU-n-0,NVIDIA,1000,0:;"})
    facts = read_pod(pod, DEFAULT_VENDORS)
    assert facts.holding is not None
    assert facts.holding.nics is None


def test_a_bad_rdma_register_leaves_gpu_claims_working() -> None:
    c = cache()
    c.upsert_node(topo_node(rdma_register="[]"))
    assert c.nic_problem("n") is not None
    assert keys.RDMA_REGISTER in (c.nic_problem("n") or "")
    assert "n" in c.troubled
    assert c.nics["n"].layout.nics == ()
    # The GPUs' PCIe switches are still known.
    assert c.nics["n"].layout.gpu_switch("GPU-n-0") == topo_nics()[0].pcie_switch
    c.upsert_node(topo_node())
    assert c.nic_problem("n") is None
    assert "n" not in c.troubled


# -- no sequence over-commits ----------------------------------------------------------------


def nic_view(usage: NicUsage) -> tuple[object, ...]:
    return (usage.units, usage.holders, dict(usage.vfs), dict(usage.claims))


def check(c: SchedulerCache, nodes: list[str]) -> None:
    sources: dict[str, list[PodNicAllocation]] = {}
    for _uid, _name, holding in c.holdings():
        if holding.nics is not None:
            sources.setdefault(holding.node, []).append(holding.nics)
    for name in nodes:
        usage = c.nics[name]
        layout = usage.layout
        scratch = build_nic_usage(
            layout, [nic_pod_usage_of(s, layout) for s in sources.get(name, [])]
        )
        assert nic_view(usage) == nic_view(scratch)
        assert all(0 <= held <= layout.units_per_nic for held in usage.units), usage.units
        assert all(count == 1 for count in usage.vfs.values()), dict(usage.vfs)
        assert (name in c.gpu_claimed) == bool(usage.gpu_claims)


def random_pod(draw: Any, name: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(["plain", "joint", "joint", "nic-only"]))
    if kind == "plain":
        pod = pod_object(
            name, container(limits=gpu_limits(1, mem=draw(st.sampled_from([1000, 40000]))))
        )
    else:
        hint = draw(
            st.sampled_from(
                [
                    None,
                    HINT,
                    PCIE_LEVEL_BOTH,
                    {"rdma": {**HINT["rdma"], "allocateStrategy": "RequestsAsCount"}},
                    {"rdma": {"exclusivePolicy": "DeviceLevel"}},
                ]
            )
        )
        gpus_asked = 0 if kind == "nic-only" else draw(st.integers(1, 4))
        pod = rdma_pod(
            name,
            gpus=gpus_asked,
            mem=draw(st.sampled_from([None, 20000])) if gpus_asked else None,
            rdma=draw(st.sampled_from([1, 2, 100, 100, 200])),
            hint=hint,
            joint=draw(st.sampled_from([None, JOINT, SAME_PCIE])) if gpus_asked else None,
        )
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["metadata"]["namespace"] = "default"
    return pod


ACTIONS = (
    *("new", "new", "new", "again", "bind", "bind", "deliver", "delete", "finish"),
    *("toggle-failure", "nic-health"),
)


@settings(max_examples=60)
@given(st.data())
def test_no_sequence_of_operations_over_commits_a_nic(data: st.DataObject) -> None:
    draw = data.draw
    c = cache()
    nodes = ["n0", "n1"]
    for name in nodes:
        c.upsert_node(topo_node(name))
    api = MemoryApi()
    pending = PendingBinds(c)
    filters = FilterService(
        cache=c,
        planner=Planner(DEFAULT_VENDORS),
        events=SchedulerEvents(None),
        metrics=SchedulerMetrics(),
        pending=pending,
    )

    async def filter_pod(pod: dict[str, Any]) -> None:
        await filters.filter(ExtenderArgs(pod=copy.deepcopy(pod), node_names=nodes))

    async def scenario() -> None:
        created = 0
        for _ in range(draw(st.integers(1, 30))):
            action = draw(st.sampled_from(ACTIONS))
            live = sorted(api.pods)
            unbound = [name for name in live if not api.bound(name)]
            if action == "new" or not live:
                pod = api.create(random_pod(draw, f"p{created}"))
                created += 1
                await filter_pod(pod)
            elif action == "again" and unbound:
                await filter_pod(api.pods[draw(st.sampled_from(unbound))])
            elif action == "bind" and unbound:
                api.bind(draw(st.sampled_from(unbound)), pending, c)
            elif action == "deliver":
                api.deliver(c, draw(st.integers(1, 6)))
            elif action == "delete":
                api.delete(draw(st.sampled_from(live)), pending)
            elif action == "finish":
                api.finish(draw(st.sampled_from(live)))
            elif action == "nic-health":
                healthy = draw(st.lists(st.booleans(), min_size=4, max_size=4))
                c.upsert_node(
                    topo_node(draw(st.sampled_from(nodes)), nics=topo_nics(healthy=healthy))
                )
            elif action == "toggle-failure":
                api.failing = not api.failing
            check(c, nodes)
        api.deliver(c, len(api.stream))
        check(c, nodes)
        waiting = [e for e in pending._entries.values() if e.record is not None]
        assert c.assumed_count() == len(waiting)

    asyncio.run(scenario())


NIC_KEYS = st.sampled_from([*NIC_ANNOTATIONS, keys.KOORD_DEVICE_JOINT_ALLOCATE, keys.VGPU_NODE])
NIC_VALUES = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "{",
            "n",
            '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"x"}}]}',
            '{"rdma":[{"minor":1,"id":"zz","extension":{"vfs":[{"busID":"q"}]}}]}',
            '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"exclusivePolicy":"PCIeLevel"}}',
            "0000_1a_00.1,RDMA,1,0:;",
            "0000_1a_00.9,RDMA,500,0:;",
            "nope,RDMA,1,0:;",
            '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}',
        ]
    ),
)


@settings(max_examples=100)
@given(
    st.dictionaries(NIC_KEYS, NIC_VALUES, max_size=4),
    st.sampled_from(["", "{", '{"v":1,"nics":[]}', '{"v":2,"nics":[]}']),
    st.sampled_from([None, "1", "150", "x", "-1"]),
)
def test_nothing_in_nic_annotations_or_requests_raises(
    notes: dict[str, str], register: str, rdma: str | None
) -> None:
    c = cache()
    c.upsert_node(topo_node())
    c.upsert_node(topo_node("odd", rdma_register=register or None))
    pod = placed("p", "n", notes)
    c.upsert_pod(copy.deepcopy(pod))
    pod["metadata"]["uid"] = "uid-q"  # the same annotations, on a pod being filtered
    check(c, ["n"])
    api = MemoryApi()
    filters = FilterService(
        cache=c,
        planner=Planner(DEFAULT_VENDORS),
        events=SchedulerEvents(None),
        metrics=SchedulerMetrics(),
    )
    ask = api.create(copy.deepcopy(pod))
    if rdma is not None:
        ask["spec"]["containers"][0]["resources"]["limits"]["koordinator.sh/rdma"] = rdma

    async def run() -> None:
        for args in (
            ExtenderArgs(pod=ask, node_names=["n", "odd", "ghost"]),
            ExtenderArgs(pod=ask, nodes=[topo_node(), topo_node("odd", rdma_register=register)]),
        ):
            reply = await filters.filter(args)
            assert reply.error or reply.failed is not None

    asyncio.run(run())
    check(c, ["n"])
    c.remove_pod(placed("p", "n", notes))
    c.drop_pod("uid-q")
    assert units(c) == (0, 0, 0, 0)
