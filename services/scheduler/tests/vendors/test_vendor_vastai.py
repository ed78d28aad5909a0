"""Vastai: count-only, die mode by AIC, AIC-wide mutex and the die score
(contract hami-extensions §1.2 Vastai)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import ContainerDevice
from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import vastai
from hami_scheduler.core.vendors.vastai import VASTAI

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

PLAIN = FitContext()


def va(i: int, *, used: int = 0, health: bool = True, count: int = 1) -> DeviceUsage:
    return vdev(VASTAI, i, count=count, used=used, health=health)


def die(i: int, aic: str, *, used: int = 0, health: bool = True) -> DeviceUsage:
    return vdev(VASTAI, i, used=used, health=health, custom={"AIC": aic, "DeviceStrategy": "die"})


REFUSALS = [
    pytest.param(va(0, health=False), PLAIN, "CardNotHealth", id="health"),
    pytest.param(vdev("Biren", 0), PLAIN, "CardTypeMismatch", id="type"),
    pytest.param(va(0), ctx_of(nouse_uuids=["Vastai-0"]), "CardUuidMismatch", id="uuid"),
    pytest.param(va(0, used=1), PLAIN, "CardTimeSlicingExhausted", id="slots"),
    pytest.param(
        va(0, used=1, count=2), ctx_of(mutex=True), "ExclusiveDeviceAllocateConflict", id="mutex"
    ),
]


@pytest.mark.parametrize(("dev", "ctx", "word"), REFUSALS)
def test_count_only_refusals(dev: DeviceUsage, ctx: FitContext, word: str) -> None:
    result = vastai.fit([dev], vreq(VASTAI), ctx)
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_count_only_takes_from_the_end_and_shares_slots() -> None:
    devices = [va(0), va(1, used=1, count=2), va(2, used=1)]
    result = vastai.fit(devices, vreq(VASTAI, 2), PLAIN)
    assert uuids_of(result.devices) == ["Vastai-1", "Vastai-0"]
    assert all((g.usedmem, g.usedcores) == (0, 0) for g in result.devices)
    result = vastai.fit(devices, vreq(VASTAI, 3), PLAIN)
    assert result.reason == "2/3 AllocatedCardsInsufficientRequest, 1/3 CardTimeSlicingExhausted"


def test_die_mode_one_die_is_the_first_collected() -> None:
    devices = [die(0, "a"), die(1, "a"), die(2, "b")]
    assert uuids_of(vastai.fit(devices, vreq(VASTAI, 1), PLAIN).devices) == ["Vastai-2"]


def test_die_mode_fills_from_the_aic_with_most_free_dies() -> None:
    devices = [die(0, "a"), die(1, "a", used=1), die(2, "b"), die(3, "b"), die(4, "c")]
    result = vastai.fit(devices, vreq(VASTAI, 2), PLAIN)
    assert sorted(uuids_of(result.devices)) == ["Vastai-2", "Vastai-3"]
    result = vastai.fit(devices, vreq(VASTAI, 3), PLAIN)
    assert sorted(uuids_of(result.devices)) == ["Vastai-2", "Vastai-3", "Vastai-4"]


def test_die_mode_exactly_enough_or_too_few() -> None:
    devices = [die(0, "a"), die(1, "b")]
    assert sorted(uuids_of(vastai.fit(devices, vreq(VASTAI, 2), PLAIN).devices)) == [
        "Vastai-0",
        "Vastai-1",
    ]
    result = vastai.fit(devices, vreq(VASTAI, 3), PLAIN)
    assert result.reason == "2/2 AllocatedCardsInsufficientRequest"


def test_die_mode_is_read_from_the_first_device() -> None:
    devices = [va(0), die(1, "a"), die(2, "a")]
    # Not die mode: the loop stops at the first two from the end.
    assert uuids_of(vastai.fit(devices, vreq(VASTAI, 1), PLAIN).devices) == ["Vastai-2"]


def test_mutex_makes_the_whole_aic_exclusive_in_die_mode() -> None:
    devices = [die(0, "a"), die(1, "a", used=1), die(2, "b")]
    result = vastai.fit(devices, vreq(VASTAI, 2), ctx_of(mutex=True))
    assert result.reason == (
        "1/3 AllocatedCardsInsufficientRequest, 1/3 CardTimeSlicingExhausted, "
        "1/3 ExclusiveDeviceAllocateConflict"
    )
    assert uuids_of(vastai.fit(devices, vreq(VASTAI, 2), PLAIN).devices) == [
        "Vastai-2",
        "Vastai-0",
    ]


def granted(*uuids: str) -> list[ContainerDevice]:
    return [ContainerDevice(u, VASTAI, 0, 0) for u in uuids]


def test_die_score_is_the_share_on_the_most_used_aic() -> None:
    node = [die(0, "a"), die(1, "a"), die(2, "b"), die(3, "b")]
    assert vastai.score(node, [granted("Vastai-0", "Vastai-1")]) == 1.0
    assert vastai.score(node, [granted("Vastai-0", "Vastai-2")]) == 0.5
    assert vastai.score(node, [granted("Vastai-0"), [], granted("Vastai-2", "Vastai-3")]) == 2.0
    assert vastai.score([va(0), va(1)], [granted("Vastai-0", "Vastai-1")]) == 0.0
    other = [vdev(VASTAI, 0, custom={"AIC": "a", "DeviceStrategy": "card"})]
    assert vastai.score(other, [granted("Vastai-0")]) == 0.0


@settings(max_examples=200)
@given(
    state=st.lists(st.tuples(st.integers(0, 2), st.sampled_from("abc")), min_size=1, max_size=8),
    nums=st.integers(1, 4),
    mutex=st.booleans(),
    die_mode=st.booleans(),
)
def test_vastai_never_overcommits_slots_or_shares_an_aic_under_mutex(
    state: list[tuple[int, str]], nums: int, mutex: bool, die_mode: bool
) -> None:
    custom = {"DeviceStrategy": "die"} if die_mode else {}
    devices = [
        vdev(VASTAI, i, count=2, used=used, custom={**custom, "AIC": aic})
        for i, (used, aic) in enumerate(state)
    ]
    ctx = ctx_of(mutex=mutex)
    result = vastai.fit(devices, vreq(VASTAI, nums), ctx)
    assert result == vastai.fit(devices, vreq(VASTAI, nums), ctx)
    if not result.ok:
        return
    by_uuid = {d.uuid: d for d in devices}
    assert len(set(uuids_of(result.devices))) == len(result.devices) == nums
    busy = {d.custom["AIC"] for d in devices if d.used}
    for g in result.devices:
        dev = by_uuid[g.uuid]
        assert dev.used < dev.count
        if mutex:
            assert dev.used == 0
            if die_mode:
                assert dev.custom["AIC"] not in busy
