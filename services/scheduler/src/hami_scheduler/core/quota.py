"""Namespace ResourceQuota on device memory and cores, as HAMi enforces it at filter time.

A ResourceQuota limits a vendor through ``spec.hard["limits.<resourceMemoryName>"]`` (MiB in the
request's own unit) and ``spec.hard["limits.<resourceCoreName>"]``.  Rules:

* only integer values count; a missing (or non-integer) key means *unlimited*;
* an explicit ``0`` is a limit like any other, so it blocks every request that needs some;
* the memory limit is scaled like the request is (``memory_unit_mib × memoryFactor``), so both
  sides are MiB; for NVIDIA that is HAMi's "limit × memoryFactor when > 1";
* several ResourceQuota objects in one namespace all apply: the smallest limit wins;
* *used* is the sum, over the namespace's placed pods, of their collapsed per-device usage;
* a pod fits when ``used + pod total ≤ limit`` for memory and for cores, where the pod total
  is the collapsed usage of everything decided for it so far plus the device under test (init
  containers count by their peak, app containers add up).

:class:`QuotaLedger` is the one mutable piece: the running per-namespace sums the cache keeps,
updated in O(devices of the pod) on every pod add/remove.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami_protocol.errors import ProtocolError
from hami_protocol.pod.devices import (
    ContainerDevice,
    ContainerDevices,
    DeviceUsageSummary,
    PodSingleDevice,
    collapse_device_usage,
)
from hami_protocol.request.quantity import as_integer, parse_quantity
from hami_protocol.vendor.table import Vendor

__all__ = [
    "UNLIMITED",
    "PodQuotaTally",
    "QuotaLedger",
    "QuotaLimits",
    "VendorQuota",
    "limits_from_hard",
    "pod_quota_total",
]


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """One vendor's limits in one namespace: MiB and core units; ``None`` = unlimited."""

    memory: int | None = None
    cores: int | None = None

    @property
    def limited(self) -> bool:
        return self.memory is not None or self.cores is not None

    def merged(self, other: QuotaLimits) -> QuotaLimits:
        """Both quotas at once: the smaller limit of each resource."""
        return QuotaLimits(_smaller(self.memory, other.memory), _smaller(self.cores, other.cores))


UNLIMITED = QuotaLimits()


