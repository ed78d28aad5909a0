"""The shared region's byte layout pinned against the contract's tables, and every fault.

The offsets below are the contract's literal numbers (hami-extensions.md §3), written out here
and not taken from ``hami_protocol.region.layout``, so a wrong constant there fails these tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest

from hami_protocol.errors import DecodeError
from hami_protocol.region.codec import (
    DeviceMemory,
    DeviceUtilization,
    ProcSlot,
    RegionError,
    RegionFault,
    SharedRegion,
    decode_region,
    encode_region,
)
from hami_protocol.region.layout import V0, V1, RegionVersion, detect_layout
from hami_protocol.region.usage import read_usage


@dataclass(frozen=True)
class Table:
    """One column of the contract's tables."""

    version: RegionVersion
    size: int
    major: int | None
    minor: int | None
    sm_init_flag: int
    owner_pid: int
    owner_format: str
    num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    slot: int
    used: int
    memory_size: int
    monitor_used: int
    device_util: int
    util_size: int
    status: int
    procnum: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None


TABLE_V0 = Table(
    version=RegionVersion.V0,
    size=1_197_896,
    major=None,
    minor=None,
    sm_init_flag=4,
    owner_pid=8,
    owner_format="<I",
    num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    slot=1168,
    used=8,
    memory_size=40,
    monitor_used=648,
    device_util=776,
    util_size=24,
    status=1160,
    procnum=1_197_880,
    utilization_switch=1_197_884,
    recent_kernel=1_197_888,
    priority=1_197_892,
    last_kernel_time=None,
)
TABLE_V1 = Table(
    version=RegionVersion.V1,
    size=2_008_952,
    major=4,
    minor=8,
    sm_init_flag=12,
    owner_pid=16,
    owner_format="<Q",
    num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    slot=1960,
    used=8,
    memory_size=64,
    monitor_used=1032,
    device_util=1160,
    util_size=48,
    status=1928,
    procnum=2_008_896,
    utilization_switch=2_008_900,
    recent_kernel=2_008_904,
    priority=2_008_908,
    last_kernel_time=2_008_912,
)
TABLES = [pytest.param(TABLE_V0, id="v0"), pytest.param(TABLE_V1, id="v1")]

PROCS = 3
"""Process slots filled in the hand-built image."""


def _memory(slot: int, device: int) -> tuple[int, int, int, int, int]:
    base = 1_000_000 * (slot + 1) + 1000 * device
    return (base + 1, base + 2, base + 3, base + 4, (1 << 40) + base + 5)


def _util(slot: int, device: int) -> tuple[int, int, int]:
    return (slot * 100 + device, slot * 100 + device + 1, slot * 10 + device + 2)


def _uuid(device: int) -> str:
    return f"GPU-{device:08x}-1111-2222-3333-444455556666" if device != 1 else ""


def _status(slot: int) -> int:
    return 0 if slot == 1 else slot + 1


def _hand_built(t: Table, *, num: int = 3) -> bytearray:
    """A region image written field by field at the contract's offsets."""
    buf = bytearray(t.size)
    struct.pack_into("<i", buf, 0, 19920718)
    if t.major is not None and t.minor is not None:
        struct.pack_into("<i", buf, t.major, 1)
        struct.pack_into("<i", buf, t.minor, 7)
    struct.pack_into("<i", buf, t.sm_init_flag, 1)
    struct.pack_into(t.owner_format, buf, t.owner_pid, 4242)
    struct.pack_into("<Q", buf, t.num, num)
    for device in range(16):
        raw = _uuid(device).encode() if device < num else b""
        buf[t.uuids + 96 * device : t.uuids + 96 * device + len(raw)] = raw
        struct.pack_into("<Q", buf, t.limit + 8 * device, (device + 1) << 30)
        struct.pack_into("<Q", buf, t.sm_limit + 8 * device, 10 + device)
    for slot in range(PROCS):
        at = t.procs + slot * t.slot
        struct.pack_into("<i", buf, at, 100 + slot)
        struct.pack_into("<i", buf, at + 4, 200 + slot)
        for device in range(16):
            struct.pack_into(
                "<5Q", buf, at + t.used + device * t.memory_size, *_memory(slot, device)
            )
            struct.pack_into("<Q", buf, at + t.monitor_used + 8 * device, 7 * slot + device)
            struct.pack_into(
                "<3Q", buf, at + t.device_util + device * t.util_size, *_util(slot, device)
            )
        struct.pack_into("<i", buf, at + t.status, _status(slot))
    struct.pack_into("<i", buf, t.procnum, PROCS)
    struct.pack_into("<i", buf, t.utilization_switch, 1)
    struct.pack_into("<i", buf, t.recent_kernel, -1)
    struct.pack_into("<i", buf, t.priority, 5)
    if t.last_kernel_time is not None:
        struct.pack_into("<q", buf, t.last_kernel_time, 1_700_000_000)
    return buf


