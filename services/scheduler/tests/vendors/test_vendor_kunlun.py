"""Kunlunxin whole XPUs and vXPUs: the graph selector, usability and the bubble score
(contract hami-extensions §1.2 Kunlun)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import ContainerDevice
from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import kunlun
from hami_scheduler.core.vendors.kunlun import KUNLUN, VXPU, bubble, graph_select

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

NO_FIT = "1/1 NumaNotFit"
PLAIN = FitContext()


def board(busy: frozenset[int] | set[int] = frozenset()) -> list[DeviceUsage]:
    return [
        vdev(KUNLUN, i, count=100, mem=98304, cores=100, used=1 if i in busy else 0)
        for i in range(8)
    ]


def picked(devices: list[DeviceUsage], nums: int, ctx: FitContext = PLAIN) -> list[int]:
    result = kunlun.fit(devices, vreq(KUNLUN, nums), ctx)
    assert result.ok, result.reason
    return [int(uuid.rsplit("-", 1)[1]) for uuid in uuids_of(result.devices)]


SELECTIONS = [
    # one device: the wing whose free count comes first in 1, 3, 2, 4
    pytest.param(set(), 1, [0], id="1-both-wings-full-left-first"),
    pytest.param({0, 1, 2}, 1, [3], id="1-left-has-one"),
    pytest.param({4, 5, 6}, 1, [7], id="1-right-has-one"),
    pytest.param({0}, 1, [1], id="1-left-three-before-right-four"),
    pytest.param({0, 1}, 1, [2], id="1-two-vs-four-takes-two"),
    pytest.param({0, 1, 4}, 1, [5], id="1-three-before-two"),
    pytest.param({0, 1, 4, 5, 6}, 1, [7], id="1-one-before-two"),
    # two devices: count..4
    pytest.param({0, 1}, 2, [2, 3], id="2-left-two"),
    pytest.param({0}, 2, [1, 2], id="2-three-before-four"),
    pytest.param({0, 4, 5}, 2, [6, 7], id="2-right-two-before-left-three"),
    pytest.param(set(), 2, [0, 1], id="2-idle-board"),
    # four devices
    pytest.param(set(), 4, [0, 1, 2, 3], id="4-idle-left"),
    pytest.param({0}, 4, [4, 5, 6, 7], id="4-right-wing"),
    pytest.param({0, 1, 2, 3}, 8 // 2, [4, 5, 6, 7], id="4-only-right"),
    # eight
    pytest.param(set(), 8, list(range(8)), id="8-all"),
    # across the wings: pairs
    pytest.param({1, 2, 3, 5, 6, 7}, 2, [0, 4], id="2-cross-0-4"),
    pytest.param({0, 2, 3, 4, 6, 7}, 2, [1, 5], id="2-cross-1-5"),
    pytest.param({0, 1, 3, 4, 5, 7}, 2, [2, 6], id="2-cross-2-6"),
    pytest.param({0, 1, 2, 5, 6, 4}, 2, [3, 7], id="2-cross-3-7"),
    # across the wings: groups with 4-5 free
    pytest.param({2, 3, 6, 7}, 4, [0, 1, 4, 5], id="4-group-0145"),
    pytest.param({0, 1, 4, 5}, 4, [2, 3, 6, 7], id="4-group-2367"),
    pytest.param({1, 3, 5, 7}, 4, [0, 2, 4, 6], id="4-group-0246"),
    pytest.param({0, 2, 4, 6}, 4, [1, 3, 5, 7], id="4-group-1357"),
    pytest.param({1, 2, 5, 6}, 4, [0, 3, 4, 7], id="4-group-0347"),
    pytest.param({0, 3, 4, 7}, 4, [1, 2, 5, 6], id="4-group-1256"),
    pytest.param({2, 6, 7}, 4, [0, 1, 4, 5], id="4-five-free"),
    # six free (3 + 3): prefer a group leaving a linked pair
    pytest.param({3, 7}, 4, [0, 1, 4, 5], id="6-leaves-2-6-linked"),
    pytest.param({0, 7}, 4, [1, 2, 5, 6], id="6-no-linked-rest-takes-last-group"),
]


@pytest.mark.parametrize(("busy", "nums", "expected"), SELECTIONS)
def test_the_graph_selector_picks_board_indices(
    busy: set[int], nums: int, expected: list[int]
) -> None:
    assert sorted(picked(board(busy), nums)) == sorted(expected)


def test_six_free_without_a_group_leaving_a_link_takes_the_last_usable_group() -> None:
    # free 0,1,2,4,5,6: usable groups 0145 (leaves 2,6: linked) — the first linked one wins.
    assert graph_select({0, 1, 2, 4, 5, 6}, 4) == (0, 1, 4, 5)
    # free 0,2,3,4,5,7 (0 and 7 with wing halves): groups 0347 leaves 2,5 → unlinked
    assert graph_select({0, 2, 3, 4, 5, 7}, 4) == (0, 3, 4, 7)


def test_six_free_prefers_the_group_whose_rest_is_linked() -> None:
    # free 0,1,2,4,5,6: 0145 leaves 2-6 (cross-linked); 0246 leaves 1-5 (linked) too;
    # free 1,2,3,5,6,7: 2367 leaves 1-5 (linked) and is the first usable group.
    assert graph_select({1, 2, 3, 5, 6, 7}, 4) == (2, 3, 6, 7)


FAILURES = [
    pytest.param({1, 2, 3, 5, 6, 7, 0}, 2, id="2-no-pair"),
    pytest.param({0, 1, 2, 5, 6, 7}, 2, id="2-cross-pairs-broken"),
    pytest.param({0, 1, 2, 4, 5, 6}, 4, id="4-only-two-free"),
    pytest.param({0, 5, 2, 7}, 4, id="4-four-free-no-group"),
    pytest.param({0}, 8, id="8-one-busy"),
    pytest.param(set(), 3, id="3-never"),
    pytest.param(set(), 5, id="5-never"),
    pytest.param(set(range(8)), 1, id="1-all-busy"),
]


@pytest.mark.parametrize(("busy", "nums"), FAILURES)
def test_no_placement_is_numa_not_fit(busy: set[int], nums: int) -> None:
    result = kunlun.fit(board(busy), vreq(KUNLUN, nums), FitContext())
    assert not result.ok
    assert result.reason == NO_FIT


def test_three_free_four_requested_fails() -> None:
    assert graph_select({0, 1, 4}, 4) == ()


def test_unhealthy_and_deselected_xpus_are_not_usable() -> None:
    devices = board()
    devices[0] = vdev(KUNLUN, 0, health=False)
    assert picked(devices, 1) == [1]
    ctx = ctx_of(nouse_uuids=["kunlun-1", "kunlun-2"])
    assert picked(devices, 1, ctx) == [3]
    assert picked(board(), 1, ctx_of(use_uuids=["kunlun-6"])) == [6]
    other = [vdev("NVIDIA", i) for i in range(8)]
    result = kunlun.fit(other, vreq(KUNLUN, 1), FitContext())
    assert (result.ok, result.reason) == (False, NO_FIT)


def test_a_whole_xpu_is_granted_whole() -> None:
    result = kunlun.fit(board(), vreq(KUNLUN, 1), FitContext())
    granted = result.devices[0]
    assert (granted.type, granted.usedmem, granted.usedcores) == (KUNLUN, 98304, 100)


def test_wings_follow_the_registered_index_not_the_list_position() -> None:
    devices = list(reversed(board({0, 1, 2})))
    assert picked(devices, 1) == [3]


def test_zero_devices_requested_fit_trivially() -> None:
    assert kunlun.fit(board(), vreq(KUNLUN, 0), FitContext()).ok


def xpu(i: int, *, used: int = 0, usedmem: int = 0, health: bool = True) -> DeviceUsage:
    return vdev(
        VXPU, i, uuid=f"bus-{i}", count=4, mem=98304, used=used, usedmem=usedmem, health=health
    )


def test_vxpu_shares_an_xpu_split_into_the_same_size() -> None:
    devices = [xpu(i, used=1, usedmem=24576) if i < 4 else xpu(i, used=1) for i in range(8)]
    result = kunlun.fit_vxpu(devices, vreq(VXPU, 1, mem=24576, cores=25), FitContext())
    assert result.ok
    assert uuids_of(result.devices) == ["bus-0"]
    granted = result.devices[0]
    assert (granted.usedmem, granted.usedcores) == (24576, 25)


def test_vxpu_refuses_xpus_split_into_other_sizes_or_full() -> None:
    devices = [xpu(i, used=1, usedmem=49152) for i in range(7)] + [xpu(7, used=4, usedmem=98304)]
    result = kunlun.fit_vxpu(devices, vreq(VXPU, 1, mem=24576), FitContext())
    assert (result.ok, result.reason) == (False, NO_FIT)
    devices[3] = xpu(3, used=2, usedmem=49152)
    result = kunlun.fit_vxpu(devices, vreq(VXPU, 1, mem=24576), FitContext())
    assert uuids_of(result.devices) == ["bus-3"]


def test_vxpu_needs_free_memory_health_and_a_slot() -> None:
    devices = [
        xpu(0, used=3, usedmem=3 * 32768),
        xpu(1, health=False),
        vdev(VXPU, 2, uuid="bus-2", count=1, mem=98304, used=1, usedmem=24576),
    ]
    for dev in devices:
        alone = kunlun.fit_vxpu([dev], vreq(VXPU, 1, mem=24576), FitContext())
        assert not alone.ok
    result = kunlun.fit_vxpu(
        [xpu(0, used=1, usedmem=49152)], vreq(VXPU, 1, mem=49152), FitContext()
    )
    assert result.ok


def test_vxpu_under_mutex_takes_idle_xpus_only() -> None:
    devices = [xpu(0, used=1, usedmem=24576), xpu(1)]
    result = kunlun.fit_vxpu(devices, vreq(VXPU, 1, mem=24576), ctx_of(mutex=True))
    assert uuids_of(result.devices) == ["bus-1"]
    result = kunlun.fit_vxpu(devices[:1], vreq(VXPU, 1, mem=24576), ctx_of(mutex=True))
    assert not result.ok


def test_vxpu_uses_the_same_wing_choice() -> None:
    devices = [xpu(i, used=1, usedmem=98304) if i in (0, 1, 2) else xpu(i) for i in range(8)]
    result = kunlun.fit_vxpu(devices, vreq(VXPU, 1, mem=98304), FitContext())
    assert uuids_of(result.devices) == ["bus-3"]


BUBBLES = [
    pytest.param([], 1, id="empty"),
    pytest.param([0], 2 + 1, id="one-left"),
    pytest.param([0, 1, 2, 3], 0 + 1, id="left-wing-whole"),
    pytest.param([0, 1, 2, 3, 4, 5, 6, 7], 0, id="board"),
    pytest.param([0, 4], 4, id="one-each"),
    pytest.param([0, 1, 4, 5], 2, id="two-each"),
    pytest.param([0, 0, 1], 2, id="repeats-count-once"),
]


@pytest.mark.parametrize(("indices", "expected"), BUBBLES)
def test_bubble(indices: list[int], expected: int) -> None:
    assert bubble(indices) == expected


def granted_at(*indices: int) -> list[list[ContainerDevice]]:
    return [[ContainerDevice(f"kunlun-{i}", KUNLUN, 98304, 100) for i in indices]]


def test_score_maps_the_bubble_delta() -> None:
    # used {0,1,2,3} → bubble 1; pod {4,5,6,7} → 1: Δ 0
    assert kunlun.score(board({0, 1, 2, 3}), granted_at(4, 5, 6, 7)) == 2000.0
    # used {0,4} → 4; pod {1,2,3,5,6,7} → 2: Δ −2 → other
    assert kunlun.score(board({0, 4}), granted_at(1, 2, 3, 5, 6, 7)) == 1000.0
    # used {0,1,4,5} → 2; pod {2,3} → 1+1 = 2: Δ 0
    assert kunlun.score(board({0, 1, 4, 5}), granted_at(2, 3)) == 2000.0
    # used {0} → 3; pod {1,2} → 2: Δ −1
    assert kunlun.score(board({0}), granted_at(1, 2)) == 3000.0
    # used none → 1; pod {0,1} → 2: Δ 1
    assert kunlun.score(board(), granted_at(0, 1)) == 1000.0
    # used none → 1; pod {0} → 3: Δ 2
    assert kunlun.score(board(), granted_at(0)) == 0.0
    # used {0,1,2,3,4,5,6,7} → 0; pod {0} → 3: Δ 3 → other
    assert kunlun.score(board(set(range(8))), granted_at(0)) == 1000.0


def test_a_node_with_other_vendors_scores_zero() -> None:
    assert kunlun.score([*board(), vdev("NVIDIA", 0)], granted_at(0, 1)) == 0.0
    assert kunlun.score(board(), [[ContainerDevice("gpu", KUNLUN, 1, 1)]]) == 0.0


@settings(max_examples=200)
@given(
    busy=st.sets(st.integers(0, 7)),
    unhealthy=st.sets(st.integers(0, 7)),
    nums=st.sampled_from([1, 2, 3, 4, 8]),
    reverse=st.booleans(),
)
def test_whole_xpus_are_never_shared_and_a_fit_is_distinct_and_deterministic(
    busy: set[int], unhealthy: set[int], nums: int, reverse: bool
) -> None:
    devices = [
        vdev(KUNLUN, i, mem=98304, used=1 if i in busy else 0, health=i not in unhealthy)
        for i in range(8)
    ]
    if reverse:
        devices.reverse()
    result = kunlun.fit(devices, vreq(KUNLUN, nums), FitContext())
    again = kunlun.fit(devices, vreq(KUNLUN, nums), FitContext())
    assert result == again
    free = set(range(8)) - busy - unhealthy
    if result.ok:
        chosen = {int(u.rsplit("-", 1)[1]) for u in uuids_of(result.devices)}
        assert len(chosen) == nums == len(result.devices)
        assert chosen <= free
        if nums in (1, 2, 4) and (
            len(free & {0, 1, 2, 3}) >= nums or len(free - {0, 1, 2, 3}) >= nums
        ):
            assert chosen <= {0, 1, 2, 3} or chosen.isdisjoint({0, 1, 2, 3})
    else:
        assert result.reason == NO_FIT
        assert nums not in (1, 8) or len(free) < nums


@settings(max_examples=200)
@given(
    shares=st.lists(
        st.tuples(st.integers(0, 4), st.sampled_from([24576, 49152, 98304])), min_size=8, max_size=8
    ),
    mem=st.sampled_from([24576, 49152, 98304]),
    nums=st.sampled_from([1, 2, 4]),
)
def test_vxpu_never_overcommits_memory_or_mixes_share_sizes(
    shares: list[tuple[int, int]], mem: int, nums: int
) -> None:
    devices = []
    for i, (wanted, size) in enumerate(shares):
        tasks = min(wanted, 98304 // size)
        devices.append(xpu(i, used=tasks, usedmem=tasks * size))
    result = kunlun.fit_vxpu(devices, vreq(VXPU, nums, mem=mem), FitContext())
    if result.ok:
        by_uuid = {dev.uuid: dev for dev in devices}
        assert len(set(uuids_of(result.devices))) == nums
        for granted in result.devices:
            dev = by_uuid[granted.uuid]
            assert dev.usedmem + granted.usedmem <= dev.totalmem
            assert dev.used == 0 or dev.usedmem == dev.used * mem
