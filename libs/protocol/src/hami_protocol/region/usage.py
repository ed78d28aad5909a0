"""Per-device usage of one region, read the way the vGPU monitor needs it at every scrape.

:func:`read_usage` validates exactly as :func:`~hami_protocol.region.codec.decode_region` does
and gives what a full decode would sum (HAMi's readers): per device slot ``index < num`` whose
UUID is set, the limits and the sums over process slots with ``status != 0`` of that device's
memory and SM utilisation.  It runs for every region on every scrape, so it reads only those
fields, with one precompiled struct per part and per device count, and skips everything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_protocol.region._structs import STRUCTS, check_counts, uuid_text
from hami_protocol.region.layout import Buffer, RegionVersion, detect_layout

__all__ = ["DeviceUsage", "RegionUsage", "read_usage"]


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    index: int
    uuid: str
    limit_bytes: int
    sm_limit: int
    used_bytes: int
    """Σ ``used.total`` of the active processes."""
    context_bytes: int
    module_bytes: int
    buffer_bytes: int
    sm_util: int


@dataclass(frozen=True, slots=True)
class RegionUsage:
    version: RegionVersion
    devices: tuple[DeviceUsage, ...]
    procnum: int
    active_procs: int
    """Process slots (of the first ``procnum``) with ``status != 0``."""
    priority: int
    recent_kernel: int
    utilization_switch: int
    last_kernel_time: int
    """Unix seconds of the last kernel launch (0 in v0 and before any launch)."""


def read_usage(buf: Buffer) -> RegionUsage:
    """The usage in the region ``buf``; :class:`~hami_protocol.region.codec.RegionError` as
    :func:`~hami_protocol.region.codec.decode_region` raises it."""
    layout = detect_layout(buf)
    structs = STRUCTS[layout.version]
    (num,) = structs.num.unpack_from(buf, layout.num)
    tail = structs.tail.unpack_from(buf, layout.procnum)
    procnum: int = tail[0]
    check_counts(num, procnum)
    last_kernel_time = tail[4] if layout.last_kernel_time is not None else 0

    head = structs.usage_head[num].unpack_from(buf, layout.uuids) if num else ()
    # Device slots that count: below num with a UUID set (HAMi: first byte non-zero).
    wanted = [d for d in range(num) if head[d][0] != 0]
    end = layout.procs + procnum * layout.proc_size
    # Views released on the way out: a caller's mmap can be closed right after.
    with (
        memoryview(buf) as whole,
        whole.cast("B") as raw,
        raw[layout.procs : end] as slots,
    ):
        active = [row for row in structs.usage_slot[num].iter_unpack(slots) if row[-1] != 0]
    # Every field of the active slots summed column by column (in C, cheaper than picking).
    sums = [sum(column) for column in zip(*active, strict=True)] if active else [0] * (8 * num + 1)
    util_at = 5 * num
    devices = tuple(
        DeviceUsage(
            d,
            uuid_text(head[d]),
            head[num + d],
            head[2 * num + d],
            sums[5 * d + 4],
            sums[5 * d],
            sums[5 * d + 1],
            sums[5 * d + 2],
            sums[util_at + 3 * d + 2],
        )
        for d in wanted
    )
    return RegionUsage(
        version=layout.version,
        devices=devices,
        procnum=procnum,
        active_procs=len(active),
        priority=tail[3],
        recent_kernel=tail[2],
        utilization_switch=tail[1],
        last_kernel_time=last_kernel_time,
    )
