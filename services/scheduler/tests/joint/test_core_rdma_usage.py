"""The NIC usage model, exclusive PCIe claims, the annotations out and the usage read back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami_protocol.node.registry import DeviceInfo
from hami_protocol.pod.devices import decode_pod_devices_canonical
from hami_protocol.topology.layout import GPUTopology
from hami_scheduler.core import (
    NodeUsage,
    apply_usage,
    decide_node,
    decision_usage,
    remove_usage,
)
from hami_scheduler.core.decide import NodeDecision
from hami_scheduler.core.joint.decide import decide_joint, pod_gpu_uuids, select_joint
from hami_scheduler.core.joint.hints import NO_JOINT
from hami_scheduler.core.joint.nics import (
    NicHold,
    NicPodUsage,
    NicUsage,
    apply_nic_usage,
    build_nic_usage,
    claimed_gpus,
    gpu_places,
    nic_layout,
    remove_nic_usage,
    unknown_nics,
)
from hami_scheduler.core.joint.wire import (
    decision_nic_usage,
    joint_annotations,
    nic_pod_usage,
    nic_usage_from_annotations,
    rdma_pod_devices,
)

from ..core_helpers import gpu, plan_of
from ..core_joint_helpers import (
    DEFAULT_HINT,
    GPU_MEM,
    NIC_IDS,
    SWITCHES,
    chosen_gpus,
    chosen_nics,
    chosen_vfs,
    container,
    decide,
    f_layout,
    f_node,
    f_usage,
    gpu_id,
    hold,
    plan_and_request,
    pod_json,
    vf_id,
)


def test_layout_orders_by_minor_and_finds_pfs_and_vfs() -> None:
    layout = f_layout()
    assert [nic.minor for nic in layout.nics] == [1, 2, 3, 4]
    assert layout.owner(NIC_IDS[3]) == 2
    assert layout.owner(vf_id(3, 5)) == 2
    assert layout.owner("0000:ff:00.0") is None
    assert layout.scope_members[SWITCHES[1]] == (1,)
    assert layout.gpu_scope(gpu_id(2)) == SWITCHES[1]
    assert layout.gpu_scope("GPU-unknown") == "gpu/GPU-unknown"


def test_apply_then_remove_is_the_identity_and_counts_overlaps() -> None:
    base = f_usage()
    pod_a = NicPodUsage(holds=(hold(1, 1, vf_id(1, 2)),), claims=(("rdma", SWITCHES[0]),))
    pod_b = NicPodUsage(
        holds=(hold(1, 5, vf_id(1, 2)), hold(2, 100)), claims=(("rdma", SWITCHES[0]),)
    )
    both = apply_nic_usage(base, [pod_a, pod_b])
    assert both.units[:2] == (6, 100)
    assert both.vfs[vf_id(1, 2)] == 2
    assert both.claims[("rdma", SWITCHES[0])] == 2
    only_b = remove_nic_usage(both, [pod_a])
    assert only_b == apply_nic_usage(base, [pod_b])
    assert only_b.vf_taken(vf_id(1, 2))
    assert only_b.claimed("rdma", SWITCHES[0])
    assert remove_nic_usage(only_b, [pod_b]) == base


def test_remove_never_goes_below_zero_and_unknown_nics_are_ignored() -> None:
    base = f_usage()
    ghost = NicPodUsage(holds=(NicHold("0000:ee:00.0", 5),))
    assert apply_nic_usage(base, [ghost]) is base
    assert unknown_nics(base.layout, ghost) == ("0000:ee:00.0",)
    removed = remove_nic_usage(base, [NicPodUsage(holds=(hold(1, 7, vf_id(1, 2)),))])
    assert removed.units == (0, 0, 0, 0)
    assert not removed.vfs


def test_gpu_places_keep_devices_with_bad_addresses_unknown() -> None:
    good = DeviceInfo("GPU-a", 0, 10, 1000, 100, "NVIDIA-T4", 1, True, pcie_switch="0000:18:00.0")
    bad = DeviceInfo("GPU-b", 1, 10, 1000, 100, "NVIDIA-T4", 0, True, pcie_switch="junk")
    places = gpu_places({"NVIDIA": [good, bad]})
    assert places == (
        GPUTopology("GPU-a", pcie_switch="0000:18:00.0", numa=1),
        GPUTopology("GPU-b", numa=0),
    )


def test_claimed_gpus_lists_the_gpus_of_claimed_switches() -> None:
    usage = f_usage(claims=[("gpu", SWITCHES[2])])
    assert claimed_gpus(usage, [gpu_id(i) for i in range(8)]) == {gpu_id(4), gpu_id(5)}
    assert claimed_gpus(f_usage(), [gpu_id(0)]) == frozenset()


# --- exclusive PCIe claims, both directions ------------------------------------------------
def _place(pod: dict[str, Any], gpus: NodeUsage, nics: NicUsage) -> tuple[NodeUsage, NicUsage]:
    """Decide and apply: the node's GPU and NIC usage afterwards."""
    plan, request = plan_and_request(pod)
    decision = decide_joint(gpus, nics, plan, request)
    assert decision.fits, decision.reason
    gpus_after = apply_usage(gpus, decision_usage(decision.node_decision(), plan))
    used = decision_nic_usage(decision, layout=nics.layout, plan=plan)
    return gpus_after, apply_nic_usage(nics, [used])


