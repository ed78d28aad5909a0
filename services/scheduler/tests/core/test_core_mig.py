"""Dynamic MIG occupancy and choice: the contract's rules as tables, refusals, properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.node.registry import DeviceInfo, MigPlacement, MigProfile
from hami_protocol.pod.mig import MigReservation
from hami_protocol.request.containers import PERCENTAGE_UNSET, ContainerDeviceRequest
from hami_scheduler.core.mig import (
    CARD_MIG_TOPOLOGY_INFEASIBLE,
    GpuOccupancy,
    HeldSlices,
    MigChoice,
    MigGpu,
    MigRefusal,
    choose_instance,
    choose_instances,
    mig_memory,
    mig_occupancy,
    overlaps,
    placement_order,
    profile_order,
)

GPU_A = "GPU-aaaa"
GPU_B = "GPU-bbbb"


def spots(size: int, *starts: int) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start, size) for start in starts)


# An A100-40GB-like geometry: 7 compute slices, the full instance spans 8 memory slices.
P1G5 = MigProfile("1g.5gb", 4864, 15, 1, spots(1, 0, 1, 2, 3, 4, 5, 6))
P2G10 = MigProfile("2g.10gb", 9856, 29, 2, spots(2, 0, 2, 4))
P3G20 = MigProfile("3g.20gb", 19968, 43, 3, spots(4, 0, 4))
P4G20 = MigProfile("4g.20gb", 19968, 58, 4, spots(4, 0))
P7G40 = MigProfile("7g.40gb", 40192, 100, 7, spots(8, 0))
A100 = (P7G40, P4G20, P3G20, P2G10, P1G5)  # registration order deliberately not sorted


def gpu(uuid: str = GPU_A, profiles: tuple[MigProfile, ...] = A100, mem: int = 40960) -> MigGpu:
    return MigGpu(uuid, mem, profiles)


def held(*placements: tuple[int, int], uuid: str = GPU_A) -> GpuOccupancy:
    return GpuOccupancy(
        uuid, tuple(HeldSlices(f"pod-{n}", "x", MigPlacement(*p)) for n, p in enumerate(placements))
    )


def req(*, mem: int = 0, pct: int = PERCENTAGE_UNSET, nums: int = 1) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(nums, "NVIDIA", mem, pct, 0)


def chosen(outcome: MigChoice | MigRefusal) -> tuple[str, int, int]:
    assert isinstance(outcome, MigChoice), outcome
    return outcome.profile.name, outcome.placement.start, outcome.placement.size


# --- overlap and ordering -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0, 1), (1, 1), False),
        ((0, 2), (1, 1), True),
        ((4, 4), (0, 4), False),
        ((4, 4), (6, 1), True),
        ((0, 8), (7, 1), True),
        ((3, 1), (3, 1), True),
        ((2, 2), (0, 2), False),
    ],
)
def test_overlap_rule(a: tuple[int, int], b: tuple[int, int], expected: bool) -> None:
    assert overlaps(MigPlacement(*a), MigPlacement(*b)) is expected
    assert overlaps(MigPlacement(*b), MigPlacement(*a)) is expected


def test_profiles_sort_by_memory_then_slices_ties_keep_registration_order() -> None:
    twin = MigProfile("1g.5gb+me", 4864, 15, 1, spots(1, 6))
    ordered = profile_order((*A100, twin))
    assert [p.name for p in ordered] == [
        "1g.5gb",
        "1g.5gb+me",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]


@pytest.mark.parametrize(
    ("profile", "starts"),
    [
        (P1G5, [6, 5, 4, 3, 2, 1, 0]),
        (P3G20, [4, 0]),
        (P2G10, [0, 2, 4]),
        (MigProfile("1c.3g.20gb", 1, 1, 1, spots(1, 3, 1, 2)), [1, 2, 3]),
        (MigProfile("3g.40gb", 1, 1, 3, spots(4, 0, 4)), [4, 0]),
    ],
)
def test_placement_order_1g_and_3g_highest_first_others_lowest(
    profile: MigProfile, starts: list[int]
) -> None:
    assert [p.start for p in placement_order(profile)] == starts


# --- single choice --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memreq", "taken", "expected"),
    [
        pytest.param(1000, (), ("1g.5gb", 6, 1), id="smallest-profile-highest-start"),
        pytest.param(4864, (), ("1g.5gb", 6, 1), id="exactly-the-profile-memory"),
        pytest.param(4000, ((6, 1),), ("1g.5gb", 5, 1), id="1g-next-highest"),
        pytest.param(4000, ((4, 4),), ("1g.5gb", 3, 1), id="1g-under-a-3g"),
        pytest.param(9000, (), ("2g.10gb", 0, 2), id="2g-lowest-start"),
        pytest.param(9000, ((0, 1),), ("2g.10gb", 2, 2), id="2g-skips-taken-low"),
        pytest.param(9000, ((1, 1), (3, 1)), ("2g.10gb", 4, 2), id="2g-third-placement"),
        pytest.param(15000, (), ("3g.20gb", 4, 4), id="3g-highest-start"),
        pytest.param(15000, ((6, 1),), ("3g.20gb", 0, 4), id="3g-falls-back-low"),
        pytest.param(19968, ((0, 1), (6, 1)), None, id="3g-and-4g-both-blocked"),
        pytest.param(20000, (), ("7g.40gb", 0, 8), id="only-the-whole-gpu"),
        pytest.param(20000, ((7, 1),), None, id="whole-gpu-touched"),
        pytest.param(50000, (), None, id="larger-than-any-profile"),
        pytest.param(0, (), ("1g.5gb", 6, 1), id="no-memory-asked"),
    ],
)
def test_choice_table(
    memreq: int, taken: tuple[tuple[int, int], ...], expected: tuple[str, int, int] | None
) -> None:
    outcome = choose_instance(gpu(), held(*taken), memreq)
    if expected is None:
        assert isinstance(outcome, MigRefusal)
        assert outcome.reason == CARD_MIG_TOPOLOGY_INFEASIBLE
    else:
        assert chosen(outcome) == expected


def test_equal_memory_prefers_fewer_slices() -> None:
    assert chosen(choose_instance(gpu(), held(), 19968))[0] == "3g.20gb"
    assert chosen(choose_instance(gpu(), held((4, 1)), 19968)) == ("3g.20gb", 0, 4)


def test_a_larger_profile_is_taken_when_the_smaller_has_no_free_placement() -> None:
    narrow = MigProfile("1g.5gb", 4864, 15, 1, spots(1, 6))
    device = gpu(profiles=(P2G10, narrow))
    assert chosen(choose_instance(device, held(), 4000)) == ("1g.5gb", 6, 1)
    assert chosen(choose_instance(device, held((6, 1)), 4000)) == ("2g.10gb", 0, 2)


def test_usage_charged_is_the_profiles_not_the_requests() -> None:
    outcome = choose_instance(gpu(), held(), 1000)
    assert isinstance(outcome, MigChoice)
    assert (outcome.usedmem, outcome.usedcores) == (4864, 15)
    assert outcome.reservation(1, 2) == MigReservation(1, 2, GPU_A, "1g.5gb", MigPlacement(6, 1))


@pytest.mark.parametrize(
    ("request_", "totalmem", "expected"),
    [
        (req(mem=3000), 40960, 3000),
        (req(mem=3000, pct=50), 40960, 3000),
        (req(pct=50), 8192, 4096),
        (req(pct=25), 40960, 10240),
        (req(pct=33), 1000, 330),
        (req(), 40960, 0),
    ],
)
def test_memory_is_the_requests_mib_or_its_percentage_of_the_gpu(
    request_: ContainerDeviceRequest, totalmem: int, expected: int
) -> None:
    assert mig_memory(request_, totalmem) == expected


def test_percentage_request_picks_by_resolved_memory() -> None:
    pick = choose_instances([gpu()], {}, req(pct=25), 1)
    assert [chosen(c) for c in pick.choices] == [("3g.20gb", 4, 4)]


def test_contract_item_25_only_profile_1024_request_half_of_8192() -> None:
    small = MigProfile("1g.1gb", 1024, 100, 1, spots(1, 0))
    device = gpu(profiles=(small,), mem=8192)
    pick = choose_instances([device], {}, req(pct=50), 1)
    assert not pick.ok
    assert pick.choices == ()
    (refusal,) = pick.refusals
    assert (refusal.memreq, refusal.profile, refusal.largest) == (4096, None, small)
    assert not refusal.fragmented
    assert refusal.describe() == (
        "CardMigTopologyInfeasible: GPU-aaaa has no MIG profile of 4096 MiB "
        "(largest 1g.1gb, 1024 MiB)"
    )


# --- refusals say why -----------------------------------------------------------------------------


def test_fragmentation_is_named_with_the_profile_and_free_runs() -> None:
    outcome = choose_instance(gpu(), held((0, 1), (2, 1), (4, 1)), 9000)
    assert isinstance(outcome, MigRefusal)
    assert outcome.profile == P2G10
    assert outcome.free == (MigPlacement(1, 1), MigPlacement(3, 1), MigPlacement(5, 3))
    assert outcome.fragmented
    assert outcome.describe() == (
        "CardMigTopologyInfeasible: GPU-aaaa 2g.10gb fits 9000 MiB but free slices "
        "[1,2) [3,4) [5,8) offer no placement of it (placements start at 0,2,4)"
    )


def test_a_full_gpu_is_not_called_fragmented() -> None:
    outcome = choose_instance(gpu(), held((0, 8)), 1000)
    assert isinstance(outcome, MigRefusal)
    assert outcome.free == ()
    assert not outcome.fragmented
    assert "free slices (none)" in outcome.describe()
    assert "placements start at 0,1,2,3,4,5,6" in outcome.describe()


def test_a_gpu_without_profiles_says_so() -> None:
    outcome = choose_instance(gpu(profiles=()), held(), 1)
    assert isinstance(outcome, MigRefusal)
    assert outcome.describe() == "CardMigTopologyInfeasible: GPU-aaaa registers no MIG profile"


def test_a_profile_without_placements_never_fits_and_says_so() -> None:
    bare = MigProfile("1g.5gb", 4864, 15, 1)
    outcome = choose_instance(gpu(profiles=(bare,)), held(), 100)
    assert isinstance(outcome, MigRefusal)
    assert outcome.profile == bare
    assert outcome.describe().endswith("(placements start at nowhere)")


# --- several instances ----------------------------------------------------------------------------


def test_one_container_gets_two_instances_of_one_gpu() -> None:
    pick = choose_instances([gpu(GPU_A), gpu(GPU_B)], {}, req(mem=4000), 2, owner="ns/p")
    assert pick.ok
    assert [(c.gpu_uuid, c.placement.start) for c in pick.choices] == [(GPU_A, 6), (GPU_A, 5)]
    assert [h.placement.start for h in pick.occupancy[GPU_A].held] == [5, 6]
    assert {h.owner for h in pick.occupancy[GPU_A].held} == {"ns/p"}
    assert GPU_B not in pick.occupancy
    assert pick.refusals == ()


def test_the_walk_moves_on_when_a_gpu_is_full_and_records_why() -> None:
    pick = choose_instances([gpu(GPU_A), gpu(GPU_B)], {}, req(mem=4000), 8)
    assert pick.ok
    assert [c.gpu_uuid for c in pick.choices] == [GPU_A] * 7 + [GPU_B]
    assert [r.gpu_uuid for r in pick.refusals] == [GPU_A]
    assert pick.refusals[0].free == (MigPlacement(7, 1),)


def test_too_many_instances_fail_with_what_was_found() -> None:
    pick = choose_instances([gpu()], {GPU_A: held((0, 4))}, req(mem=15000), 2)
    assert not pick.ok
    assert [chosen(c) for c in pick.choices] == [("3g.20gb", 4, 4)]
    (refusal,) = pick.refusals
    assert refusal.free == ()


def test_existing_occupancy_is_respected_and_not_modified() -> None:
    before = {GPU_A: held((6, 1))}
    pick = choose_instances([gpu()], before, req(mem=4000), 1)
    assert chosen(pick.choices[0]) == ("1g.5gb", 5, 1)
    assert len(before[GPU_A].held) == 1
    assert len(pick.occupancy[GPU_A].held) == 2


def test_zero_instances_asked_is_trivially_ok() -> None:
    pick = choose_instances([gpu()], {}, req(mem=1), 0)
    assert pick.ok
    assert pick.choices == ()


# --- occupancy from reservations ------------------------------------------------------------------


def reservation(c: int, d: int, uuid: str, profile: str, start: int, size: int) -> MigReservation:
    return MigReservation(c, d, uuid, profile, MigPlacement(start, size))


def test_occupancy_is_rebuilt_per_gpu_from_every_pods_reservations() -> None:
    occupancy = mig_occupancy(
        [
            ("ns/a", [reservation(0, 0, GPU_A, "1g.5gb", 6, 1)]),
            (
                "ns/b",
                [
                    reservation(0, 0, GPU_A, "3g.20gb", 0, 4),
                    reservation(1, 0, GPU_B, "1g.5gb", 6, 1),
                ],
            ),
            ("ns/c", []),
        ]
    )
    assert sorted(occupancy) == [GPU_A, GPU_B]
    assert [h.owner for h in occupancy[GPU_A].held] == [
        "ns/b container 0 device 0",
        "ns/a container 0 device 0",
    ]
    assert occupancy[GPU_A].conflicts() == ()
    assert occupancy[GPU_A].free_runs(8) == (MigPlacement(4, 2), MigPlacement(7, 1))
    assert chosen(choose_instance(gpu(), occupancy[GPU_A], 1000)) == ("1g.5gb", 5, 1)


def test_overlapping_reservations_are_reported_not_merged() -> None:
    occupancy = mig_occupancy(
        [
            ("ns/a", [reservation(0, 0, GPU_A, "3g.20gb", 4, 4)]),
            ("ns/b", [reservation(0, 0, GPU_A, "1g.5gb", 6, 1)]),
            ("ns/c", [reservation(0, 1, GPU_A, "1g.5gb", 7, 1)]),
            ("ns/d", [reservation(0, 0, GPU_A, "1g.5gb", 0, 1)]),
        ]
    )[GPU_A]
    assert len(occupancy.held) == 4
    described = [conflict.describe() for conflict in occupancy.conflicts()]
    assert described == [
        "GPU-aaaa: ns/a container 0 device 0 (3g.20gb [4,8)) overlaps "
        "ns/b container 0 device 0 (1g.5gb [6,7))",
        "GPU-aaaa: ns/a container 0 device 0 (3g.20gb [4,8)) overlaps "
        "ns/c container 0 device 1 (1g.5gb [7,8))",
    ]
    # Both claims keep their slices out of any new choice.
    blocked = choose_instance(gpu(), occupancy, 15000)
    assert isinstance(blocked, MigRefusal)
    assert blocked.free == (MigPlacement(1, 3),)
    assert chosen(choose_instance(gpu(), occupancy, 1000)) == ("1g.5gb", 3, 1)


def test_mig_gpu_from_a_registered_device() -> None:
    info = DeviceInfo(GPU_A, 0, 7, 40960, 100, "NVIDIA-A100", 0, True, "mig", A100)
    device = MigGpu.from_info(info)
    assert (device.uuid, device.totalmem, device.profiles, device.span) == (GPU_A, 40960, A100, 8)


# --- properties -----------------------------------------------------------------------------------

SPAN = 8


@st.composite
def profiles(draw: st.DrawFn) -> MigProfile:
    size = draw(st.integers(1, SPAN))
    starts = draw(st.lists(st.integers(0, SPAN - size), max_size=4, unique=True))
    return MigProfile(
        name=f"{draw(st.sampled_from(['1', '2', '3', '4', '7']))}g.{size}",
        memory_mb=draw(st.sampled_from([1024, 2048, 4096, 8192])),
        core=draw(st.integers(0, 100)),
        slice_count=draw(st.integers(1, SPAN)),
        placements=spots(size, *starts),
    )


GPUS = st.builds(
    MigGpu, st.just(GPU_A), st.just(40960), st.lists(profiles(), max_size=5).map(tuple)
)
OCCUPANCY = st.lists(st.tuples(st.integers(0, SPAN - 1), st.integers(1, 3)), max_size=4).map(
    lambda taken: held(*taken)
)
MEMREQ = st.sampled_from([0, 1000, 2048, 3000, 8192, 9000])


def fits_somewhere(device: MigGpu, occupancy: GpuOccupancy, memreq: int) -> list[MigProfile]:
    return [
        p
        for p in device.profiles
        if p.memory_mb >= memreq and any(occupancy.is_free(spot) for spot in p.placements)
    ]


@given(GPUS, OCCUPANCY, MEMREQ)
def test_a_choice_is_free_large_enough_and_the_smallest_that_fits(
    device: MigGpu, occupancy: GpuOccupancy, memreq: int
) -> None:
    outcome = choose_instance(device, occupancy, memreq)
    candidates = fits_somewhere(device, occupancy, memreq)
    if isinstance(outcome, MigRefusal):
        assert candidates == []
        return
    assert outcome.placement in outcome.profile.placements
    assert outcome.profile.memory_mb >= memreq
    assert not any(overlaps(outcome.placement, h.placement) for h in occupancy.held)
    smallest = min((p.memory_mb, p.slice_count) for p in candidates)
    assert (outcome.profile.memory_mb, outcome.profile.slice_count) == smallest


@given(GPUS, OCCUPANCY, MEMREQ)
def test_choosing_again_after_reserving_never_reuses_a_slice(
    device: MigGpu, occupancy: GpuOccupancy, memreq: int
) -> None:
    first = choose_instance(device, occupancy, memreq)
    if not isinstance(first, MigChoice):
        return
    after = occupancy.with_held(HeldSlices("new", first.profile.name, first.placement))
    second = choose_instance(device, after, memreq)
    if isinstance(second, MigChoice):
        assert not overlaps(first.placement, second.placement)


@given(
    st.lists(GPUS.map(lambda g: MigGpu(GPU_B, g.totalmem, g.profiles)), max_size=1),
    GPUS,
    OCCUPANCY,
    MEMREQ,
    st.integers(0, 6),
)
def test_several_instances_never_overlap_each_other_or_what_was_held(
    extra: list[MigGpu], device: MigGpu, occupancy: GpuOccupancy, memreq: int, count: int
) -> None:
    pick = choose_instances([device, *extra], {GPU_A: occupancy}, req(mem=memreq), count)
    assert len(pick.choices) <= count
    assert pick.ok == (len(pick.choices) == count)
    for uuid in (GPU_A, GPU_B):
        mine = [c.placement for c in pick.choices if c.gpu_uuid == uuid]
        before = occupancy.held if uuid == GPU_A else ()
        for n, spot in enumerate(mine):
            assert all(not overlaps(spot, h.placement) for h in before)
            assert all(not overlaps(spot, other) for other in mine[n + 1 :])
    if not pick.ok:
        assert {r.gpu_uuid for r in pick.refusals} == {g.uuid for g in (device, *extra)}


@given(OCCUPANCY)
def test_free_runs_and_held_slices_partition_the_gpu(occupancy: GpuOccupancy) -> None:
    covered = {
        s
        for h in occupancy.held
        for s in range(h.placement.start, h.placement.start + h.placement.size)
    }
    free = [s for run in occupancy.free_runs(SPAN) for s in range(run.start, run.start + run.size)]
    assert sorted(free) == [s for s in range(SPAN) if s not in covered]
    runs = occupancy.free_runs(SPAN)
    assert all(a.start + a.size < b.start for a, b in itertools.pairwise(runs))
    pairs = {(c.first, c.second) for c in occupancy.conflicts()}
    held = occupancy.held
    expected = {
        (held[i], held[j])
        for i in range(len(held))
        for j in range(i + 1, len(held))
        if overlaps(held[i].placement, held[j].placement)
    }
    assert pairs == expected
