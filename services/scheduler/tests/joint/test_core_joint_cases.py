"""Koordinator's acceptance cases A1-A22 (contracts/koordinator.md §5), adapted to our model.

Unless a case says otherwise the pod is Koordinator's default: one container with
``nvidia.com/gpu: N`` (whole GPUs) and ``koordinator.sh/rdma: 1``, hint ``rdma.selector
type=fakeW`` and ``rdma.vfSelector type In [general, fakeG]``, joint ``["gpu","rdma"]``; the node is
fixture F (see core_joint_helpers).  "X holds" means another pod's usage already on the node.

Two adaptations hold throughout:

* GPUs are HAMi's: inside the PCIe/NUMA scope the joint search picks, the GPUs are the ones HAMi's
  fit takes under the pod's GPU policy (default ``spread``: of equal devices the last one), so a
  single GPU on switch p0 is GPU 1 where Koordinator's minor order gives GPU 0.  Switches, NUMA
  nodes, NICs and VFs are as Koordinator chooses them.
* Results are compared as sorted sets (Koordinator's tests sort allocations too).
"""

from __future__ import annotations

import json

import pytest

from hami_protocol.errors import ProtocolError, RequestError, ValidationError
from hami_protocol.topology.koordinator import decode_device_allocated
from hami_protocol.topology.layout import (
    GPUTopology,
    RdmaNic,
    VirtualFunction,
    VirtualFunctionGroup,
)
from hami_scheduler.core.joint.decide import (
    JOINT_RULES_VIOLATION,
    TOPOLOGY_SCOPED_GPUS,
    JointDecision,
)
from hami_scheduler.core.joint.hints import NicDemand, normalise_rdma
from hami_scheduler.core.joint.nicfit import INSUFFICIENT_RDMA, INSUFFICIENT_VFS, order_preferred
from hami_scheduler.core.joint.nics import NicHold, NicLayout
from hami_scheduler.core.joint.wire import device_allocations, nic_usage_from_annotations

from ..core_joint_helpers import (
    DEFAULT_HINT,
    GPU_MEM,
    NIC_IDS,
    SWITCHES,
    chosen_gpus,
    chosen_nics,
    chosen_vfs,
    decide,
    f_layout,
    f_nics,
    f_node,
    f_usage,
    gpu_id,
    hold,
    make_nic,
    plan_and_request,
    pod_json,
    vf_id,
)

SAME_PCIE = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}
PCIE_LEVEL_BOTH = {
    "rdma": {**DEFAULT_HINT["rdma"], "exclusivePolicy": "PCIeLevel"},
    "gpu": {"exclusivePolicy": "PCIeLevel"},
}


def _units(decision: JointDecision) -> list[int]:
    return sorted(g.units for grants in decision.nics for g in grants)


def test_a1_one_gpu_gets_the_nic_and_lowest_vf_on_its_switch() -> None:
    """Koordinator: GPU 0 + NIC 1, VF 0000:1f:00.2.  Ours: p0 as well, GPU 1 by HAMi's fit."""
    decision = decide(pod_json(1), f_node(), f_usage())
    assert decision.fits
    assert chosen_gpus(decision) == [1]
    assert chosen_nics(decision) == [1]
    assert chosen_vfs(decision) == ["0000:1f:00.2"]
    assert _units(decision) == [1]


def test_a2_two_gpus_on_one_switch_get_one_nic() -> None:
    decision = decide(pod_json(2), f_node(), f_usage())
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([0, 1], [1])