EXCLUSIVE = {"rdma": {**DEFAULT_HINT["rdma"], "exclusivePolicy": "PCIeLevel"}}


def test_an_exclusive_nic_claim_keeps_later_pods_off_the_switch() -> None:
    gpus, nics = _place(pod_json(1, hint=EXCLUSIVE), f_node(), f_usage())
    assert nics.claims == {("rdma", SWITCHES[0]): 1}
    # A plain NIC-only pod would take NIC 1 first (minor order); the claim sends it to NIC 2.
    later = decide(pod_json(0, joint=None), gpus, nics)
    assert chosen_nics(later) == [2]
    # NIC 1 still has 99 free units; only the claim refuses it.
    only_p0 = nic_layout("n1", [f_layout().nics[0]], gpus=f_layout().gpus.values())
    claimed = build_nic_usage(
        only_p0, [NicPodUsage(holds=(hold(1, 1),), claims=(("rdma", SWITCHES[0]),))]
    )
    refused = decide(pod_json(0, joint=None, hint=None), f_node(), claimed)
    assert "1/1 NicPcieClaimed" in refused.reason


def test_an_exclusive_pod_keeps_off_switches_that_others_touch() -> None:
    gpus, nics = _place(pod_json(1), f_node(), f_usage())  # GPU 1 + NIC 1 (p0), not exclusive
    exclusive = decide(pod_json(1, hint=EXCLUSIVE), gpus, nics)
    assert chosen_nics(exclusive) == [2]
    assert chosen_gpus(exclusive) == [3]


def test_gpu_claims_bind_plain_hami_pods_too() -> None:
    """A gpu PCIeLevel pod claims its switch; a later pod without any Koordinator request, sent
    through decide_joint, gets HAMi's fit on the other GPUs."""
    hint = {"gpu": {"exclusivePolicy": "PCIeLevel"}}
    gpus, nics = _place(pod_json(1, rdma=None, hint=hint, joint=None), f_node(), f_usage())
    assert nics.gpu_claims == {SWITCHES[3]}
    plan = plan_of([gpu(1, mem=1000)])
    plain = decide_joint(gpus, nics, plan, NO_JOINT)
    claimed = {gpu_id(6), gpu_id(7)}
    assert plain.fits
    assert not set(pod_gpu_uuids(plain.devices)) & claimed
    # Eight 1/8 slices on the six free GPUs: the claimed switch stays empty.
    full = plan_of([gpu(1, pct=100)] * 6)
    assert decide_joint(gpus, nics, full, NO_JOINT).fits
    too_many = decide_joint(gpus, nics, plan_of([gpu(1, pct=100)] * 7), NO_JOINT)
    assert not too_many.fits
    assert "exclusive (PCIeLevel) claim" in too_many.reason


