"""Shared-region codec round trips, what the encoder refuses, and the usage fast path against a
reference computed from the full decode."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.region.codec import (
    DeviceMemory,
    DeviceUtilization,
    ProcSlot,
    SharedRegion,
    decode_region,
    encode_region,
)
from hami_protocol.region.layout import RegionVersion
from hami_protocol.region.usage import DeviceUsage, RegionUsage, read_usage

U64 = st.integers(0, 2**64 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
UUIDS = st.one_of(
    st.just(""),
    st.text(st.characters(min_codepoint=1, max_codepoint=127), min_size=1, max_size=96),
)


@st.composite
def _procs(draw: st.DrawFn) -> ProcSlot:
    return ProcSlot(
        pid=draw(I32),
        hostpid=draw(I32),
        used=tuple(
            draw(
                st.lists(st.builds(DeviceMemory, U64, U64, U64, U64, U64), min_size=16, max_size=16)
            )
        ),
        monitor_used=tuple(draw(st.lists(U64, min_size=16, max_size=16))),
        device_util=tuple(
            draw(st.lists(st.builds(DeviceUtilization, U64, U64, U64), min_size=16, max_size=16))
        ),
        status=draw(st.one_of(st.just(0), st.just(1), I32)),
    )


@st.composite
def regions(draw: st.DrawFn) -> SharedRegion:
    version = draw(st.sampled_from(RegionVersion))
    v1 = version is RegionVersion.V1
    return SharedRegion(
        version=version,
        major_version=1 if v1 else 0,
        minor_version=draw(I32) if v1 else 0,
        sm_init_flag=draw(I32),
        owner_pid=draw(st.integers(0, 2**64 - 1 if v1 else 2**32 - 1)),
        num=draw(st.integers(0, 16)),
        uuids=tuple(draw(st.lists(UUIDS, min_size=16, max_size=16))),
        limits=tuple(draw(st.lists(U64, min_size=16, max_size=16))),
        sm_limits=tuple(draw(st.lists(U64, min_size=16, max_size=16))),
        procs=tuple(draw(st.lists(_procs(), max_size=4))),
        utilization_switch=draw(I32),
        recent_kernel=draw(I32),
        priority=draw(I32),
        last_kernel_time=draw(st.integers(-(2**63), 2**63 - 1)) if v1 else 0,
    )


@settings(max_examples=60, deadline=None)
@given(regions())
def test_decode_inverts_encode(region: SharedRegion) -> None:
    assert decode_region(encode_region(region)) == region


@settings(max_examples=40, deadline=None)
@given(regions())
def test_encode_inverts_decode(region: SharedRegion) -> None:
    image = encode_region(region)
    assert encode_region(decode_region(image)) == image
    assert encode_region(decode_region(bytearray(image))) == image


def _reference(region: SharedRegion) -> RegionUsage:
    """What HAMi's readers compute, from the full decode."""
    active = [proc for proc in region.procs if proc.status != 0]
    devices = tuple(
        DeviceUsage(
            index=d,
            uuid=region.uuids[d],
            limit_bytes=region.limits[d],
            sm_limit=region.sm_limits[d],
            used_bytes=sum(proc.used[d].total for proc in active),
            context_bytes=sum(proc.used[d].context_size for proc in active),
            module_bytes=sum(proc.used[d].module_size for proc in active),
            buffer_bytes=sum(proc.used[d].buffer_size for proc in active),
            sm_util=sum(proc.device_util[d].sm_util for proc in active),
        )
        for d in range(region.num)
        if region.uuids[d]
    )
    return RegionUsage(
        version=region.version,
        devices=devices,
        procnum=len(region.procs),
        active_procs=len(active),
        priority=region.priority,
        recent_kernel=region.recent_kernel,
        utilization_switch=region.utilization_switch,
        last_kernel_time=region.last_kernel_time,
    )


@settings(max_examples=80, deadline=None)
@given(regions())
def test_read_usage_agrees_with_the_full_decode(region: SharedRegion) -> None:
    image = encode_region(region)
    assert read_usage(image) == _reference(decode_region(image))
    with memoryview(image) as view:
        assert read_usage(view) == _reference(region)


