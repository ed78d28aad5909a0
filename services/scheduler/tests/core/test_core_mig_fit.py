"""MIG inside the whole-pod decision: profiles and placements through ``decide_node``, the
occupancy a node's pods hold, instances shared between containers, and the refusals."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.node.registry import DeviceInfo, MigPlacement, MigProfile
from hami_protocol.pod.devices import DeviceUsageSummary
from hami_protocol.pod.mig import MigReservation
from hami_scheduler.core import NodeUsage, apply_usage, build_node_usage, decide_node, remove_usage
from hami_scheduler.core.decide import decision_usage
from hami_scheduler.core.mig import mig_holds
from hami_scheduler.core.select import select_node

from ..core_helpers import gpu, plain, plan_of


def spots(size: int, *starts: int) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start, size) for start in starts)


P1G5 = MigProfile("1g.5gb", 4864, 15, 1, spots(1, 0, 1, 2, 3, 4, 5, 6))
P2G10 = MigProfile("2g.10gb", 9856, 29, 2, spots(2, 0, 2, 4))
P3G20 = MigProfile("3g.20gb", 19968, 43, 3, spots(4, 0, 4))
P4G20 = MigProfile("4g.20gb", 19968, 58, 4, spots(4, 0))
P7G40 = MigProfile("7g.40gb", 40192, 100, 7, spots(8, 0))
A100 = (P1G5, P2G10, P3G20, P4G20, P7G40)


def a100(uuid: str, index: int = 0, *, mode: str = "mig") -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=7,
        devmem=40960,
        devcore=100,
        type="NVIDIA-A100-SXM4-40GB",
        numa=0,
        mode=mode,
        health=True,
        mig_profiles=A100 if mode == "mig" else (),
    )


def mig_node(
    *gpus: DeviceInfo, pods: Sequence[tuple[str, Sequence[MigReservation]]] = ()
) -> NodeUsage:
    node = build_node_usage("n", {"NVIDIA": list(gpus) or [a100("GPU-0")]})
    for name, reservations in pods:
        node = apply_usage(node, (), mig_holds(name, reservations))
    return node


def held(
    uuid: str, profile: MigProfile, start: int, container: int = 0, device: int = 0
) -> MigReservation:
    size = next(p.size for p in profile.placements if p.start == start)
    return MigReservation(container, device, uuid, profile.name, MigPlacement(start, size))


def slices(decision_mig: Sequence[MigReservation]) -> list[tuple[str, str, int, int]]:
    return [(r.gpu_uuid, r.profile, r.placement.start, r.placement.size) for r in decision_mig]


def test_a_small_request_gets_the_smallest_profile_at_the_highest_start() -> None:
    decision = decide_node(mig_node(), plan_of([gpu(1, mem=4000)]))
    assert decision.fits, decision.reason
    assert slices(decision.mig) == [("GPU-0", "1g.5gb", 6, 1)]
    assert (decision.mig[0].container_index, decision.mig[0].device_index) == (0, 0)
    nvidia = decision.devices.get("NVIDIA")
    assert nvidia is not None
    # Charged as the profile, not as the request.
    assert [(d.uuid, d.usedmem, d.usedcores) for d in nvidia[0]] == [("GPU-0", 4864, 15)]


def test_a_percentage_resolves_against_the_gpu_memory() -> None:
    decision = decide_node(mig_node(), plan_of([gpu(1, pct=40)]))
    assert slices(decision.mig) == [("GPU-0", "3g.20gb", 4, 4)]


def test_one_container_takes_several_instances_of_one_gpu() -> None:
    decision = decide_node(mig_node(), plan_of([gpu(3, mem=4000)]))
    assert decision.fits, decision.reason
    assert slices(decision.mig) == [
        ("GPU-0", "1g.5gb", 6, 1),
        ("GPU-0", "1g.5gb", 5, 1),
        ("GPU-0", "1g.5gb", 4, 1),
    ]
    assert [r.device_index for r in decision.mig] == [0, 1, 2]


def test_more_instances_than_the_gpu_has_slots_are_refused() -> None:
    decision = decide_node(mig_node(), plan_of([gpu(8, mem=4000)]))
    assert not decision.fits
    assert "CardTimeSlicingExhausted" in decision.reason or "AllocatedCards" in decision.reason


def test_containers_and_init_containers_share_the_slices() -> None:
    plan = plan_of([gpu(1, mem=15000), plain(), gpu(1, mem=9000)], init=[gpu(1, mem=4000)])
    decision = decide_node(mig_node(), plan)
    assert decision.fits, decision.reason
    assert [(r.container_index, r.device_index) for r in decision.mig] == [(0, 0), (1, 0), (3, 0)]
    assert slices(decision.mig) == [
        ("GPU-0", "1g.5gb", 6, 1),
        ("GPU-0", "3g.20gb", 0, 4),  # [4,8) would cross the init container's slice 6
        ("GPU-0", "2g.10gb", 4, 2),
    ]
    # A third 3g instance finds no placement left, and the reason says where the slices are.
    crowded = plan_of([gpu(1, mem=15000), gpu(1, mem=15000)], init=[gpu(1, mem=4000)])
    refused = decide_node(mig_node(), crowded)
    assert refused.reason == (
        "1/1 CardMigTopologyInfeasible — GPU-0 3g.20gb fits 15000 MiB but free slices [4,6) "
        "[7,8) offer no placement of it (placements start at 0,4)"
    )


def test_held_slices_are_respected_and_fragmentation_is_named() -> None:
    # Slices 1, 3 and 5-6 held: a 2-slice profile needs a placement starting at 0, 2 or 4.
    pods = [
        ("ns/a", [held("GPU-0", P1G5, 1)]),
        ("ns/b", [held("GPU-0", P1G5, 3)]),
        ("ns/c", [held("GPU-0", P1G5, 5), held("GPU-0", P1G5, 6, device=1)]),
    ]
    node = mig_node(pods=pods)
    small = decide_node(node, plan_of([gpu(1, mem=4000)]))
    assert slices(small.mig) == [("GPU-0", "1g.5gb", 4, 1)]
    refused = decide_node(node, plan_of([gpu(1, mem=9000)]))
    assert not refused.fits
    assert refused.reason.startswith("1/1 CardMigTopologyInfeasible — ")
    assert "GPU-0 2g.10gb fits 9000 MiB but free slices [0,1) [2,3) [4,5) [7,8)" in refused.reason
    assert "placements start at 0,2,4" in refused.reason


def test_no_profile_large_enough_says_so() -> None:
    refused = decide_node(mig_node(), plan_of([gpu(1, mem=40500)]))
    assert not refused.fits
    # The memory check comes first: the GPU has 40960 MiB, no profile has 40500.
    assert "CardMigTopologyInfeasible" in refused.reason
    assert "has no MIG profile of 40500 MiB (largest 7g.40gb, 40192 MiB)" in refused.reason


def test_the_second_gpu_is_used_when_the_first_is_full() -> None:
    node = mig_node(a100("GPU-0", 0), a100("GPU-1", 1), pods=[("ns/a", [held("GPU-0", P7G40, 0)])])
    decision = decide_node(node, plan_of([gpu(1, mem=30000)]))
    assert decision.fits, decision.reason
    assert slices(decision.mig) == [("GPU-1", "7g.40gb", 0, 8)]


def test_slots_in_use_without_reservations_make_the_gpu_unusable() -> None:
    node = mig_node()
    node = apply_usage(node, [DeviceUsageSummary("GPU-0", "NVIDIA", 4864, 15, 1)])
    refused = decide_node(node, plan_of([gpu(1, mem=1000)]))
    assert refused.reason == "1/1 CardNotHealth"


def test_reservations_on_a_gpu_not_in_mig_mode_make_it_unusable() -> None:
    node = mig_node(a100("GPU-0", mode="hami-core"), pods=[("ns/a", [held("GPU-0", P1G5, 6)])])
    refused = decide_node(node, plan_of([gpu(1, mem=1000)]))
    assert refused.reason == "1/1 CardNotHealth"


def test_vgpu_mode_keeps_shared_pods_off_mig_gpus_and_mig_pods_on_them() -> None:
    shared = plan_of([gpu(1, mem=1000)], annotations={"nvidia.com/vgpu-mode": "hami-core"})
    assert decide_node(mig_node(), shared).reason == "1/1 CardTypeMismatch"
    mig = plan_of([gpu(1, mem=1000)], annotations={"nvidia.com/vgpu-mode": "mig"})
    assert decide_node(mig_node(a100("GPU-0", mode="hami-core")), mig).reason == (
        "1/1 CardTypeMismatch"
    )
    assert decide_node(mig_node(), mig).fits


def test_holds_apply_and_remove_exactly() -> None:
    node = mig_node()
    holds = mig_holds("ns/a", [held("GPU-0", P1G5, 6), held("GPU-0", P2G10, 0, device=1)])
    added = apply_usage(node, (), holds)
    assert len(added.mig["GPU-0"].held) == 2
    assert remove_usage(added, (), holds[:1]).mig["GPU-0"].held == (holds[1][1],)
    assert remove_usage(added, (), holds).mig == {}
    # Removing what is not held changes nothing.
    assert remove_usage(node, (), holds).mig == {}


def test_selection_takes_the_full_decision_on_mig_nodes() -> None:
    nodes = {"n": mig_node(), "m": mig_node(a100("GPU-9"))}
    chosen = select_node(plan_of([gpu(2, mem=4000)]), nodes)
    assert chosen.node in nodes
    assert chosen.decision is not None
    assert len(chosen.decision.mig) == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([1000, 5000, 9000, 15000, 20000, 40000])),
        max_size=12,
    )
)
def test_placing_pod_after_pod_never_overlaps_or_overcommits(
    requests: list[tuple[int, int]],
) -> None:
    node = mig_node(a100("GPU-0", 0), a100("GPU-1", 1))
    for number, (nums, mem) in enumerate(requests):
        plan = plan_of([gpu(nums, mem=mem)])
        decision = decide_node(node, plan)
        if not decision.fits:
            continue
        assert len(decision.mig) == nums
        node = apply_usage(
            node, decision_usage(decision, plan), mig_holds(f"ns/p{number}", decision.mig)
        )
    for occupancy in node.mig.values():
        assert occupancy.conflicts() == ()
        assert all(h.placement.start + h.placement.size <= 8 for h in occupancy.held)
    for dev in node.devices:
        assert dev.used <= dev.count
        assert dev.usedmem <= dev.totalmem
        assert dev.used == len(node.mig[dev.uuid].held) if dev.uuid in node.mig else dev.used == 0
