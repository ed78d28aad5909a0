"""AMD: MiB memory, compute units by percentage, product type in the grant
(contract hami-extensions §1.2 AMD)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import amd
from hami_scheduler.core.vendors.amd import AMD

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

PLAIN = FitContext()
MI300 = "AMD_Instinct_MI300X_VF"


def mi(
    i: int,
    *,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    health: bool = True,
    count: int = 4,
) -> DeviceUsage:
    return vdev(
        AMD,
        i,
        model=MI300,
        count=count,
        mem=196608,
        cores=304,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        health=health,
    )


UNITS = [
    pytest.param(100, 304, id="all"),
    pytest.param(50, 152, id="half"),
    pytest.param(0, 1, id="at-least-one"),
    pytest.param(1, 3, id="one-percent-floors"),
    pytest.param(150, 304, id="at-most-all"),
]


@pytest.mark.parametrize(("percent", "cus"), UNITS)
def test_compute_units(percent: int, cus: int) -> None:
    assert amd.compute_units(mi(0), percent) == cus


def test_grant_names_the_product_type_and_cus() -> None:
    result = amd.fit([mi(0), mi(1)], vreq(AMD, 1, mem=8192, cores=25), PLAIN)
    assert uuids_of(result.devices) == ["AMD-1"]
    granted = result.devices[0]
    assert (granted.type, granted.usedmem, granted.usedcores) == (MI300, 8192, 76)


def test_no_memory_asked_takes_the_whole_gpu() -> None:
    result = amd.fit([mi(0)], vreq(AMD, 1, cores=100), PLAIN)
    assert result.devices[0].usedmem == 196608
    result = amd.fit([mi(0, used=1, usedmem=1, usedcores=1)], vreq(AMD, 1, cores=10), PLAIN)
    assert result.reason == "1/1 CardInsufficientMemory"


REFUSALS = [
    pytest.param(mi(0, health=False), PLAIN, "CardNotHealth", id="health"),
    pytest.param(vdev("Biren", 0), PLAIN, "CardTypeMismatch", id="vendor"),
    pytest.param(mi(0), ctx_of(nouse_types=["MI300X"]), "CardTypeMismatch", id="nouse-gputype"),
    pytest.param(mi(0), ctx_of(use_uuids=["x"]), "CardUuidMismatch", id="uuid"),
    pytest.param(mi(0, used=4), PLAIN, "CardTimeSlicingExhausted", id="slots"),
    pytest.param(mi(0, used=1), ctx_of(mutex=True), "ExclusiveDeviceAllocateConflict", id="mutex"),
    pytest.param(mi(0, used=1, usedmem=196000), PLAIN, "CardInsufficientMemory", id="memory"),
    pytest.param(mi(0, used=1, usedcores=300), PLAIN, "CardInsufficientCore", id="cores"),
]


@pytest.mark.parametrize(("dev", "ctx", "word"), REFUSALS)
def test_refusals(dev: DeviceUsage, ctx: FitContext, word: str) -> None:
    result = amd.fit([dev], vreq(AMD, 1, mem=1024, cores=10), ctx)
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_too_few_gpus() -> None:
    result = amd.fit([mi(0), mi(1, health=False)], vreq(AMD, 2, mem=1, cores=1), PLAIN)
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth"
    assert amd.fit([mi(0)], vreq(AMD, 0), PLAIN).ok


@settings(max_examples=150)
@given(
    held=st.lists(st.tuples(st.integers(0, 196608), st.integers(0, 304)), min_size=1, max_size=6),
    nums=st.integers(1, 3),
    mem=st.integers(0, 100000),
    percent=st.integers(0, 100),
)
def test_amd_never_overcommits(
    held: list[tuple[int, int]], nums: int, mem: int, percent: int
) -> None:
    devices = [mi(i, used=1, usedmem=m, usedcores=c) for i, (m, c) in enumerate(held)]
    result = amd.fit(devices, vreq(AMD, nums, mem=mem, cores=percent), PLAIN)
    assert result == amd.fit(devices, vreq(AMD, nums, mem=mem, cores=percent), PLAIN)
    if result.ok:
        by_uuid = {d.uuid: d for d in devices}
        assert len({g.uuid for g in result.devices}) == nums
        for g in result.devices:
            dev = by_uuid[g.uuid]
            assert dev.usedmem + g.usedmem <= dev.totalmem
            assert 1 <= g.usedcores <= dev.totalcore - dev.usedcores