@pytest.mark.parametrize(
    ("n", "nics"),
    [(3, [1, 2]), (4, [1, 2]), (6, [1, 2, 3]), (8, [1, 2, 3, 4])],
)
def test_a3_one_nic_per_gpu_switch_although_rdma_is_one(n: int, nics: list[int]) -> None:
    """GPUs fill NUMA 0 first, then p2, p3; every GPU switch gets its NIC, each with one VF."""
    decision = decide(pod_json(n), f_node(), f_usage())
    gpus = chosen_gpus(decision)
    assert len(gpus) == n
    switches = {SWITCHES[i // 2] for i in gpus}
    assert switches == {SWITCHES[m - 1] for m in nics}
    assert chosen_nics(decision) == nics
    assert chosen_vfs(decision) == sorted(vf_id(m, 2) for m in nics)
    if n in (4, 6, 8):
        assert gpus == list(range(n))


def test_a4_a_half_used_switch_is_passed_over_for_two_gpus() -> None:
    usage = f_usage(hold(1, 1, vf_id(1, 2)))
    decision = decide(pod_json(2), f_node({0: GPU_MEM}), usage)
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([2, 3], [2])
    assert chosen_vfs(decision) == ["0000:90:00.2"]


def test_a5_three_gpus_share_the_busy_nic_through_its_next_vf() -> None:
    usage = f_usage(hold(1, 1, vf_id(1, 2)))
    decision = decide(pod_json(3), f_node({0: GPU_MEM}), usage)
    assert chosen_gpus(decision) == [1, 2, 3]
    assert chosen_nics(decision) == [1, 2]
    assert chosen_vfs(decision) == ["0000:1f:00.3", "0000:90:00.2"]


def test_a6_a_full_numa_node_sends_four_gpus_to_the_other() -> None:
    usage = f_usage(hold(1, 1, vf_id(1, 2)))
    decision = decide(pod_json(4), f_node(dict.fromkeys(range(4), GPU_MEM)), usage)
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([4, 5, 6, 7], [3, 4])


def test_a7_same_pcie_exclusive_pod_avoids_the_touched_switch() -> None:
    """X holds GPU 0 and all of NIC 1.  Ours also records the pod's exclusive claims on p1."""
    pod = pod_json(2, hint=PCIE_LEVEL_BOTH, joint=SAME_PCIE)
    decision = decide(pod, f_node({0: GPU_MEM}), f_usage(hold(1, 100)))
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([2, 3], [2])
    assert decision.claims == (("gpu", SWITCHES[1]), ("rdma", SWITCHES[1]))


def test_a8_same_pcie_searches_other_gpu_sets_before_failing() -> None:
    """Deliberate difference: Koordinator takes GPUs 1,2,3 (p0+p1), then finds NICs on p1 and p2
    and fails with "Device Joint-Allocate rules violation" without trying another GPU set.  We
    leave out GPUs whose switch has no usable NIC (p0: NIC 1 is full; and p0 is touched, which
    the gpu PCIeLevel hint forbids) and search on: three GPUs on NUMA 1 with NICs 3 and 4."""
    pod = pod_json(3, hint=PCIE_LEVEL_BOTH, joint=SAME_PCIE)
    decision = decide(pod, f_node({0: GPU_MEM}), f_usage(hold(1, 100)))
    assert decision.fits
    gpus = chosen_gpus(decision)
    assert len(gpus) == 3
    assert set(gpus) <= {4, 5, 6, 7}
    assert chosen_nics(decision) == [3, 4]
    assert {SWITCHES[i // 2] for i in gpus} == {SWITCHES[2], SWITCHES[3]}


def test_a8_same_pcie_fails_with_a_clear_reason_when_no_set_works() -> None:
    """Every NIC is full: no switch can give a NIC, so the node is refused, naming the rule."""
    pod = pod_json(2, joint=SAME_PCIE)
    full = f_usage(*(hold(m, 100) for m in (1, 2, 3, 4)))
    decision = decide(pod, f_node(), full)
    assert not decision.fits
    assert "scheduling.koordinator.sh/device-joint-allocate" in decision.reason
    assert JOINT_RULES_VIOLATION in decision.reason
    assert "SamePCIe" in decision.reason


def test_a9_heterogeneous_node_gives_four_gpus_and_the_one_nic() -> None:
    """All four switches on NUMA 0; only NIC 1 has VFs.  Best effort: same NUMA node."""
    nics = [make_nic(1, NIC_IDS[1], SWITCHES[0], 0)]
    nics += [make_nic(m, NIC_IDS[m], SWITCHES[m - 1], 0, vfs=0) for m in (2, 3, 4)]
    places = [GPUTopology(uuid=gpu_id(i), pcie_switch=SWITCHES[i // 2], numa=0) for i in range(8)]
    usage = f_usage(layout=f_layout(nics, places))
    decision = decide(pod_json(4), f_node(numa_of=dict.fromkeys(range(8), 0)), usage)
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([0, 1, 2, 3], [1])


def test_a10_single_vf_nics_and_vf_minor_in_device_allocated() -> None:
    """Four NICs (minors 0-3), one per switch, one unlabelled VF each; ``vfSelector: {}``.
    Our VF minors are ``virtfnN`` indices (here 7), written to ``extension.vfs``; a minor of -1
    written by Koordinator's node agent is read back (the VF is taken by bus id)."""
    nics = [
        RdmaNic(
            id=f"0000:{0x20 + m:02x}:00.0",
            name=f"mlx5_{m}",
            minor=m,
            numa=0 if m < 2 else 1,
            pcie_switch=SWITCHES[m],
            healthy=True,
            vf_groups=(
                VirtualFunctionGroup(vfs=(VirtualFunction(f"0000:{0x20 + m:02x}:00.1", 7),)),
            ),
        )
        for m in range(4)
    ]
    layout = f_layout(nics)
    pod = pod_json(4, hint={"rdma": {"vfSelector": {}}}, joint=SAME_PCIE)
    gpus = f_node()
    decision = decide(pod, gpus, f_usage(layout=layout))
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([0, 1, 2, 3], [0, 1])
    plan, _ = plan_and_request(pod)
    rdma = device_allocations(decision, node=gpus, layout=layout, plan=plan)["rdma"]
    assert [(a.minor, a.extension.vfs[0].minor) for a in rdma if a.extension] == [(0, 7), (1, 7)]
    vf = {"minor": -1, "busID": "0000:20:00.1"}
    entry = {"minor": 0, "resources": {"koordinator.sh/rdma": "1"}, "id": "0000:20:00.0"}
    koord = json.dumps({"rdma": [{**entry, "extension": {"vfs": [vf]}}]})
    extension = decode_device_allocated(koord)["rdma"][0].extension
    assert extension is not None
    assert extension.vfs[0].minor == -1
    held = nic_usage_from_annotations(
        {"scheduling.koordinator.sh/device-allocated": koord}, layout=layout, init_count=0
    )
    assert held.holds == (NicHold("0000:20:00.0", 1, ("0000:20:00.1",)),)


def _one_gpu_per_switch_nics(per_switch: dict[int, list[int]]) -> list[RdmaNic]:
    return [
        make_nic(minor, f"0000:{0x20 + minor:02x}:00.0", SWITCHES[s], 0 if s < 2 else 1)
        for s, minors in per_switch.items()
        for minor in minors
    ]


def test_a11_rdma_400_goes_round_robin_over_the_gpu_switches() -> None:
    """GPUs 0-3 one per switch; NICs 0,1,2@p0 3@p1 4@p2 5@p3: NICs 0,3,4,5 (not 0,1,2,3)."""
    places = [
        GPUTopology(uuid=gpu_id(i), pcie_switch=SWITCHES[i], numa=0 if i < 2 else 1)
        for i in range(4)
    ]
    nics = _one_gpu_per_switch_nics({0: [0, 1, 2], 1: [3], 2: [4], 3: [5]})
    gpus = f_node(gpus=4, per_switch=1)
    decision = decide(pod_json(4, rdma=400), gpus, f_usage(layout=f_layout(nics, places)))
    assert chosen_nics(decision) == [0, 3, 4, 5]
    assert _units(decision) == [100] * 4


def test_a12_two_nics_per_switch_rdma_400_on_the_free_numa_node() -> None:
    nics = _one_gpu_per_switch_nics({0: [1, 5], 1: [2, 6], 2: [3, 7], 3: [4, 8]})
    held = f_node(dict.fromkeys(range(4), GPU_MEM))
    decision = decide(pod_json(4, rdma=400), held, f_usage(layout=f_layout(nics)))
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([4, 5, 6, 7], [3, 4, 7, 8])
    assert _units(decision) == [100] * 4


def test_a13_apply_for_all_leaves_the_joint_set_and_takes_every_nic() -> None:
    """``rdma`` drops out of the joint set, so the GPUs are HAMi's fit on the whole node."""
    hint = {
        "rdma": {"selector": {"matchLabels": {"type": "fakeW"}}, "allocateStrategy": "ApplyForAll"}
    }
    pod = pod_json(4, hint=hint)
    layout = f_layout(f_nics(vfs=0))
    plan, request = plan_and_request(pod)
    assert not request.joint
    decision = decide(pod, f_node(), f_usage(layout=layout))
    assert len(chosen_gpus(decision)) == 4
    assert chosen_nics(decision) == [1, 2, 3, 4]
    assert _units(decision) == [1] * 4
    assert chosen_vfs(decision) == []
    rdma = device_allocations(decision, node=f_node(), layout=layout, plan=plan)["rdma"]
    assert all(a.extension is None for a in rdma)


@pytest.mark.parametrize(
    ("selector", "count"),
    [
        ({"matchLabels": {"type": "fakeW"}}, 4),
        ({"matchLabels": {"type": "fakeS"}}, 1),
        ({"matchExpressions": [{"key": "type", "operator": "Exists"}]}, 5),
        ({"matchLabels": {"no-such-key": "x"}}, None),
    ],
)
def test_a14_apply_for_all_counts_the_nics_matching_the_selector(
    selector: dict[str, object], count: int | None
) -> None:
    nics = [*f_nics(), make_nic(5, "0000:c1:00.0", SWITCHES[3], 1, labels={"type": "fakeS"})]
    hint = {"rdma": {"selector": selector, "allocateStrategy": "ApplyForAll"}}
    decision = decide(pod_json(0, hint=hint, joint=None), f_node(), f_usage(layout=f_layout(nics)))
    if count is None:
        assert not decision.fits
        assert "ApplyForAll" in decision.reason
        assert "scheduling.koordinator.sh/device-allocate-hint" in decision.reason
    else:
        assert len(chosen_nics(decision)) == count


def test_a14_apply_for_all_fails_when_a_matching_nic_is_unhealthy() -> None:
    """As Koordinator: every matching NIC counts, so an unhealthy one refuses the node."""
    nics = [*f_nics()[:3], make_nic(4, NIC_IDS[4], SWITCHES[3], 1, healthy=False)]
    hint = {"rdma": {"allocateStrategy": "ApplyForAll"}}
    decision = decide(pod_json(0, hint=hint, joint=None), f_node(), f_usage(layout=f_layout(nics)))
    assert not decision.fits
    assert "1/4 NicNotHealthy" in decision.reason


@pytest.mark.parametrize(
    ("quantity", "hint", "expected"),
    [
        (4, {"allocateStrategy": "RequestsAsCount"}, NicDemand(4, 4, 1)),
        (
            4,
            {"allocateStrategy": "RequestsAsCount", "exclusivePolicy": "DeviceLevel"},
            NicDemand(4, 4, 100),
        ),
        (100, None, NicDemand(100, 1, 100)),
        (50, None, NicDemand(50, 1, 50)),
        (300, {"allocateStrategy": "ApplyForAll"}, NicDemand(300, 3, 100)),
        (1, {"allocateStrategy": "ApplyForAll"}, NicDemand(1, 0, 1, apply_for_all=True)),
        (1, {"exclusivePolicy": "DeviceLevel"}, NicDemand(1, 1, 100)),
    ],
)
def test_a15_rdma_normalisation(
    quantity: int, hint: dict[str, object] | None, expected: NicDemand
) -> None:
    """``DeviceLevel`` gives whole NICs with every strategy (Koordinator: RequestsAsCount only)."""
    pod = pod_json(0, rdma=quantity, hint=None if hint is None else {"rdma": hint}, joint=None)
    _, request = plan_and_request(pod)
    assert request.rdma == (expected,)


@pytest.mark.parametrize(("quantity", "nics"), [(2, [1, 2]), (4, [1, 2, 3, 4]), (5, None)])
def test_a16_requests_as_count_gives_one_vf_from_each_of_n_nics(
    quantity: int, nics: list[int] | None
) -> None:
    """Without GPUs NICs go by minor: two fit on NUMA 0, four need both NUMA nodes, five do not
    fit although the NICs have 16 VFs between them."""
    hint = {"rdma": {"vfSelector": {}, "allocateStrategy": "RequestsAsCount"}}
    decision = decide(pod_json(0, rdma=quantity, hint=hint, joint=None), f_node(), f_usage())
    if nics is None:
        assert not decision.fits
        assert decision.reason.startswith(INSUFFICIENT_RDMA)
    else:
        assert chosen_nics(decision) == nics
        assert chosen_vfs(decision) == sorted(vf_id(m, 2) for m in nics)


def _scoped(scope: str, *, pcie_level: bool = False) -> dict[str, object]:
    rdma = dict(DEFAULT_HINT["rdma"])
    if pcie_level:
        rdma["exclusivePolicy"] = "PCIeLevel"
    return {"rdma": rdma, "gpu": {"requiredTopologyScope": scope}}


def test_a17_gpu_scope_bin_packs_onto_the_busy_switch() -> None:
    """X holds GPU 5 and a VF of NIC 3: one GPU goes to p2 next to it, VF 0000:51:00.3."""
    usage = f_usage(hold(3, 1, vf_id(3, 2)))
    decision = decide(pod_json(1, hint=_scoped("PCIe")), f_node({5: GPU_MEM}), usage)
    assert (chosen_gpus(decision), chosen_vfs(decision)) == ([4], ["0000:51:00.3"])


def test_a17_pcie_level_really_excludes_the_touched_switch() -> None:
    """Deliberate difference: Koordinator's PCIeLevel filter is a no-op, so it still gives
    NIC 3.  Ours keeps the exclusive pod off p2 (NIC 3 is touched by X): p3, GPU 7, NIC 4."""
    usage = f_usage(hold(3, 1, vf_id(3, 2)))
    pod = pod_json(1, hint=_scoped("PCIe", pcie_level=True))
    decision = decide(pod, f_node({5: GPU_MEM}), usage)
    assert (chosen_gpus(decision), chosen_nics(decision)) == ([7], [4])
    assert decision.claims == (("rdma", SWITCHES[3]),)


def test_a17_scopes_pcie_and_numa() -> None:
    usage = f_usage(hold(3, 1, vf_id(3, 2)))
    held5 = f_node({5: GPU_MEM})
    two = decide(pod_json(2, hint=_scoped("PCIe")), held5, usage)
    assert (chosen_gpus(two), chosen_nics(two)) == ([6, 7], [4])
    four = decide(pod_json(4, hint=_scoped("NUMANode")), held5, usage)
    assert (chosen_gpus(four), chosen_nics(four)) == ([0, 1, 2, 3], [1, 2])
    refused = decide(pod_json(4, hint=_scoped("NUMANode")), f_node({0: GPU_MEM, 5: GPU_MEM}), usage)
    assert not refused.fits
    assert refused.reason.startswith(TOPOLOGY_SCOPED_GPUS)
    assert "requiredTopologyScope NUMANode" in refused.reason


@pytest.mark.parametrize("quantity", [50, 100, 200, 400])
def test_a18_valid_rdma_quantities(quantity: int) -> None:
    assert normalise_rdma(quantity) is not None


@pytest.mark.parametrize("quantity", [101, 150, 201])
def test_a18_rdma_above_100_must_be_whole_nics(quantity: int) -> None:
    with pytest.raises(RequestError, match=r"koordinator\.sh/rdma: above 100"):
        plan_and_request(pod_json(1, rdma=quantity))


@pytest.mark.parametrize(
    "resource",
    ["koordinator.sh/gpu-core", "koordinator.sh/gpu", "koordinator.sh/gpu-memory-ratio"],
)
def test_a18_koordinator_gpu_resources_are_refused(resource: str) -> None:
    """Mixing ``nvidia.com/gpu`` with Koordinator's GPU resources (or using them alone)."""
    limits = {"nvidia.com/gpu": "1", resource: "100"}
    pod = pod_json(containers=[{"name": "c", "resources": {"limits": limits}}])
    with pytest.raises(RequestError, match="vendor resources"):
        plan_and_request(pod)


def test_a18_fpga_cannot_be_joined() -> None:
    limits = {"nvidia.com/gpu": "1", "koordinator.sh/fpga": "1"}
    joint = {"deviceTypes": ["gpu", "fpga"]}
    pod = pod_json(joint=joint, containers=[{"name": "c", "resources": {"limits": limits}}])
    with pytest.raises(ValidationError, match="device-joint-allocate"):
        plan_and_request(pod)


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ({}, [1, 5, 2, 6, 0, 3, 4, 7]),
        ({5: 10, 6: 50}, [6, 1, 5, 2, 0, 3, 4, 7]),
        ({5: 10, 6: 10}, [5, 1, 6, 2, 0, 3, 4, 7]),
    ],
)
def test_a19_secondary_order(scores: dict[int, int], expected: list[int]) -> None:
    where = {1: "0", 2: "0", 5: "1", 6: "1"}
    order = order_preferred(
        list(range(8)),
        scope=lambda m: where.get(m, f"other{m}"),
        minor=lambda m: m,
        preferred={"0", "1"},
        score=lambda m: scores.get(m, 0),
    )
    assert order == expected


def _a20_layout() -> NicLayout:
    cpu = VirtualFunctionGroup(
        vfs=tuple(VirtualFunction(f"0000:1f:00.{f}", f) for f in (2, 3, 4)),
        labels={"type": "vf_cpu"},
    )
    nic1 = RdmaNic(
        id=NIC_IDS[1],
        name="mlx5_1",
        minor=1,
        pcie_switch=SWITCHES[0],
        healthy=True,
        vf_groups=(cpu,),
    )
    return f_layout([nic1, *f_nics()[1:]])


A20_HINT = {
    "rdma": {
        "vfSelector": {
            "matchExpressions": [
                {"key": "type", "operator": "In", "values": ["vf_cpu"]},
                {"key": "isGDR", "operator": "NotIn", "values": ["false"]},
            ]
        }
    }
}
A20_DESIGNATION = json.dumps(
    {"rdma": [{"minor": 1, "resources": {"koordinator.sh/rdma": "1"},
               "extension": {"vfs": [{"busID": "0000:1f:00.4"}]}}]}
)  # fmt: skip


def test_a20_designated_vf_is_given_while_free() -> None:
    layout = _a20_layout()
    notes = {"scheduling.koordinator.sh/device-allocated": A20_DESIGNATION}
    pod = pod_json(0, hint=A20_HINT, joint=None, annotations=notes)
    decision = decide(pod, f_node(), f_usage(layout=layout))
    assert chosen_vfs(decision) == ["0000:1f:00.4"]
    taken = decide(pod, f_node(), f_usage(hold(1, 1, "0000:1f:00.4"), layout=layout))
    assert not taken.fits
    assert taken.reason.startswith(INSUFFICIENT_RDMA)


def test_a21_no_topology_and_no_vfs() -> None:
    """A vfSelector with no VFs anywhere fails up front; without one, missing topology only
    means no locality: the GPU and NIC are still placed."""
    bare = [
        RdmaNic(id=NIC_IDS[m], name=f"mlx5_{m}", minor=m, healthy=True, labels={"type": "fakeW"})
        for m in (1, 2)
    ]
    layout = f_layout(bare, places=[])
    for gpus in (0, 1):
        refused = decide(pod_json(gpus), f_node(), f_usage(layout=layout))
        assert not refused.fits
        assert refused.reason.startswith(INSUFFICIENT_VFS)
    hint = {"rdma": {"selector": {"matchLabels": {"type": "fakeW"}}}}
    placed = decide(pod_json(1, hint=hint), f_node(), f_usage(layout=layout))
    assert placed.fits
    assert len(chosen_gpus(placed)) == 1
    assert chosen_nics(placed) == [1]


def test_a22_vf_selector_without_any_vf_groups() -> None:
    decision = decide(pod_json(1), f_node(), f_usage(layout=f_layout(f_nics(vfs=0))))
    assert not decision.fits
    assert decision.reason.startswith(INSUFFICIENT_VFS)
    assert "rdma.vfSelector" in decision.reason


# --- bad input: the reason names the annotation and the problem ----------------------------
@pytest.mark.parametrize(
    ("hint", "words"),
    [
        ({"tpu": {}}, "unknown device type"),
        ({"rdma": {"vfselector": {}}}, "vfSelector"),
        ({"gpu": {"vfSelector": {}}}, "rdma only"),
        ({"gpu": {"allocateStrategy": "ApplyForAll"}}, "not supported"),
        ({"gpu": {"exclusivePolicy": "DeviceLevel"}}, "gpucores"),
        ({"gpu": {"selector": {"matchLabels": {"a": "b"}}}}, "no labels"),
        ({"rdma": {"exclusivePolicy": "pcielevel"}}, "PCIeLevel"),
    ],
)
def test_bad_hints_are_refused_naming_the_annotation(hint: dict[str, object], words: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        plan_and_request(pod_json(1, hint=hint))
    assert "scheduling.koordinator.sh/device-allocate-hint" in str(caught.value)
    assert words in str(caught.value)


def test_selector_that_matches_no_nic_refuses_with_counts() -> None:
    hint = {"rdma": {"selector": {"matchLabels": {"type": "nothing"}}}}
    decision = decide(pod_json(1, hint=hint), f_node(), f_usage())
    assert not decision.fits
    assert "4/4 NicSelectorMismatch" in decision.reason
    assert "device-allocate-hint rdma.selector matches no RDMA NIC" in decision.reason


def test_unknown_joint_type_is_refused() -> None:
    with pytest.raises(ProtocolError, match="device-joint-allocate"):
        plan_and_request(pod_json(1, joint={"deviceTypes": ["gpu", "nic"]}))