def test_non_ascii_uuid_bytes_stay_readable() -> None:
    base = SharedRegion(
        version=RegionVersion.V0,
        major_version=0,
        minor_version=0,
        sm_init_flag=0,
        owner_pid=0,
        num=1,
        uuids=("GPU-x", *([""] * 15)),
        limits=(0,) * 16,
        sm_limits=(0,) * 16,
        procs=(),
        utilization_switch=0,
        recent_kernel=0,
        priority=0,
        last_kernel_time=0,
    )
    image = bytearray(encode_region(base))
    image[56 + 4] = 0xFF  # v0 uuids start at 56
    assert decode_region(image).uuids[0] == "GPU-\\xff"
    assert read_usage(image).devices[0].uuid == "GPU-\\xff"


# --- what the encoder refuses -------------------------------------------------------------------
_EMPTY_PROC = ProcSlot(
    pid=1,
    hostpid=0,
    used=(DeviceMemory(0, 0, 0, 0, 0),) * 16,
    monitor_used=(0,) * 16,
    device_util=(DeviceUtilization(0, 0, 0),) * 16,
    status=1,
)
_V1 = SharedRegion(
    version=RegionVersion.V1,
    major_version=1,
    minor_version=0,
    sm_init_flag=0,
    owner_pid=0,
    num=0,
    uuids=("",) * 16,
    limits=(0,) * 16,
    sm_limits=(0,) * 16,
    procs=(),
    utilization_switch=0,
    recent_kernel=0,
    priority=0,
    last_kernel_time=0,
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"procs": (_EMPTY_PROC,) * 1025}, "1025 processes"),
        ({"uuids": ("",) * 15}, "uuids has 15 entries"),
        ({"limits": (0,) * 17}, "limits has 17 entries"),
        ({"sm_limits": ()}, "sm_limits has 0 entries"),
        ({"num": 17}, "num 17"),
        ({"num": -1}, "num -1"),
        ({"major_version": 2}, "major version 1, not 2"),
        ({"uuids": ("G" * 97, *([""] * 15))}, "at most 96 bytes"),
        ({"uuids": ("GPU-\0", *([""] * 15))}, "without NUL"),
        ({"uuids": ("GPU-é", *([""] * 15))}, "not ASCII"),
        ({"priority": 2**31}, "does not fit"),
        ({"limits": (-1,) + (0,) * 15}, "does not fit"),
        (
            {"procs": (dataclasses.replace(_EMPTY_PROC, monitor_used=(0,)),)},
            "monitor_used of pid 1",
        ),
        ({"procs": (dataclasses.replace(_EMPTY_PROC, used=()),)}, "used of pid 1 has 0"),
        ({"procs": (dataclasses.replace(_EMPTY_PROC, device_util=()),)}, "device_util of pid 1"),
    ],
)
def test_encode_refuses(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_region(dataclasses.replace(_V1, **change))


@pytest.mark.parametrize(
    "change", [{"major_version": 1}, {"minor_version": 3}, {"last_kernel_time": 5}]
)
def test_encode_refuses_v1_fields_in_v0(change: dict[str, Any]) -> None:
    v0 = dataclasses.replace(_V1, version=RegionVersion.V0, major_version=0)
    encode_region(v0)
    with pytest.raises(ValueError, match="v0 region"):
        encode_region(dataclasses.replace(v0, **change))


def test_v0_owner_pid_is_32_bits() -> None:
    v0 = dataclasses.replace(_V1, version=RegionVersion.V0, major_version=0)
    with pytest.raises(ValueError, match="does not fit"):
        encode_region(dataclasses.replace(v0, owner_pid=2**32))
    assert (
        decode_region(encode_region(dataclasses.replace(_V1, owner_pid=2**32))).owner_pid == 2**32
    )


def test_1024_processes_encode() -> None:
    region = dataclasses.replace(_V1, procs=(_EMPTY_PROC,) * 1024)
    assert decode_region(encode_region(region)) == region