# --- offsets --------------------------------------------------------------------------------------
def test_sizes_are_the_contracts() -> None:
    assert (V0.size, V1.size) == (1_197_896, 2_008_952)


@pytest.mark.parametrize("t", TABLES)
def test_decode_reads_every_field_at_the_contracts_offset(t: Table) -> None:
    region = decode_region(_hand_built(t))
    assert region.version == t.version
    assert (region.major_version, region.minor_version) == ((1, 7) if t.major else (0, 0))
    assert (region.sm_init_flag, region.owner_pid, region.num) == (1, 4242, 3)
    assert region.uuids == (_uuid(0), "", _uuid(2), *([""] * 13))
    assert region.limits == tuple((d + 1) << 30 for d in range(16))
    assert region.sm_limits == tuple(10 + d for d in range(16))
    assert len(region.procs) == PROCS
    for slot, proc in enumerate(region.procs):
        assert (proc.pid, proc.hostpid, proc.status) == (100 + slot, 200 + slot, _status(slot))
        assert proc.used == tuple(DeviceMemory(*_memory(slot, d)) for d in range(16))
        assert proc.monitor_used == tuple(7 * slot + d for d in range(16))
        assert proc.device_util == tuple(DeviceUtilization(*_util(slot, d)) for d in range(16))
    assert (region.utilization_switch, region.recent_kernel, region.priority) == (1, -1, 5)
    assert region.last_kernel_time == (1_700_000_000 if t.last_kernel_time else 0)


@pytest.mark.parametrize("t", TABLES)
def test_read_usage_reads_the_contracts_offsets(t: Table) -> None:
    usage = read_usage(_hand_built(t))
    active = [slot for slot in range(PROCS) if _status(slot)]
    assert [d.index for d in usage.devices] == [0, 2]  # device 1 has no UUID
    for device in usage.devices:
        d = device.index
        assert device.uuid == _uuid(d)
        assert (device.limit_bytes, device.sm_limit) == ((d + 1) << 30, 10 + d)
        assert device.context_bytes == sum(_memory(s, d)[0] for s in active)
        assert device.module_bytes == sum(_memory(s, d)[1] for s in active)
        assert device.buffer_bytes == sum(_memory(s, d)[2] for s in active)
        assert device.used_bytes == sum(_memory(s, d)[4] for s in active)
        assert device.sm_util == sum(_util(s, d)[2] for s in active)
    assert (usage.procnum, usage.active_procs) == (PROCS, len(active))
    assert (usage.utilization_switch, usage.recent_kernel, usage.priority) == (1, -1, 5)
    assert usage.last_kernel_time == (1_700_000_000 if t.last_kernel_time else 0)


@pytest.mark.parametrize("t", TABLES)
def test_encode_writes_every_field_at_the_contracts_offset(t: Table) -> None:
    image = _hand_built(t)
    encoded = encode_region(decode_region(image))
    assert len(encoded) == t.size
    assert encoded == image  # every byte, so every field at its offset and zeros elsewhere


@pytest.mark.parametrize("t", TABLES)
def test_encode_places_fields_of_a_built_region(t: Table) -> None:
    zero = DeviceMemory(0, 0, 0, 0, 0)
    idle = DeviceUtilization(0, 0, 0)
    proc = ProcSlot(
        pid=77,
        hostpid=88,
        used=(zero, DeviceMemory(1, 2, 3, 4, 5), *([zero] * 14)),
        monitor_used=(0, 9, *([0] * 14)),
        device_util=(idle, DeviceUtilization(6, 7, 8), *([idle] * 14)),
        status=1,
    )
    region = SharedRegion(
        version=t.version,
        major_version=1 if t.major else 0,
        minor_version=2 if t.major else 0,
        sm_init_flag=1,
        owner_pid=31,
        num=2,
        uuids=("GPU-a", "GPU-b", *([""] * 14)),
        limits=(11, 12, *([0] * 14)),
        sm_limits=(21, 22, *([0] * 14)),
        procs=(proc, proc),
        utilization_switch=1,
        recent_kernel=2,
        priority=0,
        last_kernel_time=99 if t.last_kernel_time else 0,
    )
    buf = encode_region(region)
    assert struct.unpack_from("<i", buf, 0) == (19920718,)
    if t.major is not None and t.minor is not None:
        assert struct.unpack_from("<ii", buf, t.major) == (1, 2)
    assert struct.unpack_from("<i", buf, t.sm_init_flag) == (1,)
    assert struct.unpack_from(t.owner_format, buf, t.owner_pid) == (31,)
    assert struct.unpack_from("<Q", buf, t.num) == (2,)
    assert buf[t.uuids + 96 : t.uuids + 96 + 6] == b"GPU-b\0"
    assert struct.unpack_from("<2Q", buf, t.limit) == (11, 12)
    assert struct.unpack_from("<2Q", buf, t.sm_limit) == (21, 22)
    second = t.procs + t.slot
    assert struct.unpack_from("<ii", buf, second) == (77, 88)
    assert struct.unpack_from("<5Q", buf, second + t.used + t.memory_size) == (1, 2, 3, 4, 5)
    assert struct.unpack_from("<Q", buf, second + t.monitor_used + 8) == (9,)
    assert struct.unpack_from("<3Q", buf, second + t.device_util + t.util_size) == (6, 7, 8)
    assert struct.unpack_from("<i", buf, second + t.status) == (1,)
    assert not any(buf[t.procs + 2 * t.slot : t.procnum])  # unused slots stay zero
    assert struct.unpack_from("<4i", buf, t.procnum) == (2, 1, 2, 0)
    if t.last_kernel_time is not None:
        assert struct.unpack_from("<q", buf, t.last_kernel_time) == (99,)


