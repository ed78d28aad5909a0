"""Biren: the count-only loop (contract hami-extensions §1.2 Biren)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import biren
from hami_scheduler.core.vendors.biren import BIREN

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

PLAIN = FitContext()

REFUSALS = [
    pytest.param(vdev(BIREN, 0, health=False), PLAIN, "CardNotHealth", id="health"),
    pytest.param(vdev("Vastai", 0), PLAIN, "CardTypeMismatch", id="vendor"),
    pytest.param(
        vdev(BIREN, 0, model="BR100"),
        ctx_of(use_types=["BR104"]),
        "CardTypeMismatch",
        id="use-type",
    ),
    pytest.param(vdev(BIREN, 0), ctx_of(use_uuids=["other"]), "CardUuidMismatch", id="uuid"),
    pytest.param(vdev(BIREN, 0, used=1), PLAIN, "CardTimeSlicingExhausted", id="slots"),
    pytest.param(
        vdev(BIREN, 0, count=4, used=1),
        ctx_of(mutex=True),
        "ExclusiveDeviceAllocateConflict",
        id="mutex",
    ),
]


@pytest.mark.parametrize(("dev", "ctx", "word"), REFUSALS)
def test_refusals(dev: DeviceUsage, ctx: FitContext, word: str) -> None:
    result = biren.fit([dev], vreq(BIREN), ctx)
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_devices_come_from_the_end_with_no_memory_or_cores() -> None:
    devices = [vdev(BIREN, 0), vdev(BIREN, 1), vdev(BIREN, 2, used=1)]
    result = biren.fit(devices, vreq(BIREN, 2), PLAIN)
    assert uuids_of(result.devices) == ["Biren-1", "Biren-0"]
    assert all((g.type, g.usedmem, g.usedcores) == (BIREN, 0, 0) for g in result.devices)
    assert biren.fit(devices, vreq(BIREN, 0), PLAIN).ok
    result = biren.fit(devices, vreq(BIREN, 3), PLAIN)
    assert result.reason == "2/3 AllocatedCardsInsufficientRequest, 1/3 CardTimeSlicingExhausted"


def test_a_shared_slot_is_fine_without_mutex() -> None:
    result = biren.fit([vdev(BIREN, 0, count=4, used=3)], vreq(BIREN), PLAIN)
    assert uuids_of(result.devices) == ["Biren-0"]


@settings(max_examples=150)
@given(
    used=st.lists(st.integers(0, 2), min_size=1, max_size=8),
    nums=st.integers(1, 4),
    mutex=st.booleans(),
)
def test_biren_never_overcommits_slots(used: list[int], nums: int, mutex: bool) -> None:
    devices = [vdev(BIREN, i, count=2, used=u) for i, u in enumerate(used)]
    result = biren.fit(devices, vreq(BIREN, nums), ctx_of(mutex=mutex))
    if result.ok:
        chosen = uuids_of(result.devices)
        assert len(set(chosen)) == len(chosen) == nums
        by_uuid = {d.uuid: d for d in devices}
        assert all(by_uuid[u].used < by_uuid[u].count for u in chosen)
        assert not mutex or all(by_uuid[u].used == 0 for u in chosen)
    else:
        free = sum(1 for u in used if u < 2 and (not mutex or u == 0))
        assert free < nums
