"""A vendor's *open* devices on a node: those able to take some request, most free memory first.

:class:`~.node.NodeUsage` builds one :class:`OpenDevices` per vendor on first use
(:meth:`NodeUsage.open <.node.NodeUsage.open>`) and keeps it for that node version; the quick
verdict (:mod:`hami_scheduler.core.quick`) scans its rows and stops at the first one with too
little.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from hami_scheduler.core.usage.device import MIG_MODE, DeviceUsage

__all__ = ["NO_OPEN_DEVICES", "OpenDevices", "OpenRow", "open_devices"]

OpenRow = tuple[int, int, int, int, int, int, DeviceUsage]
"""``(free_mem, free_cores, totalmem, totalcore, usedcores, used, device)`` of an open device."""

_ANY_PERCENTAGE: Final = 101


@dataclass(frozen=True, slots=True)
class OpenDevices:
    """One vendor's *open* devices on a node — healthy, not MIG, not cordoned, a slot free —
    as rows sorted by free memory, most first, with bounds over them.

    Every device that can take any request is open, so a request beyond these bounds fits
    nowhere in the group, and a scan for a fixed amount of memory can stop at the first row
    with too little.
    """

    rows: tuple[OpenRow, ...] = ()
    max_free_mem: int = 0
    max_free_cores: int = 0
    max_percentage: int = 0
    """The largest memory percentage some open device could still grant (101: any)."""
    max_totalmem: int = 0


NO_OPEN_DEVICES: Final = OpenDevices()


def open_devices(devices: Iterable[DeviceUsage], cordon: frozenset[str]) -> OpenDevices:
    """The open ones of ``devices`` (one vendor's), leaving out the UUIDs in ``cordon``."""
    rows: list[OpenRow] = []
    max_free_cores = max_percentage = max_totalmem = 0
    for dev in devices:
        if not dev.health or dev.used >= dev.count or dev.mode == MIG_MODE or dev.uuid in cordon:
            continue
        free_mem = dev.totalmem - dev.usedmem
        free_cores = dev.totalcore - dev.usedcores
        rows.append(
            (free_mem, free_cores, dev.totalmem, dev.totalcore, dev.usedcores, dev.used, dev)
        )
        max_free_cores = max(max_free_cores, free_cores)
        max_totalmem = max(max_totalmem, dev.totalmem)
        if dev.totalmem <= 0:
            percentage = _ANY_PERCENTAGE
        else:
            # Largest p with totalmem·p // 100 <= free_mem, i.e. totalmem·p < (free_mem+1)·100.
            percentage = -(-(free_mem + 1) * 100 // dev.totalmem) - 1
        max_percentage = max(max_percentage, percentage)
    if not rows:
        return NO_OPEN_DEVICES
    rows.sort(key=_free_mem, reverse=True)
    return OpenDevices(tuple(rows), rows[0][0], max_free_cores, max_percentage, max_totalmem)


def _free_mem(row: OpenRow) -> int:
    return row[0]