# --- detection and faults -----------------------------------------------------------------------
def _faults(buf: bytes | bytearray) -> tuple[RegionError, RegionError]:
    with pytest.raises(RegionError) as decoded:
        decode_region(buf)
    with pytest.raises(RegionError) as read:
        read_usage(buf)
    assert decoded.value.fault == read.value.fault
    assert str(decoded.value) == str(read.value)
    return decoded.value, read.value


def _with_magic(size: int) -> bytearray:
    buf = bytearray(size)
    if size >= 4:
        struct.pack_into("<i", buf, 0, 19920718)
    return buf


@pytest.mark.parametrize(
    ("size", "named"),
    [(0, "size 0"), (11, "size 11"), (1_197_895, "size 1197895")],
)
def test_truncated(size: int, named: str) -> None:
    error, _ = _faults(_with_magic(size))
    assert error.fault is RegionFault.TRUNCATED
    assert named in str(error)
    assert isinstance(error, DecodeError)


def test_oversized() -> None:
    error, _ = _faults(_with_magic(2 * 2_008_952 + 1))
    assert error.fault is RegionFault.OVERSIZED
    assert "4017905" in str(error)


def test_twice_the_v1_size_is_still_read_as_v1() -> None:
    buf = _hand_built(TABLE_V1) + bytes(2_008_952)
    assert detect_layout(buf) is V1
    assert decode_region(buf).owner_pid == 4242


@pytest.mark.parametrize("t", TABLES)
def test_wrong_magic(t: Table) -> None:
    buf = _hand_built(t)
    struct.pack_into("<i", buf, 0, 19920719)
    error, _ = _faults(buf)
    assert error.fault is RegionFault.MAGIC
    assert "19920719" in str(error)


def test_v1_sized_with_major_version_2() -> None:
    buf = _hand_built(TABLE_V1)
    struct.pack_into("<i", buf, 4, 2)
    error, _ = _faults(buf)
    assert error.fault is RegionFault.VERSION
    assert "major version 2" in str(error)


def test_a_size_between_the_layouts_is_v0_whatever_follows_the_magic() -> None:
    buf = _hand_built(TABLE_V0) + bytes(1000)
    assert detect_layout(buf) is V0
    assert decode_region(buf).sm_init_flag == 1  # int32@4 is smInitFlag in v0, not a version


@pytest.mark.parametrize("t", TABLES)
def test_num_17(t: Table) -> None:
    error, _ = _faults(_hand_built(t, num=17))
    assert error.fault is RegionFault.DEVICES
    assert str(error) == "num 17 > 16 devices"
    assert error.value == 17


@pytest.mark.parametrize("t", TABLES)
@pytest.mark.parametrize("procnum", [-1, 1025])
def test_procnum_out_of_range(t: Table, procnum: int) -> None:
    buf = _hand_built(t)
    struct.pack_into("<i", buf, t.procnum, procnum)
    error, _ = _faults(buf)
    assert error.fault is RegionFault.PROCNUM
    assert f"procnum {procnum} " in str(error)


@pytest.mark.parametrize("t", TABLES)
def test_all_1024_slots_are_read(t: Table) -> None:
    buf = _hand_built(t)
    last = t.procs + 1023 * t.slot
    struct.pack_into("<i", buf, last, 999)
    struct.pack_into("<i", buf, last + t.status, 1)
    struct.pack_into("<5Q", buf, last + t.used, 0, 0, 0, 0, 1)
    struct.pack_into("<i", buf, t.procnum, 1024)
    region = decode_region(buf)
    assert len(region.procs) == 1024
    assert region.procs[-1].pid == 999
    before = read_usage(_hand_built(t)).devices[0].used_bytes
    assert read_usage(buf).devices[0].used_bytes == before + 1
    assert encode_region(region) == buf


def test_views_of_a_buffer_decode_alike() -> None:
    image = _hand_built(TABLE_V1)
    with memoryview(image) as view:
        assert decode_region(view) == decode_region(bytes(image))
        assert read_usage(view) == read_usage(bytes(image))
