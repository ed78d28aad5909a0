"""Moore Threads: the standard loop over the per-device share, the same-device filter
(contract hami-extensions §1.2 Mthreads)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import mthreads
from hami_scheduler.core.vendors.context import VendorContext
from hami_scheduler.core.vendors.mthreads import MTHREADS

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

PLAIN = FitContext()
GIB96 = 96 * 512 * 2  # 96 units of 512 MiB


def mt(
    i: int, *, used: int = 0, usedmem: int = 0, usedcores: int = 0, health: bool = True
) -> DeviceUsage:
    return vdev(
        MTHREADS,
        i,
        count=100,
        mem=GIB96,
        cores=16,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        health=health,
    )


def test_a_multi_gpu_request_is_split_evenly() -> None:
    request = vreq(MTHREADS, 2, mem=2 * GIB96, cores=32)
    assert mthreads.per_device(request) == vreq(MTHREADS, 2, mem=GIB96, cores=16)
    assert mthreads.per_device(vreq(MTHREADS, 1, mem=7, cores=3)) == vreq(
        MTHREADS, 1, mem=7, cores=3
    )
    result = mthreads.fit([mt(0), mt(1), mt(2, usedcores=1)], request, PLAIN)
    assert uuids_of(result.devices) == ["Mthreads-1", "Mthreads-0"]
    assert all((g.usedmem, g.usedcores) == (GIB96, 16) for g in result.devices)


REFUSALS = [
    pytest.param(mt(0, health=False), PLAIN, "CardNotHealth", id="health"),
    pytest.param(vdev("Metax-GPU", 0), PLAIN, "CardTypeMismatch", id="type"),
    pytest.param(mt(0), ctx_of(use_uuids=["x"]), "CardUuidMismatch", id="uuid"),
    pytest.param(mt(0, used=100), PLAIN, "CardTimeSlicingExhausted", id="slots"),
    pytest.param(mt(0, used=1), ctx_of(mutex=True), "ExclusiveDeviceAllocateConflict", id="mutex"),
    pytest.param(mt(0, usedmem=GIB96 - 1), PLAIN, "CardInsufficientMemory", id="memory"),
    pytest.param(mt(0, usedcores=10), PLAIN, "CardInsufficientCore", id="cores"),
    pytest.param(
        dataclasses.replace(mt(0), uuid="other"),
        dataclasses.replace(PLAIN, vendor=VendorContext(pod_uuids=("Mthreads-0",))),
        "CardNotFoundCustomFilterRule",
        id="custom-filter",
    ),
]


@pytest.mark.parametrize(("dev", "ctx", "word"), REFUSALS)
def test_refusals(dev: DeviceUsage, ctx: FitContext, word: str) -> None:
    result = mthreads.fit([dev], vreq(MTHREADS, 1, mem=1024, cores=8), ctx)
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_units_exhausted_for_a_no_core_request() -> None:
    result = mthreads.fit([mt(0, used=1, usedcores=16)], vreq(MTHREADS, 1, mem=1), PLAIN)
    assert result.reason == "1/1 CardComputeUnitsExhausted"


@settings(max_examples=150)
@given(
    held=st.lists(st.tuples(st.integers(0, GIB96), st.integers(0, 16)), min_size=1, max_size=6),
    nums=st.integers(1, 3),
    units=st.integers(1, 16),
)
def test_mthreads_never_overcommits(held: list[tuple[int, int]], nums: int, units: int) -> None:
    devices = [mt(i, used=1, usedmem=m, usedcores=c) for i, (m, c) in enumerate(held)]
    request = vreq(MTHREADS, nums, mem=nums * units * 1024, cores=nums * units)
    result = mthreads.fit(devices, request, PLAIN)
    if result.ok:
        by_uuid = {d.uuid: d for d in devices}
        assert len({g.uuid for g in result.devices}) == nums
        for g in result.devices:
            dev = by_uuid[g.uuid]
            assert (g.usedmem, g.usedcores) == (units * 1024, units)
            assert dev.usedmem + g.usedmem <= dev.totalmem
            assert dev.usedcores + g.usedcores <= dev.totalcore
