"""The two binary layouts of HAMi-core's shared region and how a file tells which it is.

Offsets are those of the C struct ``shared_region_t`` on amd64 (little-endian, natural
alignment), as HAMi's own layout test pins them.  v0 is the original layout; v1 (HAMi-core with
``majorVersion`` 1) widens ``ownerPid`` to ``size_t``, pads every per-device sub-struct with three
spare ``u64`` and adds ``lastKernelTime``.  Within a device sub-struct the fields follow
:data:`DEVICE_MEMORY_FORMAT` (context, module, buffer, offset, total) and
:data:`DEVICE_UTIL_FORMAT` (dec, enc, sm) in both versions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, TypeAlias

from hami_protocol.region._fault import RegionError, RegionFault

__all__ = [
    "DEVICE_MEMORY_FORMAT",
    "DEVICE_UTIL_FORMAT",
    "HEADER_BYTES",
    "MAGIC",
    "MAX_DEVICES",
    "MAX_PROCS",
    "UUID_BYTES",
    "V0",
    "V1",
    "Buffer",
    "RegionLayout",
    "RegionVersion",
    "detect_layout",
    "layout_for",
]

Buffer: TypeAlias = bytes | bytearray | memoryview
"""What the codecs read: a file image, or a view of a mapped file."""

MAGIC: Final = 19920718
"""``initializedFlag``, the first int32 of every region."""
MAX_DEVICES: Final = 16
MAX_PROCS: Final = 1024
UUID_BYTES: Final = 96
HEADER_BYTES: Final = 12
"""The smallest file whose header can be read: magic and (v1) major/minor version."""

DEVICE_MEMORY_FORMAT: Final = "<5Q"
"""``deviceMemory``: contextSize, moduleSize, bufferSize, offset, total."""
DEVICE_UTIL_FORMAT: Final = "<3Q"
"""``deviceUtilization``: decUtil, encUtil, smUtil."""


class RegionVersion(IntEnum):
    V0 = 0
    V1 = 1


@dataclass(frozen=True, slots=True)
class RegionLayout:
    """Byte offsets of one layout's fields.

    ``proc_*`` are relative to the start of a process slot (slot ``i`` starts at
    ``procs + i * proc_size``); the device sub-structs of a slot repeat every
    ``device_memory_size`` / ``device_util_size`` bytes from ``proc_used`` / ``proc_device_util``.
    Every other offset is from the start of the file.
    """

    version: RegionVersion
    size: int
    sm_init_flag: int
    owner_pid: int
    sem: int
    num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    proc_size: int
    proc_pid: int
    proc_hostpid: int
    proc_used: int
    proc_monitor_used: int
    proc_device_util: int
    proc_status: int
    device_memory_size: int
    device_util_size: int
    procnum: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None
    owner_pid_format: str
    major_version: int | None
    minor_version: int | None


V0: Final[RegionLayout] = RegionLayout(
    version=RegionVersion.V0,
    size=1_197_896,
    sm_init_flag=4,
    owner_pid=8,
    sem=12,
    num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    proc_size=1168,
    proc_pid=0,
    proc_hostpid=4,
    proc_used=8,
    proc_monitor_used=648,
    proc_device_util=776,
    proc_status=1160,
    device_memory_size=40,
    device_util_size=24,
    procnum=1_197_880,
    utilization_switch=1_197_884,
    recent_kernel=1_197_888,
    priority=1_197_892,
    last_kernel_time=None,
    owner_pid_format="<I",
    major_version=None,
    minor_version=None,
)

V1: Final[RegionLayout] = RegionLayout(
    version=RegionVersion.V1,
    size=2_008_952,
    sm_init_flag=12,
    owner_pid=16,
    sem=24,
    num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    proc_size=1960,
    proc_pid=0,
    proc_hostpid=4,
    proc_used=8,
    proc_monitor_used=1032,
    proc_device_util=1160,
    proc_status=1928,
    device_memory_size=64,
    device_util_size=48,
    procnum=2_008_896,
    utilization_switch=2_008_900,
    recent_kernel=2_008_904,
    priority=2_008_908,
    last_kernel_time=2_008_912,
    owner_pid_format="<Q",
    major_version=4,
    minor_version=8,
)

_HEADER = struct.Struct("<ii")


def detect_layout(buf: Buffer) -> RegionLayout:
    """The layout of a region file whose whole content is ``buf`` (its length is the file size);
    see :func:`layout_for`."""
    return layout_for(buf, len(buf))


def layout_for(header: Buffer, size: int) -> RegionLayout:
    """The layout of a region file of ``size`` bytes that starts with ``header`` (at least its
    first :data:`HEADER_BYTES` bytes when the file has them) — for a reader that looks at the
    file without holding all of it.

    Checked in this order: shorter than the header → TRUNCATED; more than twice the v1 size →
    OVERSIZED (HAMi-core writes exactly ``sizeof(shared_region_t)``); magic → MAGIC; then the
    size picks the version: below v0 → TRUNCATED, below v1 → v0, else v1 when ``majorVersion``
    is 1 and VERSION otherwise (HAMi's monitor rejects any other major version).
    """
    if size < HEADER_BYTES:
        raise RegionError(
            RegionFault.TRUNCATED,
            f"size {size} bytes < {HEADER_BYTES}-byte header",
            value=size,
        )
    if size > 2 * V1.size:
        raise RegionError(
            RegionFault.OVERSIZED,
            f"size {size} bytes > {2 * V1.size} (twice the v1 region)",
            value=size,
        )
    magic, major = _HEADER.unpack_from(header, 0)
    if magic != MAGIC:
        raise RegionError(RegionFault.MAGIC, f"magic {magic} != {MAGIC}", value=magic)
    if size < V0.size:
        raise RegionError(
            RegionFault.TRUNCATED,
            f"size {size} bytes < {V0.size} (the v0 region)",
            value=size,
        )
    if size < V1.size:
        return V0
    if major != 1:
        raise RegionError(
            RegionFault.VERSION,
            f"major version {major} != 1 in a {size}-byte region",
            value=major,
        )
    return V1
