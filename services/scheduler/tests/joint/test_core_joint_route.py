"""The one selection rule (:mod:`hami_scheduler.core.joint.route`): which path a pod takes on a
node, and that selecting among candidates and deciding on one node always agree — the filter,
the full-``Nodes`` path and ``--filter-mode all`` bind read the same answer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_scheduler.core import reasons as why
from hami_scheduler.core.joint.hints import NO_JOINT, JointRequest, NicDemand
from hami_scheduler.core.joint.nics import NicPodUsage, build_nic_usage, nic_layout
from hami_scheduler.core.joint.route import (
    NO_NIC_REASON,
    Fleet,
    choose,
    decide_on,
    takes_joint_path,
)
from hami_scheduler.core.usage.node import NodeUsage

from ..core_helpers import dev, node
from ..core_joint_helpers import (
    GPU_MEM,
    SWITCHES,
    f_nics,
    f_places,
    gpu_id,
    plan_and_request,
    pod_json,
)

KINDS = ("plain", "nics", "claimed", "nics-only", "unknown")
"""A node: GPUs only; GPUs and NICs; GPUs and NICs with another pod's GPU claim on switch p0;
NICs without GPUs; a name the fleet has never seen."""

PODS: dict[str, dict[str, Any]] = {
    "plain": pod_json(gpus=1, rdma=None, hint=None, joint=None),
    "plain-many": pod_json(gpus=7, rdma=None, hint=None, joint=None),
    "nic": pod_json(gpus=1, rdma=1),
    "nic-only": pod_json(gpus=0, rdma=1, hint=None, joint=None),
    "gpu-pcie": pod_json(gpus=1, rdma=None, hint={"gpu": {"exclusivePolicy": "PCIeLevel"}}),
}


def gpus_of(name: str, held: int) -> NodeUsage:
    devices = [
        dev(gpu_id(i), mem=GPU_MEM, count=10, index=i, numa=i // 4, used=int(i < held))
        for i in range(8)
    ]
    return node(name, devices)


def fleet_of(kinds: list[str], held: list[int]) -> tuple[Fleet, list[str]]:
    gpus = {}
    nics = {}
    claimed = set()
    seen = set()
    names = [f"n{i}" for i in range(len(kinds))]
    for name, kind, count in zip(names, kinds, held, strict=True):
        if kind == "unknown":
            continue
        seen.add(name)
        if kind != "nics-only":
            gpus[name] = gpus_of(name, count)
        if kind in ("nics", "claimed", "nics-only"):
            layout = nic_layout(name, f_nics(), gpus=f_places())
            claims = (NicPodUsage(claims=(("gpu", SWITCHES[0]),)),) if kind == "claimed" else ()
            nics[name] = build_nic_usage(layout, claims)
            if kind == "claimed":
                claimed.add(name)
    return Fleet(gpus, nics, claimed, seen), names


NIC_REQUEST = JointRequest(rdma=(NicDemand(1, 1, 1),))


@pytest.mark.parametrize(
    ("request_", "gpu_claimed", "joint"),
    [
        (NO_JOINT, False, False),
        (NO_JOINT, True, True),
        (NIC_REQUEST, False, True),
        (JointRequest(gpu_exclusive_pcie=True), False, True),
    ],
)
def test_the_rule(request_: JointRequest, gpu_claimed: bool, joint: bool) -> None:
    assert takes_joint_path(request_, gpu_claimed=gpu_claimed) is joint


def test_refusals_before_deciding_name_the_node() -> None:
    fleet, _ = fleet_of(["plain", "unknown", "nics-only"], [0, 0, 0])
    plan, request = plan_and_request(PODS["nic"])
    assert decide_on(plan, request, fleet, "n0") == NO_NIC_REASON
    assert decide_on(plan, request, fleet, "n1") == why.NODE_UNREGISTERED
    # A NIC pod that asks for a GPU cannot use a node without one; a NIC-only pod can.
    assert decide_on(plan, request, fleet, "n2") == why.NODE_UNREGISTERED
    plan, request = plan_and_request(PODS["nic-only"])
    decision = decide_on(plan, request, fleet, "n2")
    assert not isinstance(decision, str)
    assert decision.fits


@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5),
    held=st.lists(st.integers(0, 8), min_size=5, max_size=5),
    pod=st.sampled_from(sorted(PODS)),
)
def test_choosing_among_candidates_agrees_with_deciding_on_each(
    kinds: list[str], held: list[int], pod: str
) -> None:
    fleet, names = fleet_of(kinds, held[: len(kinds)])
    plan, request = plan_and_request(PODS[pod])
    choice = choose(plan, request, fleet, names)
    failed = dict(choice.failed)
    for name in names:
        decision = decide_on(plan, request, fleet, name)
        if isinstance(decision, str):
            assert failed[name] == decision
        elif decision.fits:
            assert choice.fitting[name] == decision.score
        else:
            assert failed[name] == decision.reason
    assert set(choice.fitting) | set(failed) == set(names)
    if choice.node is not None:
        assert choice.decision is not None
        assert choice.decision.node == choice.node
        assert choice.fitting[choice.node] == max(choice.fitting.values())
    else:
        assert not choice.fitting
