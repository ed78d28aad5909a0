"""The whole shared region as values: :func:`decode_region` and its inverse :func:`encode_region`.

:class:`SharedRegion` holds every field HAMi-core and the monitor use, in both layouts (v0 has no
version numbers and no ``lastKernelTime``; they read as 0).  The ``sem_t`` and the spare fields
are not modelled: the encoder writes zeros there, so ``encode_region(decode_region(b)) == b``
for every valid ``b`` whose unused bytes are zero.  Decoding refuses what HAMi's monitor could
not read sensibly (:class:`RegionFault`); the encoder refuses what the decoder would refuse.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from hami_protocol.region._fault import RegionError, RegionFault
from hami_protocol.region._structs import STRUCTS, check_counts, uuid_text
from hami_protocol.region.layout import (
    MAGIC,
    MAX_DEVICES,
    MAX_PROCS,
    UUID_BYTES,
    V0,
    V1,
    Buffer,
    RegionLayout,
    RegionVersion,
    detect_layout,
)

__all__ = [
    "DeviceMemory",
    "DeviceUtilization",
    "ProcSlot",
    "RegionError",
    "RegionFault",
    "SharedRegion",
    "decode_region",
    "encode_region",
]


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    context_size: int
    module_size: int
    buffer_size: int
    offset: int
    total: int


@dataclass(frozen=True, slots=True)
class DeviceUtilization:
    dec_util: int
    enc_util: int
    sm_util: int


@dataclass(frozen=True, slots=True)
class ProcSlot:
    """One process of the container; the tuples have one entry per device slot (16)."""

    pid: int
    hostpid: int
    used: tuple[DeviceMemory, ...]
    monitor_used: tuple[int, ...]
    device_util: tuple[DeviceUtilization, ...]
    status: int


@dataclass(frozen=True, slots=True)
class SharedRegion:
    """A decoded region: ``uuids``/``limits``/``sm_limits`` have all 16 device slots (a uuid is
    "" when its slot is empty), ``procs`` only the first ``procnum`` process slots."""

    version: RegionVersion
    major_version: int
    minor_version: int
    sm_init_flag: int
    owner_pid: int
    num: int
    uuids: tuple[str, ...]
    limits: tuple[int, ...]
    sm_limits: tuple[int, ...]
    procs: tuple[ProcSlot, ...]
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int


def _proc(ints: tuple[int, ...]) -> ProcSlot:
    used_end = 2 + 5 * MAX_DEVICES
    monitor_end = used_end + MAX_DEVICES
    util_end = monitor_end + 3 * MAX_DEVICES
    return ProcSlot(
        pid=ints[0],
        hostpid=ints[1],
        used=tuple(DeviceMemory(*ints[i : i + 5]) for i in range(2, used_end, 5)),
        monitor_used=ints[used_end:monitor_end],
        device_util=tuple(
            DeviceUtilization(*ints[i : i + 3]) for i in range(monitor_end, util_end, 3)
        ),
        status=ints[util_end],
    )


def decode_region(buf: Buffer) -> SharedRegion:
    """Every field of the region in ``buf``; :class:`RegionError` when it is not one."""
    layout = detect_layout(buf)
    structs = STRUCTS[layout.version]
    head = structs.header.unpack_from(buf, 0)
    tail = structs.tail.unpack_from(buf, layout.procnum)
    if layout.version is RegionVersion.V1:
        major, minor, sm_init, owner, num = head[1:6]
        uuids_at = 6
        last_kernel_time = tail[4]
    else:
        major, minor = 0, 0
        sm_init, owner, num = head[1:4]
        uuids_at = 4
        last_kernel_time = 0
    procnum, switch, recent, priority = tail[:4]
    check_counts(num, procnum)
    limits_at = uuids_at + MAX_DEVICES
    sm_at = limits_at + MAX_DEVICES
    slot = structs.slot
    return SharedRegion(
        version=layout.version,
        major_version=major,
        minor_version=minor,
        sm_init_flag=sm_init,
        owner_pid=owner,
        num=num,
        uuids=tuple(uuid_text(raw) for raw in head[uuids_at:limits_at]),
        limits=head[limits_at:sm_at],
        sm_limits=head[sm_at : sm_at + MAX_DEVICES],
        procs=tuple(
            _proc(slot.unpack_from(buf, layout.procs + i * layout.proc_size))
            for i in range(procnum)
        ),
        utilization_switch=switch,
        recent_kernel=recent,
        priority=priority,
        last_kernel_time=last_kernel_time,
    )


def _sized(name: str, values: Sequence[object], size: int = MAX_DEVICES) -> None:
    if len(values) != size:
        raise ValueError(f"{name} has {len(values)} entries, the region has {size}")


def _uuid_bytes(uuid: str) -> bytes:
    try:
        raw = uuid.encode("ascii")
    except UnicodeEncodeError as exc:
        raise ValueError(f"uuid {uuid!r} is not ASCII") from exc
    if b"\0" in raw or len(raw) > UUID_BYTES:
        raise ValueError(f"uuid {uuid!r} must be at most {UUID_BYTES} bytes without NUL")
    return raw


def _check(region: SharedRegion) -> RegionLayout:
    if region.version is RegionVersion.V0:
        if region.major_version or region.minor_version or region.last_kernel_time:
            raise ValueError("a v0 region has no version numbers and no last kernel time")
        layout = V0
    else:
        if region.major_version != 1:
            raise ValueError(f"a v1 region has major version 1, not {region.major_version}")
        layout = V1
    if not 0 <= region.num <= MAX_DEVICES:
        raise ValueError(f"num {region.num} outside 0..{MAX_DEVICES}")
    if len(region.procs) > MAX_PROCS:
        raise ValueError(f"{len(region.procs)} processes > {MAX_PROCS} slots")
    for name, values in (
        ("uuids", region.uuids),
        ("limits", region.limits),
        ("sm_limits", region.sm_limits),
    ):
        _sized(name, values)
    for proc in region.procs:
        _sized(f"used of pid {proc.pid}", proc.used)
        _sized(f"monitor_used of pid {proc.pid}", proc.monitor_used)
        _sized(f"device_util of pid {proc.pid}", proc.device_util)
    return layout


def _slot_values(proc: ProcSlot) -> list[int]:
    values = [proc.pid, proc.hostpid]
    for memory in proc.used:
        values += [
            memory.context_size,
            memory.module_size,
            memory.buffer_size,
            memory.offset,
            memory.total,
        ]
    values += proc.monitor_used
    for util in proc.device_util:
        values += [util.dec_util, util.enc_util, util.sm_util]
    values.append(proc.status)
    return values


def encode_region(region: SharedRegion) -> bytes:
    """The whole file image of ``region`` (``layout.size`` bytes); ValueError when a value does
    not fit its field or the region could not be decoded again."""
    layout = _check(region)
    structs = STRUCTS[layout.version]
    out = bytearray(layout.size)
    versions = [region.major_version, region.minor_version] if layout is V1 else []
    head = [
        MAGIC,
        *versions,
        region.sm_init_flag,
        region.owner_pid,
        region.num,
        *(_uuid_bytes(uuid) for uuid in region.uuids),
        *region.limits,
        *region.sm_limits,
    ]
    tail = [len(region.procs), region.utilization_switch, region.recent_kernel, region.priority]
    if layout is V1:
        tail.append(region.last_kernel_time)
    try:
        structs.header.pack_into(out, 0, *head)
        for i, proc in enumerate(region.procs):
            structs.slot.pack_into(out, layout.procs + i * layout.proc_size, *_slot_values(proc))
        structs.tail.pack_into(out, layout.procnum, *tail)
    except struct.error as exc:
        raise ValueError(f"a value does not fit its field: {exc}") from exc
    return bytes(out)
