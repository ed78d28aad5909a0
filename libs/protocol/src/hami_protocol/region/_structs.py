"""Precompiled ``struct.Struct``s over each layout, derived from the offsets in
:mod:`.layout` (so the offsets are spelled once), and the content checks; shared by the codec
and the usage reader."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from hami_protocol.region._fault import RegionError, RegionFault
from hami_protocol.region.layout import (
    DEVICE_MEMORY_FORMAT,
    DEVICE_UTIL_FORMAT,
    MAX_DEVICES,
    MAX_PROCS,
    UUID_BYTES,
    V0,
    V1,
    RegionLayout,
    RegionVersion,
)

__all__ = ["STRUCTS", "RegionStructs", "check_counts", "uuid_text"]

_MEMORY: Final = DEVICE_MEMORY_FORMAT.lstrip("<")
_UTIL: Final = DEVICE_UTIL_FORMAT.lstrip("<")


def compose(base: int, fields: Sequence[tuple[int, str]], end: int) -> struct.Struct:
    """One little-endian struct reading ``fields`` (ascending absolute offsets, formats without
    byte order) from ``base`` up to ``end``, with pad bytes over the gaps."""
    parts: list[str] = []
    at = base
    for offset, fmt in fields:
        if offset < at:
            raise ValueError(f"field at {offset} overlaps the previous one (ends at {at})")
        if offset > at:
            parts.append(f"{offset - at}x")
        parts.append(fmt)
        at = offset + struct.calcsize("<" + fmt)
    if end < at:
        raise ValueError(f"fields end at {at}, past {end}")
    if end > at:
        parts.append(f"{end - at}x")
    return struct.Struct("<" + "".join(parts))


def uuid_text(raw: bytes) -> str:
    """A ``char[96]`` UUID: ASCII up to the first NUL (bytes that are not ASCII stay readable)."""
    return raw.split(b"\0", 1)[0].decode("ascii", "backslashreplace")


def check_counts(num: int, procnum: int) -> None:
    """The content checks once the layout is known: DEVICES, then PROCNUM."""
    if num > MAX_DEVICES:
        raise RegionError(RegionFault.DEVICES, f"num {num} > {MAX_DEVICES} devices", value=num)
    if procnum < 0 or procnum > MAX_PROCS:
        raise RegionError(
            RegionFault.PROCNUM,
            f"procnum {procnum} outside 0..{MAX_PROCS} process slots",
            value=procnum,
        )


@dataclass(frozen=True, slots=True)
class RegionStructs:
    header: struct.Struct
    """From 0 to ``procs``: magic, [major, minor,] smInitFlag, ownerPid, num, 16 uuids,
    16 limits, 16 smLimits."""
    slot: struct.Struct
    """A whole process slot: pid, hostpid, 16×5 used, 16 monitorused, 16×3 deviceUtil, status."""
    tail: struct.Struct
    """From ``procnum`` to the end: procnum, utilizationSwitch, recentKernel, priority
    [, lastKernelTime]."""
    num: struct.Struct
    """``num`` alone."""
    usage_head: tuple[struct.Struct, ...]
    """Per device count n (at ``uuids``): n uuids, n limits, n smLimits."""
    usage_slot: tuple[struct.Struct, ...]
    """Per device count n, a whole slot wide (for ``iter_unpack`` over consecutive slots):
    n×5 used, n×3 deviceUtil, status."""


def _owner_format(layout: RegionLayout) -> str:
    return layout.owner_pid_format.lstrip("<")


def _build(layout: RegionLayout) -> RegionStructs:
    header: list[tuple[int, str]] = [(0, "i")]
    if layout.major_version is not None and layout.minor_version is not None:
        header += [(layout.major_version, "i"), (layout.minor_version, "i")]
    header += [
        (layout.sm_init_flag, "i"),
        (layout.owner_pid, _owner_format(layout)),
        (layout.num, "Q"),
    ]
    header += [(layout.uuids + i * UUID_BYTES, f"{UUID_BYTES}s") for i in range(MAX_DEVICES)]
    header += [(layout.limit, f"{MAX_DEVICES}Q"), (layout.sm_limit, f"{MAX_DEVICES}Q")]

    def memory(n: int) -> list[tuple[int, str]]:
        return [(layout.proc_used + d * layout.device_memory_size, _MEMORY) for d in range(n)]

    def util(n: int) -> list[tuple[int, str]]:
        return [(layout.proc_device_util + d * layout.device_util_size, _UTIL) for d in range(n)]

    slot = [(layout.proc_pid, "i"), (layout.proc_hostpid, "i"), *memory(MAX_DEVICES)]
    slot += [(layout.proc_monitor_used, f"{MAX_DEVICES}Q"), *util(MAX_DEVICES)]
    slot += [(layout.proc_status, "i")]

    tail = [
        (layout.procnum, "i"),
        (layout.utilization_switch, "i"),
        (layout.recent_kernel, "i"),
        (layout.priority, "i"),
    ]
    if layout.last_kernel_time is not None:
        tail.append((layout.last_kernel_time, "q"))

    def usage_head(n: int) -> struct.Struct:
        uuids = [(layout.uuids + i * UUID_BYTES, f"{UUID_BYTES}s") for i in range(n)]
        fields = [*uuids, (layout.limit, f"{n}Q"), (layout.sm_limit, f"{n}Q")]
        return compose(layout.uuids, fields, layout.sm_limit + 8 * n)

    def usage_slot(n: int) -> struct.Struct:
        fields = [*memory(n), *util(n), (layout.proc_status, "i")]
        return compose(0, fields, layout.proc_size)

    return RegionStructs(
        header=compose(0, header, layout.procs),
        slot=compose(0, slot, layout.proc_size),
        tail=compose(layout.procnum, tail, layout.size),
        num=struct.Struct("<Q"),
        usage_head=tuple(usage_head(n) for n in range(MAX_DEVICES + 1)),
        usage_slot=tuple(usage_slot(n) for n in range(MAX_DEVICES + 1)),
    )


STRUCTS: Final[dict[RegionVersion, RegionStructs]] = {
    layout.version: _build(layout) for layout in (V0, V1)
}