def test_plain_pods_decide_as_decide_node() -> None:
    plan = plan_of([gpu(2, mem=3000, cores=30), gpu(1)])
    node = f_node({3: 1000})
    joint = decide_joint(node, f_usage(), plan)
    assert joint.node_decision() == decide_node(node, plan)
    assert joint.nics == ((), ())


# --- shared GPU slices and several containers -----------------------------------------------
def test_shared_slices_and_nics_per_container() -> None:
    """An init container and two app containers: GPU slices from HAMi's fit, NICs per container
    near the pod's GPUs, different VFs for different containers, usage init-peak vs app-sum."""
    pod = pod_json(
        containers=[
            container("a", gpu="1", gpumem="20000", rdma="1"),
            container("b", gpu="1", gpumem="20000", rdma="10"),
        ],
        init=[container("init", rdma="30")],
    )
    plan, request = plan_and_request(pod)
    decision = decide_joint(f_node(), f_usage(), plan, request)
    assert decision.fits
    init, a, b = decision.nics
    gpus = pod_gpu_uuids(decision.devices)
    # Spread puts the slices on two GPUs, both on the first switch: one NIC serves all.
    assert {f_layout().gpu_switch(uuid) for uuid in gpus} == {SWITCHES[0]}
    assert [g.minor for g in (*init, *a, *b)] == [1, 1, 1]
    vfs = [g.vf.bus_id for g in (*init, *a, *b) if g.vf is not None]
    assert len(set(vfs)) == 3
    usage = decision_nic_usage(decision, layout=f_layout(), plan=plan)
    assert usage.holds == (NicHold(NIC_IDS[1], 30, tuple(sorted(vfs))),)
    listed = joint_annotations(
        decision, node=f_node(), layout=f_layout(), plan=plan, request=request
    )
    segments = decode_pod_devices_canonical(listed["hami.io/rdma-devices-to-allocate"])
    assert [len(s) for s in segments] == [1, 1, 1]
    assert [d.usedmem for s in segments for d in s] == [30, 1, 10]


def test_annotations_exact_for_case_a1() -> None:
    pod = pod_json(1)
    plan, request = plan_and_request(pod)
    node = f_node()
    decision = decide_joint(node, f_usage(), plan, request)
    notes = joint_annotations(decision, node=node, layout=f_layout(), plan=plan, request=request)
    assert notes["hami.io/rdma-devices-to-allocate"] == "0000_1f_00.2,RDMA,1,0:;"
    assert notes["hami.io/rdma-devices-allocated"] == "0000_1f_00.2,RDMA,1,0:;"
    assert json.loads(notes["scheduling.koordinator.sh/device-allocated"]) == {
        "gpu": [
            {
                "minor": 1,
                "resources": {
                    "koordinator.sh/gpu-core": "0",
                    "koordinator.sh/gpu-memory": f"{GPU_MEM}Mi",
                    "koordinator.sh/gpu-memory-ratio": "100",
                },
                "id": "GPU-1",
            }
        ],
        "rdma": [
            {
                "minor": 1,
                "resources": {"koordinator.sh/rdma": "1"},
                "id": "0000:1f:00.0",
                "extension": {"vfs": [{"busID": "0000:1f:00.2"}]},
            }
        ],
    }


@pytest.mark.parametrize("source", ["hami", "koordinator"])
def test_usage_rebuilt_from_annotations_equals_the_decision(source: str) -> None:
    hint = {
        "rdma": {**DEFAULT_HINT["rdma"], "exclusivePolicy": "PCIeLevel"},
        "gpu": {"exclusivePolicy": "PCIeLevel"},
    }
    pod = pod_json(4, rdma=200, hint=hint)
    plan, request = plan_and_request(pod)
    node = f_node()
    decision = decide_joint(node, f_usage(), plan, request)
    assert decision.fits
    written = joint_annotations(decision, node=node, layout=f_layout(), plan=plan, request=request)
    notes = {**pod["metadata"]["annotations"], **written}
    if source == "koordinator":
        del notes["hami.io/rdma-devices-allocated"]
    rebuilt = nic_usage_from_annotations(
        notes,
        layout=f_layout(),
        init_count=plan.requests.init_count,
        gpu_uuids=pod_gpu_uuids(decision.devices),
    )
    assert rebuilt == decision_nic_usage(decision, layout=f_layout(), plan=plan)
    assert {kind for kind, _ in rebuilt.claims} == {"gpu", "rdma"}


