"""Properties of joint GPU + RDMA placement over sequences of pods arriving and leaving.

The node is fixture F (8 GPUs and 4 NICs on 4 switches, 2 per NUMA node, 4 VFs per NIC).
Random pods — whole or shared GPUs, NIC units, VFs, RequestsAsCount, DeviceLevel, PCIeLevel on
either type, SamePCIe, a second container or an init container with NICs — are decided with
:func:`decide_joint`; fitting ones are applied, and earlier ones are removed at random.  After
every step:

* no VF is held by two pods, no NIC holds more than its units;
* no pod holds a device of a type in a PCIe scope that another pod claims for that type;
* every SamePCIe decision puts its GPUs and NICs on exactly the same switches;
* the incremental usage equals a rebuild from the pods still placed, and the usage read back
  from each pod's annotations equals what its decision said;
* removing every pod gives back the idle node exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.core import NodeUsage, PodPlan, apply_usage, decision_usage, remove_usage
from hami_scheduler.core.joint.decide import JointDecision, decide_joint, pod_gpu_uuids
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nics import (
    NicPodUsage,
    NicUsage,
    apply_nic_usage,
    build_nic_usage,
    remove_nic_usage,
)
from hami_scheduler.core.joint.wire import (
    decision_nic_usage,
    joint_annotations,
    nic_usage_from_annotations,
)

from ..core_joint_helpers import container, f_layout, f_node, plan_and_request, pod_json

LAYOUT = f_layout()
IDLE_GPUS = f_node()
IDLE_NICS = build_nic_usage(LAYOUT)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    gpus = draw(st.sampled_from([0, 1, 1, 2, 3, 4]))
    shared = gpus == 1 and draw(st.booleans())
    rdma = draw(st.sampled_from([0, 1, 1, 2, 10, 100, 200]))
    rdma_hint: dict[str, Any] = {}
    if draw(st.booleans()):
        rdma_hint["vfSelector"] = {}
    strategy = draw(st.sampled_from([None, None, "RequestsAsCount"]))
    if strategy is not None and rdma <= 4:
        rdma_hint["allocateStrategy"] = strategy
    policy = draw(st.sampled_from([None, None, "DeviceLevel", "PCIeLevel"]))
    if policy is not None:
        rdma_hint["exclusivePolicy"] = policy
    hint: dict[str, Any] = {"rdma": rdma_hint}
    if draw(st.integers(0, 3)) == 0:
        hint["gpu"] = {"exclusivePolicy": "PCIeLevel"}
    joint: dict[str, Any] | None = None
    if draw(st.booleans()):
        joint = {"deviceTypes": ["gpu", "rdma"]}
        if draw(st.booleans()):
            joint["requiredScope"] = "SamePCIe"
    limits: dict[str, str] = {}
    if gpus:
        limits["gpu"] = str(gpus)
        if shared:
            limits["gpumem"] = str(draw(st.sampled_from([10000, 40000])))
    if rdma:
        limits["rdma"] = str(rdma)
    containers = [container("main", **limits)]
    if draw(st.integers(0, 3)) == 0:
        containers.append(container("side", rdma=str(draw(st.sampled_from([1, 5, 100])))))
    init = [container("init", rdma="30")] if draw(st.integers(0, 4)) == 0 else []
    return pod_json(hint=hint, joint=joint, containers=containers, init=init)


@dataclass
class _Placed:
    plan: PodPlan
    decision: JointDecision
    gpu: tuple[DeviceUsageSummary, ...]
    nic: NicPodUsage


def _place(
    pod: dict[str, Any], gpus: NodeUsage, nics: NicUsage
) -> tuple[PodPlan, JointRequest, JointDecision]:
    plan, request = plan_and_request(pod)
    return plan, request, decide_joint(gpus, nics, plan, request)


def _check_same_pcie(request: JointRequest, decision: JointDecision) -> None:
    if not (decision.fits and request.same_pcie):
        return
    gpu_switches = {LAYOUT.gpu_switch(uuid) for uuid in pod_gpu_uuids(decision.devices)}
    nic_switches = {LAYOUT.scopes[LAYOUT.positions[g.nic]] for gs in decision.nics for g in gs}
    assert gpu_switches == nic_switches
    assert "" not in gpu_switches


def _check_exclusive(placed: list[_Placed], nics: NicUsage) -> None:
    vf_holders: dict[str, int] = {}
    for entry in placed:
        for hold in entry.nic.holds:
            for bus_id in hold.vfs:
                vf_holders[bus_id] = vf_holders.get(bus_id, 0) + 1
    assert all(count == 1 for count in vf_holders.values())
    assert all(count == 1 for count in nics.vfs.values())
    assert all(units <= LAYOUT.units_per_nic for units in nics.units)
    for entry in placed:
        for kind, scope in entry.nic.claims:
            for other in placed:
                if other is entry:
                    continue
                if kind == "rdma":
                    held = {LAYOUT.scopes[LAYOUT.positions[h.nic]] for h in other.nic.holds}
                else:
                    held = {LAYOUT.gpu_scope(s.uuid) for s in other.gpu}
                assert scope not in held


@settings(max_examples=60)
@given(steps=st.lists(st.tuples(pods(), st.integers(0, 9)), min_size=1, max_size=10))
def test_sequences_keep_every_invariant(steps: list[tuple[dict[str, Any], int]]) -> None:
    gpus, nics = IDLE_GPUS, IDLE_NICS
    placed: list[_Placed] = []
    for pod, leave in steps:
        if placed and leave < 3:
            gone = placed.pop(leave % len(placed))
            gpus = remove_usage(gpus, gone.gpu)
            nics = remove_nic_usage(nics, [gone.nic])
        plan, request, decision = _place(pod, gpus, nics)
        _check_same_pcie(request, decision)
        if not decision.fits:
            assert decision.reason
            event("refused")
            continue
        event("claims" if decision.claims else "placed")
        if request.same_pcie:
            event("SamePCIe placed")
        gpu_used = decision_usage(decision.node_decision(), plan)
        nic_used = decision_nic_usage(decision, layout=LAYOUT, plan=plan)
        notes = {
            **pod["metadata"]["annotations"],
            **joint_annotations(decision, node=gpus, layout=LAYOUT, plan=plan, request=request),
        }
        rebuilt = nic_usage_from_annotations(
            notes,
            layout=LAYOUT,
            init_count=plan.requests.init_count,
            gpu_uuids=pod_gpu_uuids(decision.devices),
        )
        given = [g.vf.bus_id for gs in decision.nics for g in gs if g.vf is not None]
        assert len(given) == len(set(given))
        assert rebuilt == nic_used
        placed.append(_Placed(plan, decision, gpu_used, nic_used))
        gpus = apply_usage(gpus, gpu_used)
        nics = apply_nic_usage(nics, [nic_used])
        _check_exclusive(placed, nics)
        assert nics == build_nic_usage(LAYOUT, [entry.nic for entry in placed])
    for entry in placed:
        gpus = remove_usage(gpus, entry.gpu)
        nics = remove_nic_usage(nics, [entry.nic])
    assert nics == IDLE_NICS
    assert gpus.devices == IDLE_GPUS.devices


@settings(max_examples=60)
@given(pod=pods(), held=st.lists(st.integers(0, 7), max_size=5, unique=True))
def test_same_pcie_decisions_share_their_switches(pod: dict[str, Any], held: list[int]) -> None:
    pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-joint-allocate"] = json.dumps(
        {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}
    )
    gpus = f_node(dict.fromkeys(held, 81920))
    _, request, decision = _place(pod, gpus, IDLE_NICS)
    _check_same_pcie(request, decision)
    assert decision.fits or decision.reason
    if request.same_pcie:
        event(f"SamePCIe {'fits' if decision.fits else 'refused'}")
