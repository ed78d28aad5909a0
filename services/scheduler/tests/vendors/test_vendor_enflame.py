"""Enflame: exclusive whole GCUs and DRS profiles, direct and by spec
(contract hami-extensions §1.2 Enflame)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import enflame
from hami_scheduler.core.vendors.context import DrsProfile, VendorContext
from hami_scheduler.core.vendors.enflame import DIRECT, ENFLAME_DRS, GCU, SPEC, parse_profile

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

PLAIN = FitContext()


def profiles(*names: str) -> tuple[DrsProfile, ...]:
    parsed = [parse_profile(name, str(i)) for i, name in enumerate(names)]
    return tuple(p for p in parsed if p is not None)


S60 = profiles("1g.6gb", "3g.20gb", "6g.40gb")


def drs_ctx(base: FitContext = PLAIN, found: tuple[DrsProfile, ...] = S60) -> FitContext:
    return dataclasses.replace(base, vendor=VendorContext(drs_profiles=found))


def gcu_drs(
    i: int, *, used: int = 0, usedmem: int = 0, usedcores: int = 0, health: bool = True
) -> DeviceUsage:
    return vdev(
        ENFLAME_DRS,
        i,
        uuid=f"n-enflame-drs-{i}",
        count=6,
        mem=40 * 1024,
        cores=100,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        health=health,
    )


def direct(slices: int) -> ContainerDeviceRequest:
    return vreq(ENFLAME_DRS, 1, mem=slices, pct=DIRECT, cores=-1)


def spec(mem: int, cores: int = 0) -> ContainerDeviceRequest:
    return vreq(ENFLAME_DRS, 1, mem=mem, pct=SPEC, cores=cores)


def test_parse_profile() -> None:
    assert parse_profile("3G.20GB", "7") == DrsProfile("3G.20GB", "7", 3, 20)
    assert parse_profile("big", "1") is None
    assert parse_profile("0g.6gb", "1") is None


CHOICES = [
    pytest.param(direct(1), "1g.6gb", id="direct-1"),
    pytest.param(direct(3), "3g.20gb", id="direct-3"),
    pytest.param(direct(6), "6g.40gb", id="direct-6"),
    pytest.param(direct(2), None, id="direct-no-exact-slices"),
    pytest.param(spec(6), "1g.6gb", id="spec-6gb"),
    pytest.param(spec(7), "3g.20gb", id="spec-7gb-rounds-up"),
    pytest.param(spec(40), "6g.40gb", id="spec-40gb"),
    pytest.param(spec(41), None, id="spec-too-much-gb"),
    pytest.param(spec(80), None, id="spec-80-is-still-gb"),
    pytest.param(spec(81), "1g.6gb", id="spec-81-is-mib"),
    pytest.param(spec(20 * 1024), "3g.20gb", id="spec-mib-exact"),
    pytest.param(spec(20 * 1024 + 1), "6g.40gb", id="spec-mib-rounded-up"),
    pytest.param(spec(0, 17), "1g.6gb", id="spec-core-17pct"),
    pytest.param(spec(0, 18), "3g.20gb", id="spec-core-18pct"),
    pytest.param(spec(0, 51), "6g.40gb", id="spec-core-51pct"),
    pytest.param(spec(6, 50), "3g.20gb", id="spec-both"),
    pytest.param(spec(0, 101), None, id="spec-core-too-much"),
]


@pytest.mark.parametrize(("request_", "name"), CHOICES)
def test_choose_profile(request_: ContainerDeviceRequest, name: str | None) -> None:
    chosen = enflame.choose_profile(S60, request_)
    assert (chosen.name if chosen else None) == name


def test_core_percent_is_the_slice_share_rounded_up() -> None:
    ordered = profiles("1g.6gb", "3g.20gb", "6g.40gb")
    assert [enflame.core_percent(p, ordered) for p in ordered] == [17, 50, 100]


def test_drs_grant_is_the_profile_memory_and_percent() -> None:
    devices = [gcu_drs(0), gcu_drs(1)]
    result = enflame.fit(devices, direct(3), drs_ctx())
    assert result.ok
    assert uuids_of(result.devices) == ["n-enflame-drs-1"]
    granted = result.devices[0]
    assert (granted.type, granted.usedmem, granted.usedcores) == (ENFLAME_DRS, 20480, 50)
    found = enflame.granted_profile(granted, S60)
    assert found is not None
    assert (found.name, found.profile_id, found.slices) == ("3g.20gb", "1", 3)


def test_no_profile_is_mode_not_fit() -> None:
    devices = [gcu_drs(0), gcu_drs(1)]
    result = enflame.fit(devices, direct(2), drs_ctx())
    assert (result.ok, result.reason) == (False, "1/2 ModeNotFit")
    result = enflame.fit(devices, direct(1), PLAIN)
    assert result.reason == "1/2 ModeNotFit"


REFUSALS = [
    pytest.param(gcu_drs(0, health=False), PLAIN, "CardNotHealth", id="health"),
    pytest.param(vdev(GCU, 0, count=6, mem=40960), PLAIN, "CardTypeMismatch", id="type"),
    pytest.param(gcu_drs(0), ctx_of(nouse_uuids=["n-enflame-drs-0"]), "CardUuidMismatch",
                 id="uuid"),
    pytest.param(gcu_drs(0, used=4, usedmem=12288, usedcores=34), PLAIN,
                 "CardTimeSlicingExhausted", id="too-few-free-slices"),
    pytest.param(gcu_drs(0, used=1, usedmem=6144, usedcores=17), ctx_of(mutex=True),
                 "ExclusiveDeviceAllocateConflict", id="mutex"),
    pytest.param(gcu_drs(0, used=1, usedmem=30000, usedcores=17), PLAIN,
                 "CardInsufficientMemory", id="memory"),
    pytest.param(gcu_drs(0, used=1, usedmem=6144, usedcores=60), PLAIN,
                 "CardInsufficientCore", id="cores"),
]  # fmt: skip


@pytest.mark.parametrize(("dev", "ctx", "word"), REFUSALS)
def test_drs_refusals(dev: DeviceUsage, ctx: FitContext, word: str) -> None:
    result = enflame.fit([dev], direct(3), drs_ctx(ctx))
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_drs_shares_a_gcu_up_to_its_slices() -> None:
    dev = gcu_drs(0, used=3, usedmem=20480, usedcores=50)
    assert enflame.fit([dev], direct(3), drs_ctx()).ok


GCU_REFUSALS = [
    pytest.param(vdev(GCU, 0, health=False), "CardNotHealth", id="health"),
    pytest.param(vdev(ENFLAME_DRS, 0), "CardTypeMismatch", id="type"),
    pytest.param(vdev(GCU, 0, used=1), "ExclusiveDeviceAllocateConflict", id="used"),
]


@pytest.mark.parametrize(("dev", "word"), GCU_REFUSALS)
def test_whole_gcu_refusals(dev: DeviceUsage, word: str) -> None:
    result = enflame.fit_gcu([dev], vreq(GCU), PLAIN)
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_whole_gcus_are_exclusive_granted_whole_and_ignore_uuid_selectors() -> None:
    devices = [vdev(GCU, 0), vdev(GCU, 1, used=1), vdev(GCU, 2)]
    result = enflame.fit_gcu(devices, vreq(GCU, 2), ctx_of(use_uuids=["elsewhere"]))
    assert uuids_of(result.devices) == ["GCU-2", "GCU-0"]
    assert all((g.usedmem, g.usedcores) == (100, 100) for g in result.devices)
    result = enflame.fit_gcu(devices, vreq(GCU, 3), PLAIN)
    assert result.reason == (
        "2/3 AllocatedCardsInsufficientRequest, 1/3 ExclusiveDeviceAllocateConflict"
    )
    assert enflame.fit_gcu(devices, vreq(GCU, 0), PLAIN).ok


def test_granted_profile_unknown_grant() -> None:
    assert enflame.granted_profile(ContainerDevice("x", ENFLAME_DRS, 1, 1), S60) is None


@settings(max_examples=200)
@given(
    held=st.lists(st.lists(st.sampled_from([1, 3, 6]), max_size=3), min_size=1, max_size=4),
    slices=st.sampled_from([1, 2, 3, 6]),
    mutex=st.booleans(),
)
def test_drs_never_overcommits_slices_memory_or_cores(
    held: list[list[int]], slices: int, mutex: bool
) -> None:
    devices = []
    by_slices = {p.slices: p for p in S60}
    for i, drawn in enumerate(held):
        grants = drawn if sum(drawn) <= 6 else []
        used = sum(grants)
        devices.append(
            gcu_drs(
                i,
                used=used,
                usedmem=sum(by_slices[g].memory_gb * 1024 for g in grants),
                usedcores=sum(enflame.core_percent(by_slices[g], S60) for g in grants),
            )
        )
    ctx = drs_ctx(ctx_of(mutex=mutex))
    result = enflame.fit(devices, direct(slices), ctx)
    assert result == enflame.fit(devices, direct(slices), ctx)
    if not result.ok:
        return
    (granted,) = result.devices
    dev = next(d for d in devices if d.uuid == granted.uuid)
    profile = enflame.granted_profile(granted, S60)
    assert profile is not None
    assert profile.slices == slices
    assert dev.used + profile.slices <= dev.count
    assert dev.usedmem + granted.usedmem <= dev.totalmem
    assert dev.usedcores + granted.usedcores <= dev.totalcore
    assert not mutex or dev.used == 0
