"""HAMi's standard per-device loop, as the vendors that share it need it.

:func:`~hami_scheduler.core.fit.fit_request` is the NVIDIA form (cordon, quota, MIG); this is
the form Ascend, Metax-GPU and Mthreads use, with the two hooks they add: a total core other
than the device's (Ascend hami-core counts a device as 100) and a custom filter run last
(``CardNotFoundCustomFilterRule``), and the choice to collect every fitting device instead of
stopping at ``nums`` (Ascend topology).  Walking from the end of the policy order, a device is
refused for the first of: ``CardNotHealth``, ``CardTypeMismatch``, (numa-bind: a new NUMA node
restarts the run; the abandoned devices count ``NumaNotFit``), ``CardUuidMismatch``,
``CardTimeSlicingExhausted`` (``count <= used``), ``ExclusiveDeviceAllocateConflict`` (mutex and
used), ``CardInsufficientMemory``, ``CardInsufficientCore``, ``ExclusiveDeviceAllocateConflict``
(a 100-core total, 100 cores asked and used), ``CardComputeUnitsExhausted`` (no core asked of a
device whose cores are all held), ``CardNotFoundCustomFilterRule``.  Cores asked above 100 are
clamped to 100; memory is the request's MiB or its percentage of the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult, clamped_cores, request_memory
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import (
    Tally,
    selected_out,
    type_refusal,
)

__all__ = ["Walk", "count_only_walk", "standard_fit", "standard_walk"]

_FULL: int = 100


@dataclass(slots=True)
class Walk:
    """The devices a walk accepted, in walk order, with the refusals it counted."""

    tally: Tally
    taken: list[tuple[DeviceUsage, ContainerDevice]] = field(default_factory=list)

    def result(self, want: int) -> FitResult:
        """Success with the first ``want`` accepted devices, or HAMi's failure text."""
        if len(self.taken) >= want:
            return FitResult(ok=True, devices=tuple(granted for _, granted in self.taken[:want]))
        if self.taken:
            self.tally.add(why.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, len(self.taken))
        return self.tally.failure()


def _refusal(dev: DeviceUsage, ctx: FitContext, memreq: int, cores: int, total: int) -> str:
    if ctx.selectors.filters_uuid and not ctx.selectors.uuid_ok(dev.uuid):
        return why.CARD_UUID_MISMATCH
    if dev.count <= dev.used:
        return why.CARD_TIME_SLICING_EXHAUSTED
    if ctx.mutex and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if dev.totalmem - dev.usedmem < memreq:
        return why.CARD_INSUFFICIENT_MEMORY
    if total - dev.usedcores < cores:
        return why.CARD_INSUFFICIENT_CORE
    if total == _FULL and cores == _FULL and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if total != 0 and dev.usedcores == total and cores == 0:
        return why.CARD_COMPUTE_UNITS_EXHAUSTED
    return ""


def standard_walk(
    devices: Sequence[DeviceUsage],
    request: ContainerDeviceRequest,
    ctx: FitContext,
    *,
    total_core: int | None = None,
    custom_filter: Callable[[DeviceUsage], bool] | None = None,
    collect_all: bool = False,
) -> Walk:
    """Walk ``devices`` from the end; stop at ``request.nums`` unless ``collect_all``."""
    walk = Walk(Tally(len(devices)))
    cores = clamped_cores(request)
    numa_bind = ctx.selectors.numa_bind
    run_numa: int | None = None
    for dev in reversed(devices):
        refusal = why.CARD_NOT_HEALTH if not dev.health else type_refusal(dev, request, ctx)
        if refusal:
            walk.tally.add(refusal)
            continue
        if numa_bind and dev.numa != run_numa:
            if walk.taken and not collect_all:
                walk.tally.add(why.NUMA_NOT_FIT, len(walk.taken))
            run_numa = dev.numa
            walk.taken = []
        memreq = request_memory(dev, request)
        total = dev.totalcore if total_core is None else total_core
        refusal = _refusal(dev, ctx, memreq, cores, total)
        if not refusal and custom_filter is not None and not custom_filter(dev):
            refusal = why.CARD_NOT_FOUND_CUSTOM_FILTER_RULE
        if refusal:
            walk.tally.add(refusal)
            continue
        walk.taken.append((dev, ContainerDevice(dev.uuid, request.type, memreq, cores)))
        if not collect_all and len(walk.taken) == request.nums:
            break
    return walk


def standard_fit(
    devices: Sequence[DeviceUsage],
    request: ContainerDeviceRequest,
    ctx: FitContext,
    *,
    custom_filter: Callable[[DeviceUsage], bool] | None = None,
) -> FitResult:
    """The standard loop's result for ``request.nums`` devices."""
    if request.nums <= 0:
        return FitResult(ok=True)
    walk = standard_walk(devices, request, ctx, custom_filter=custom_filter)
    return walk.result(request.nums)


def _exclusive_conflict(dev: DeviceUsage, extra: Callable[[DeviceUsage], bool] | None) -> bool:
    return dev.used > 0 or (extra is not None and extra(dev))


def count_only_walk(
    devices: Sequence[DeviceUsage],
    request: ContainerDeviceRequest,
    ctx: FitContext,
    *,
    exclusive_conflict: Callable[[DeviceUsage], bool] | None = None,
    collect_all: bool = False,
) -> Walk:
    """The loop of vendors that hand out whole slots (Biren, Vastai): from the end, a device is
    refused for ``CardNotHealth``, ``CardTypeMismatch``, ``CardUuidMismatch``,
    ``CardTimeSlicingExhausted`` or — under mutex, when used or ``exclusive_conflict`` says so —
    ``ExclusiveDeviceAllocateConflict``; each taken device is granted no memory and the asked
    cores."""
    walk = Walk(Tally(len(devices)))
    for dev in reversed(devices):
        refusal = selected_out(dev, request, ctx)
        if not refusal and dev.count <= dev.used:
            refusal = why.CARD_TIME_SLICING_EXHAUSTED
        if not refusal and ctx.mutex and _exclusive_conflict(dev, exclusive_conflict):
            refusal = why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        if refusal:
            walk.tally.add(refusal)
            continue
        walk.taken.append((dev, ContainerDevice(dev.uuid, request.type, 0, request.coresreq)))
        if not collect_all and len(walk.taken) == request.nums:
            break
    return walk