def test_rdma_list_skips_foreign_entries() -> None:
    """Other types, ids that are not bus ids, and functions of no NIC here hold nothing."""
    usage = nic_pod_usage(
        decode_pod_devices_canonical(
            "0000_1f_00.3,RDMA,2,0:GPU-x,NVIDIA,5,0:bad,RDMA,1,0:0000_ee_00.0,RDMA,1,0:;"
        ),
        layout=f_layout(),
        init_count=0,
    )
    assert usage.holds == (NicHold(NIC_IDS[1], 2, (vf_id(1, 3),)),)
    assert rdma_pod_devices(((),)) == ((),)


def test_finished_init_containers_release_their_nics() -> None:
    rdma = decode_pod_devices_canonical("0000_1f_00.2,RDMA,30,0:;0000_1f_00.3,RDMA,1,0:;")
    running = nic_pod_usage(rdma, layout=f_layout(), init_count=1)
    done = nic_pod_usage(rdma, layout=f_layout(), init_count=1, init_finished=True)
    assert running.holds == (NicHold(NIC_IDS[1], 30, (vf_id(1, 2), vf_id(1, 3))),)
    assert done.holds == (NicHold(NIC_IDS[1], 1, (vf_id(1, 3),)),)


def test_select_joint_uses_the_node_policy_and_reports_failures() -> None:
    busy = f_node({0: 1000})
    nodes = {"busy": busy, "idle": f_node(), "full": f_node(dict.fromkeys(range(8), GPU_MEM))}
    plan, request = plan_and_request(pod_json(1))
    nics = {name: f_usage() for name in nodes}
    chosen = select_joint(plan, request, nodes, nics, candidates=["idle", "busy", "full", "gone"])
    assert chosen.node == "busy"
    assert chosen.decision is not None
    assert chosen.decision.fits
    assert set(chosen.failed) == {"full", "gone"}
    assert chosen.failed["gone"] == "node unregistered"
    no_nics = select_joint(plan, request, {"idle": f_node()}, {})
    assert no_nics.node is None
    assert "no RDMA NIC" in no_nics.failed["idle"]


def test_removal_of_a_placed_pod_restores_both_usages() -> None:
    plan, request = plan_and_request(pod_json(3, hint=EXCLUSIVE))
    node, nics = f_node(), f_usage()
    decision = decide_joint(node, nics, plan, request)
    gpu_used = decision_usage(decision.node_decision(), plan)
    nic_used = decision_nic_usage(decision, layout=nics.layout, plan=plan)
    after_gpu = apply_usage(node, gpu_used)
    after_nic = apply_nic_usage(nics, [nic_used])
    assert remove_usage(after_gpu, gpu_used).devices == node.devices
    assert remove_nic_usage(after_nic, [nic_used]) == nics
    assert chosen_vfs(decision)
    assert isinstance(decision.node_decision(), NodeDecision)


def test_joint_api_is_pinned() -> None:
    """What the service shell calls; changing it breaks the shell."""
    from hami_scheduler.core.joint import decide as joint
    from hami_scheduler.core.joint import hints, nicfit
    from hami_scheduler.core.joint import nics as rdma
    from hami_scheduler.core.joint import wire as jointwire

    assert set(joint.__all__) >= {"JointDecision", "decide_joint", "select_joint"}
    assert set(hints.__all__) >= {"JointRequest", "NO_JOINT", "joint_request_of_pod"}
    assert set(jointwire.__all__) >= {
        "joint_annotations",
        "decision_nic_usage",
        "nic_usage_from_annotations",
    }
    assert set(rdma.__all__) >= {
        "NicUsage",
        "nic_layout",
        "build_nic_usage",
        "apply_nic_usage",
        "remove_nic_usage",
        "gpu_places",
        "claimed_gpus",
    }
    assert set(nicfit.__all__) >= {"NicGrant", "order_preferred"}
    for module in (hints, joint, jointwire, nicfit, rdma):
        for name in module.__all__:
            assert getattr(module, name) is not None