def _smaller(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


@dataclass(frozen=True, slots=True)
class VendorQuota:
    """What a pod's filter needs to know about one vendor's quota in its namespace."""

    limits: QuotaLimits = UNLIMITED
    used_memory: int = 0
    used_cores: int = 0

    def allows(self, memory: int, cores: int) -> bool:
        """Whether a pod totalling ``memory`` MiB and ``cores`` units still fits."""
        limit = self.limits.memory
        if limit is not None and self.used_memory + memory > limit:
            return False
        limit = self.limits.cores
        return limit is None or self.used_cores + cores <= limit


def _integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    try:
        return as_integer(parse_quantity(value))
    except ProtocolError:
        return None


def limits_from_hard(hard: Mapping[str, object], vendor: Vendor) -> QuotaLimits:
    """The limits one ResourceQuota's ``spec.hard`` sets on ``vendor``.

    Values that are not whole numbers are ignored (unlimited), as HAMi tracks integers only.
    """
    memory: int | None = None
    if vendor.memory_resource is not None:
        raw = _integer(hard.get(f"limits.{vendor.memory_resource}"))
        if raw is not None:
            memory = raw * vendor.memory_scale
    cores: int | None = None
    if vendor.cores_resource is not None:
        cores = _integer(hard.get(f"limits.{vendor.cores_resource}"))
    return QuotaLimits(memory, cores)


def pod_quota_total(pod: PodSingleDevice, *, init_count: int) -> tuple[int, int]:
    """``(memory, cores)`` one vendor's device list of a pod counts against quota (collapsed)."""
    memory = cores = 0
    for summary in collapse_device_usage(pod, init_count=init_count):
        memory += summary.usedmem
        cores += summary.usedcores
    return memory, cores


class PodQuotaTally:
    """The collapsed total of the containers decided so far, extendable by one more container.

    ``total_with(devices, init=...)`` equals :func:`pod_quota_total` of the decided containers
    followed by one container holding ``devices``, but costs O(len(devices)): per device the
    init peak and the app sum are kept, and only the devices touched by the new container
    change their ``max(init peak, app sum)``.
    """

    __slots__ = ("_app", "_cores", "_memory", "_peak")

    def __init__(self, decided: Iterable[ContainerDevices], *, init_count: int) -> None:
        peak: dict[str, list[int]] = {}
        app: dict[str, list[int]] = {}
        for index, container in enumerate(decided):
            sums = _per_device(container)
            if index < init_count:
                for uuid, (mem, cores) in sums.items():
                    top = peak.setdefault(uuid, [0, 0])
                    top[0], top[1] = max(top[0], mem), max(top[1], cores)
            else:
                for uuid, (mem, cores) in sums.items():
                    held = app.setdefault(uuid, [0, 0])
                    held[0] += mem
                    held[1] += cores
        self._peak, self._app = peak, app
        self._memory = self._cores = 0
        for uuid in peak.keys() | app.keys():
            memory, cores = self._effective(uuid, 0, 0, init=False)
            self._memory += memory
            self._cores += cores

    def _effective(self, uuid: str, mem: int, cores: int, *, init: bool) -> tuple[int, int]:
        peak_mem, peak_cores = self._peak.get(uuid, (0, 0))
        app_mem, app_cores = self._app.get(uuid, (0, 0))
        if init:
            peak_mem, peak_cores = max(peak_mem, mem), max(peak_cores, cores)
        else:
            app_mem, app_cores = app_mem + mem, app_cores + cores
        return max(peak_mem, app_mem), max(peak_cores, app_cores)

    def total_with(self, devices: Iterable[ContainerDevice], *, init: bool) -> tuple[int, int]:
        memory, cores = self._memory, self._cores
        for uuid, (mem, used_cores) in _per_device(devices).items():
            before = self._effective(uuid, 0, 0, init=False)
            after = self._effective(uuid, mem, used_cores, init=init)
            memory += after[0] - before[0]
            cores += after[1] - before[1]
        return memory, cores


def _per_device(devices: Iterable[ContainerDevice]) -> dict[str, tuple[int, int]]:
    sums: dict[str, tuple[int, int]] = {}
    for device in devices:
        mem, cores = sums.get(device.uuid, (0, 0))
        sums[device.uuid] = (mem + device.usedmem, cores + device.usedcores)
    return sums


class QuotaLedger:
    """Running per-namespace, per-vendor sums of placed pods' memory and cores.

    The cache calls :meth:`add` when a pod's reservation appears and :meth:`remove` with the same
    summaries when it goes; both cost O(devices of the pod).
    """

    __slots__ = ("_used",)

    def __init__(self) -> None:
        self._used: dict[tuple[str, str], list[int]] = {}

    def add(self, namespace: str, usages: Iterable[DeviceUsageSummary]) -> None:
        self._shift(namespace, usages, 1)

    def remove(self, namespace: str, usages: Iterable[DeviceUsageSummary]) -> None:
        self._shift(namespace, usages, -1)

    def _shift(self, namespace: str, usages: Iterable[DeviceUsageSummary], sign: int) -> None:
        for summary in usages:
            key = (namespace, summary.type)
            entry = self._used.setdefault(key, [0, 0])
            entry[0] += sign * summary.usedmem
            entry[1] += sign * summary.usedcores
            if entry == [0, 0]:
                del self._used[key]

    def used(self, namespace: str, vendor: str) -> tuple[int, int]:
        """``(memory, cores)`` currently held in ``namespace`` on ``vendor``'s devices."""
        memory, cores = self._used.get((namespace, vendor), (0, 0))
        return memory, cores

    def view(self, namespace: str, vendor: str, limits: QuotaLimits) -> VendorQuota:
        """The :class:`VendorQuota` a filter for a pod in ``namespace`` should see."""
        memory, cores = self.used(namespace, vendor)
        return VendorQuota(limits=limits, used_memory=memory, used_cores=cores)
