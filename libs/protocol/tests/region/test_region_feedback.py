"""HAMi's priority feedback decision, rule by rule, and properties of a round."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.region.feedback import (
    FeedbackField,
    FeedbackInput,
    FeedbackWrite,
    decide_feedback,
    field_offset,
)
from hami_protocol.region.layout import V0, V1

RK = FeedbackField.RECENT_KERNEL
SWITCH = FeedbackField.UTILIZATION_SWITCH


def task(
    key: str,
    *uuids: str,
    priority: int = 1,
    recent: int = 0,
    switch: int = 0,
) -> FeedbackInput:
    return FeedbackInput(
        key=key,
        uuids=uuids,
        priority=priority,
        recent_kernel=recent,
        utilization_switch=switch,
    )


def writes_of(*regions: FeedbackInput) -> set[tuple[str, FeedbackField, int]]:
    return {(w.key, w.field, w.value) for w in decide_feedback(regions)}


def test_field_offsets_are_the_contracts() -> None:
    assert field_offset(V0, RK) == 1_197_888
    assert field_offset(V0, SWITCH) == 1_197_884
    assert field_offset(V1, RK) == 2_008_904
    assert field_offset(V1, SWITCH) == 2_008_900


# --- ageing ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("recent", "written"), [(2, 1), (1, 0), (7, 6)])
def test_recent_kernel_is_decremented(recent: int, written: int) -> None:
    assert writes_of(task("a", "G1", recent=recent)) == {("a", RK, written)}


def test_an_idle_region_gets_no_write() -> None:
    assert decide_feedback([task("a", "G1", recent=0)]) == ()


def test_an_unblocked_region_is_released() -> None:
    assert writes_of(task("a", "G1", recent=-1, switch=1)) == {("a", RK, 0), ("a", SWITCH, 0)}


# --- blocking -------------------------------------------------------------------------------------
def test_a_higher_priority_task_blocks_a_lower_one_on_a_shared_gpu() -> None:
    high = task("high", "G1", priority=0, recent=2)
    low = task("low", "G1", priority=1, recent=2)
    writes = decide_feedback([high, low])
    # The decrement and the block of "low" are one write: the final value.
    assert writes == (
        FeedbackWrite("high", RK, 1),
        FeedbackWrite("low", RK, -1),
        FeedbackWrite("low", SWITCH, 1),
    )


def test_an_idle_lower_priority_region_is_blocked_too() -> None:
    assert writes_of(task("high", "G1", priority=0, recent=2), task("low", "G1", recent=0)) == {
        ("high", RK, 1),
        ("low", RK, -1),
        ("low", SWITCH, 1),
    }


def test_a_blocked_region_stays_blocked_without_writes() -> None:
    high = task("high", "G1", priority=0, recent=2)
    low = task("low", "G1", priority=1, recent=-1, switch=1)
    assert writes_of(high, low) == {("high", RK, 1)}


def test_the_block_is_lifted_when_the_higher_priority_task_goes_quiet() -> None:
    # recent 1 → 0: no longer active this round.
    high = task("high", "G1", priority=0, recent=1)
    low = task("low", "G1", priority=1, recent=-1, switch=1)
    assert writes_of(high, low) == {("high", RK, 0), ("low", RK, 0), ("low", SWITCH, 0)}


def test_a_lower_priority_task_never_blocks_a_higher_one() -> None:
    high = task("high", "G1", priority=0, recent=0)
    low = task("low", "G1", priority=1, recent=5)
    assert writes_of(high, low) == {("low", RK, 4)}


def test_gpus_not_shared_do_not_interact() -> None:
    high = task("high", "G1", priority=0, recent=2)
    low = task("low", "G2", priority=1, recent=2)
    assert writes_of(high, low) == {("high", RK, 1), ("low", RK, 1)}


def test_every_gpu_of_a_multi_gpu_region_is_looked_at() -> None:
    # HAMi would look only at G2 (the first GPU with activity) and miss the block on G1.
    other = task("other", "G2", priority=1, recent=2)
    high = task("high", "G1", priority=0, recent=2)
    multi = task("multi", "G2", "G1", priority=1, recent=2)
    writes = writes_of(other, high, multi)
    assert ("multi", RK, -1) in writes
    assert ("multi", SWITCH, 1) in writes
    # "other" shares G2 with "multi", both priority 1 and active: contention, not a block.
    assert ("other", RK, 1) in writes
    assert ("other", SWITCH, 1) in writes


def test_a_multi_gpu_high_priority_task_blocks_on_each_of_its_gpus() -> None:
    high = task("high", "G1", "G2", priority=0, recent=2)
    on_g1 = task("on-g1", "G1", recent=2)
    on_g2 = task("on-g2", "G2", recent=2)
    writes = writes_of(high, on_g1, on_g2)
    assert {("on-g1", RK, -1), ("on-g2", RK, -1)} <= writes


def test_negative_priority_is_not_counted() -> None:
    odd = task("odd", "G1", priority=-1, recent=2)
    low = task("low", "G1", priority=1, recent=2)
    assert writes_of(odd, low) == {("odd", RK, 1), ("low", RK, 1)}


def test_a_negative_priority_region_is_never_blocked() -> None:
    high = task("high", "G1", priority=0, recent=2)
    odd = task("odd", "G1", priority=-1, recent=0)
    assert writes_of(high, odd) == {("high", RK, 1)}


def test_priority_5_works() -> None:
    high = task("high", "G1", priority=2, recent=2)
    low = task("low", "G1", priority=5, recent=2)
    assert writes_of(high, low) == {("high", RK, 1), ("low", RK, -1), ("low", SWITCH, 1)}


# --- contention -----------------------------------------------------------------------------------
def test_two_active_tasks_of_one_priority_switch_the_limit_on() -> None:
    a = task("a", "G1", recent=2)
    b = task("b", "G1", recent=2)
    assert writes_of(a, b) == {("a", RK, 1), ("b", RK, 1), ("a", SWITCH, 1), ("b", SWITCH, 1)}


def test_the_switch_is_written_only_when_it_changes() -> None:
    a = task("a", "G1", recent=3, switch=1)
    b = task("b", "G1", recent=3, switch=1)
    assert writes_of(a, b) == {("a", RK, 2), ("b", RK, 2)}


def test_the_switch_goes_off_when_one_task_goes_quiet() -> None:
    a = task("a", "G1", recent=1, switch=1)
    b = task("b", "G1", recent=3, switch=1)
    assert writes_of(a, b) == {("a", RK, 0), ("b", RK, 2), ("a", SWITCH, 0), ("b", SWITCH, 0)}


def test_contention_at_another_priority_does_not_count() -> None:
    a = task("a", "G1", priority=2, recent=2)
    b = task("b", "G1", priority=2, recent=2)
    c = task("c", "G1", priority=1, recent=2)
    writes = writes_of(a, b, c)
    assert ("c", SWITCH, 1) not in writes
    assert ("a", SWITCH, 1) in writes


def test_a_quiet_region_sees_contention_of_its_priority_on_its_gpu() -> None:
    # HAMi's rule counts active tasks at the region's priority, whether or not it is one.
    a = task("a", "G1", recent=2)
    b = task("b", "G1", recent=2)
    quiet = task("quiet", "G1", recent=0)
    assert ("quiet", SWITCH, 1) in writes_of(a, b, quiet)


def test_a_gpu_listed_twice_counts_once() -> None:
    assert writes_of(task("a", "G1", "G1", recent=2)) == {("a", RK, 1)}


def test_keys_must_be_unique() -> None:
    with pytest.raises(ValueError, match="a"):
        decide_feedback([task("a", "G1"), task("a", "G2")])


# --- properties -----------------------------------------------------------------------------------
GPUS = st.lists(st.sampled_from(["G1", "G2", "G3"]), max_size=3).map(tuple)
RECENT = st.integers(-1, 3)


@st.composite
def rounds(draw: st.DrawFn) -> list[FeedbackInput]:
    count = draw(st.integers(0, 8))
    return [
        FeedbackInput(
            key=f"r{i}",
            uuids=draw(GPUS),
            priority=draw(st.integers(-1, 6)),
            recent_kernel=draw(RECENT),
            utilization_switch=draw(st.integers(0, 1)),
        )
        for i in range(count)
    ]


@given(rounds())
def test_one_write_per_field_and_never_the_current_value(regions: list[FeedbackInput]) -> None:
    writes = decide_feedback(regions)
    assert max(Counter((w.key, w.field) for w in writes).values(), default=0) <= 1
    current = {r.key: r for r in regions}
    for w in writes:
        before = current[w.key]
        assert w.value != (before.recent_kernel if w.field is RK else before.utilization_switch)
        allowed = {0, 1} if w.field is SWITCH else {-1, 0, before.recent_kernel - 1}
        assert w.value in allowed


@given(
    st.builds(FeedbackInput, st.just("solo"), GPUS, st.integers(-1, 9), RECENT, st.integers(0, 1))
)
def test_a_lone_region_is_never_blocked(region: FeedbackInput) -> None:
    for w in decide_feedback([region]):
        assert w.value != -1 or w.field is not RK
        assert w.field is not SWITCH or w.value == 0


@given(rounds())
def test_a_highest_priority_region_is_never_blocked(regions: list[FeedbackInput]) -> None:
    top = min((r.priority for r in regions if r.priority >= 0), default=None)
    writes = decide_feedback(regions)
    for region in regions:
        if region.priority == top:
            assert FeedbackWrite(region.key, RK, -1) not in writes


def _apply(regions: list[FeedbackInput]) -> list[FeedbackInput]:
    """The regions after one round's writes."""
    values = {(r.key, RK): r.recent_kernel for r in regions}
    values |= {(r.key, SWITCH): r.utilization_switch for r in regions}
    for w in decide_feedback(regions):
        values[w.key, w.field] = w.value
    return [
        FeedbackInput(r.key, r.uuids, r.priority, values[r.key, RK], values[r.key, SWITCH])
        for r in regions
    ]


@given(rounds())
def test_without_new_kernels_every_block_and_switch_is_lifted(
    regions: list[FeedbackInput],
) -> None:
    # recent_kernel ≤ 3: active for two more rounds at most, released in the one after.
    for _ in range(4):
        regions = _apply(regions)
    assert all(r.recent_kernel == 0 for r in regions)
    assert all(r.utilization_switch == 0 for r in regions)
    assert decide_feedback(regions) == ()
