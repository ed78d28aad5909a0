"""Does one container's request of one vendor fit these devices, and on which?

:func:`fit_request` is HAMi's NVIDIA ``Fit``.  It walks the policy-sorted device list **from
last to first** and checks each device in this order, counting the first failing check:

1. unhealthy → ``CardNotHealth``
2. UUID in the node's ``hami.io/device-cordon`` → ``CardCordoned``
3. request type is not the device's vendor, model fails ``use/nouse-gputype``, or the device
   mode is not in ``nvidia.com/vgpu-mode`` → ``CardTypeMismatch``
4. numa-bind: a device on another NUMA node than the previous accepted-so-far run restarts the
   run (the abandoned partial run counts as ``NumaNotFit``)
5. ``use/nouse-gpuuuid`` → ``CardUuidMismatch``
6. ``Count <= Used`` → ``CardTimeSlicingExhausted``
7. mutex policy and ``Used > 0`` → ``ExclusiveDeviceAllocateConflict``
8. (cores above 100 are clamped to 100)
9. namespace quota for the pod's hypothetical total → ``ResourceQuotaNotFit``
10. ``Totalmem − Usedmem < memreq`` → ``CardInsufficientMemory``
11. ``Totalcore − Usedcores < cores`` → ``CardInsufficientCore``
12. ``Totalcore == 100``, cores 100 and ``Used > 0`` → ``ExclusiveDeviceAllocateConflict``
13. ``Totalcore ≠ 0``, ``Usedcores == Totalcore`` and cores 0 → ``CardComputeUnitsExhausted``
14. MIG-mode device: the smallest registered profile that covers ``memreq`` and has a free
    placement (:func:`~hami_scheduler.core.mig.choose_instance`), else
    ``CardMigTopologyInfeasible``
15. accept ``{uuid, vendor word, memreq, cores}`` — on a MIG device the chosen profile's memory
    and cores, and the device is asked again (one container may hold several instances of one
    GPU) until it refuses; done when enough devices are accepted.

A MIG device whose slots are used beyond the reservations the node's pods hold on it, or a
device not in MIG mode that reservations name, is refused ``CardNotHealth`` (HAMi's rule: the
slices in use there are unknown, so no placement on it can be trusted).

``memreq`` is the request's MiB when given, else the percentage of this device's memory.  On
failure the reasons are reported by :func:`~hami_scheduler.core.reasons.format_reasons` over the
number of devices offered, plus ``AllocatedCardsInsufficientRequest`` = devices accepted; a MIG
refusal adds, after ``" — "``, which GPU could not place which profile and the free slice runs.

With the topology-aware policy every fitting device is collected first and the set is chosen by
pair scores (:mod:`.topology`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import PERCENTAGE_UNSET, ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.mig import (
    GpuOccupancy,
    HeldSlices,
    MigChoice,
    MigGpu,
    MigRefusal,
    choose_instance,
)
from hami_scheduler.core.plan import NO_SELECTORS, DeviceSelectors
from hami_scheduler.core.topology import PairScore, best_subset, worst_connected
from hami_scheduler.core.usage.device import MIG_MODE, DeviceUsage
from hami_scheduler.core.usage.node import NO_MIG, NO_MIG_GPUS
from hami_scheduler.core.vendors.context import NO_VENDOR_CONTEXT, VendorContext

__all__ = [
    "MAX_CORES",
    "FitContext",
    "FitResult",
    "QuotaProbe",
    "clamped_cores",
    "device_refusal",
    "fit_request",
    "request_memory",
]

MAX_CORES: Final = 100

QuotaProbe = Callable[[Sequence[ContainerDevice], ContainerDevice], bool]
"""``(devices accepted so far for this container, candidate) -> fits the namespace quota``."""


def _no_pairs(uuid: str, peer: str) -> int:
    return 0


@dataclass(frozen=True, slots=True)
class FitContext:
    """Everything besides the devices and the request that a fit depends on."""

    selectors: DeviceSelectors = NO_SELECTORS
    mutex: bool = False
    topology: bool = False
    cordon: frozenset[str] = frozenset()
    pair_score: PairScore = _no_pairs
    quota: QuotaProbe | None = None
    mig_gpus: Mapping[str, MigGpu] = field(default_factory=lambda: NO_MIG_GPUS)
    """The node's MIG-mode GPUs (:attr:`~hami_scheduler.core.usage.node.NodeLayout.mig_gpus`)."""
    mig: Mapping[str, GpuOccupancy] = field(default_factory=lambda: NO_MIG)
    """The slices held now: the node's pods', plus those this pod's earlier containers took."""
    vendor: VendorContext = NO_VENDOR_CONTEXT
    """Pod and node facts only non-NVIDIA vendor fits read (:mod:`.vendors`)."""


@dataclass(frozen=True, slots=True)
class FitResult:
    """Success with the chosen devices, or failure with HAMi's reason text."""

    ok: bool
    devices: tuple[ContainerDevice, ...] = ()
    reason: str = ""
    instances: tuple[MigChoice | None, ...] = ()
    """With any MIG device taken: per entry of ``devices``, its MIG instance (None elsewhere)."""


def request_memory(dev: DeviceUsage, request: ContainerDeviceRequest) -> int:
    """MiB the request takes on ``dev``: its own MiB, else its percentage of the device."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentagereq != PERCENTAGE_UNSET:
        return dev.totalmem * request.mem_percentagereq // 100
    return 0


def clamped_cores(request: ContainerDeviceRequest) -> int:
    """Cores asked per device, at most 100 (HAMi clamps rather than refusing)."""
    return min(request.coresreq, MAX_CORES)


def _early_refusal(dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext) -> str:
    """Checks 1-3 (before the NUMA run bookkeeping); ``""`` when the device passes them."""
    if not dev.health:
        return why.CARD_NOT_HEALTH
    if dev.uuid in ctx.cordon:
        return why.CARD_CORDONED
    if request.type != dev.vendor:
        return why.CARD_TYPE_MISMATCH
    selectors = ctx.selectors
    if selectors.filters_type and not selectors.type_ok(dev.type, dev.mode):
        return why.CARD_TYPE_MISMATCH
    return ""


def _before_quota(dev: DeviceUsage, ctx: FitContext) -> str:
    """Checks 5-7."""
    if ctx.selectors.filters_uuid and not ctx.selectors.uuid_ok(dev.uuid):
        return why.CARD_UUID_MISMATCH
    if dev.count <= dev.used:
        return why.CARD_TIME_SLICING_EXHAUSTED
    if ctx.mutex and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    return ""


def _after_quota(dev: DeviceUsage, memreq: int, cores: int) -> str:
    """Checks 10-14."""
    if dev.totalmem - dev.usedmem < memreq:
        return why.CARD_INSUFFICIENT_MEMORY
    if dev.totalcore - dev.usedcores < cores:
        return why.CARD_INSUFFICIENT_CORE
    if dev.totalcore == MAX_CORES and cores == MAX_CORES and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if dev.totalcore != 0 and dev.usedcores == dev.totalcore and cores == 0:
        return why.CARD_COMPUTE_UNITS_EXHAUSTED
    return ""


def _unknown_slices(dev: DeviceUsage, ctx: FitContext) -> bool:
    """Slices in use on ``dev`` that no reservation accounts for (see the module doc)."""
    occupancy = ctx.mig.get(dev.uuid)
    if dev.mode != MIG_MODE:
        return occupancy is not None
    return dev.uuid not in ctx.mig_gpus or dev.used > (
        0 if occupancy is None else len(occupancy.held)
    )


def device_refusal(
    dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext = FitContext()
) -> str:
    """The first failing check for ``dev`` alone (no NUMA run, no quota); ``""`` if it fits."""
    memreq = request_memory(dev, request)
    refusal = (
        _early_refusal(dev, request, ctx)
        or _before_quota(dev, ctx)
        or _after_quota(dev, memreq, clamped_cores(request))
    )
    if refusal or (dev.mode != MIG_MODE and not ctx.mig):
        return refusal
    if _unknown_slices(dev, ctx):
        return why.CARD_NOT_HEALTH
    if dev.mode == MIG_MODE:
        gpu = ctx.mig_gpus[dev.uuid]
        outcome = choose_instance(gpu, ctx.mig.get(dev.uuid, GpuOccupancy(dev.uuid)), memreq)
        if isinstance(outcome, MigRefusal):
            return outcome.reason
    return ""


@dataclass(slots=True)
class _MigWalk:
    """What one MIG device gave a container: entries, instances, and why it stopped."""

    devices: list[ContainerDevice]
    instances: list[MigChoice]
    refusal: str = ""
    detail: MigRefusal | None = None


def _take_instances(
    dev: DeviceUsage,
    request: ContainerDeviceRequest,
    ctx: FitContext,
    taken: Sequence[ContainerDevice],
    want: int,
) -> _MigWalk:
    """Ask MIG device ``dev`` for instances until it refuses or ``want`` entries are taken.

    Every check runs again on the device as charged so far, so the second instance on a GPU
    sees the first one's slot, memory, cores and slices.
    """
    walk = _MigWalk([], [])
    if _unknown_slices(dev, ctx):
        walk.refusal = why.CARD_NOT_HEALTH
        return walk
    gpu = ctx.mig_gpus[dev.uuid]
    occupancy = ctx.mig.get(dev.uuid, GpuOccupancy(dev.uuid))
    cores = clamped_cores(request)
    current = dev
    while len(taken) + len(walk.devices) < want:
        memreq = request_memory(current, request)
        refusal = _before_quota(current, ctx)
        if not refusal and ctx.quota is not None:
            candidate = ContainerDevice(dev.uuid, request.type, memreq, cores)
            if not ctx.quota([*taken, *walk.devices], candidate):
                refusal = why.RESOURCE_QUOTA_NOT_FIT
        refusal = refusal or _after_quota(current, memreq, cores)
        if refusal:
            walk.refusal = refusal
            return walk
        outcome = choose_instance(gpu, occupancy, memreq)
        if isinstance(outcome, MigRefusal):
            walk.refusal, walk.detail = outcome.reason, outcome
            return walk
        walk.devices.append(
            ContainerDevice(dev.uuid, request.type, outcome.usedmem, outcome.usedcores)
        )
        walk.instances.append(outcome)
        current = current.shifted(1, outcome.usedmem, outcome.usedcores)
        occupancy = occupancy.with_held(HeldSlices("", outcome.profile.name, outcome.placement))
    return walk


def fit_request(
    devices: Sequence[DeviceUsage],
    request: ContainerDeviceRequest,
    ctx: FitContext = FitContext(),
) -> FitResult:
    """Pick ``request.nums`` devices from ``devices`` (already in policy order)."""
    want = request.nums
    if want <= 0:
        return FitResult(ok=True)
    cores = clamped_cores(request)
    numa_bind = ctx.selectors.numa_bind
    held_mig = ctx.mig
    # Decided once per fit: nodes without MIG pay nothing per device for it.
    mig_here = bool(ctx.mig_gpus) or bool(held_mig)
    counts: dict[str, int] = {}
    taken: list[ContainerDevice] = []
    instances: list[MigChoice | None] = []
    details: list[MigRefusal] = []
    run_numa: int | None = None
    for dev in reversed(devices):
        refusal = _early_refusal(dev, request, ctx)
        if not refusal:
            if numa_bind and dev.numa != run_numa:
                if taken and not ctx.topology:
                    counts[why.NUMA_NOT_FIT] = counts.get(why.NUMA_NOT_FIT, 0) + len(taken)
                run_numa = dev.numa
                taken = []
                instances = []
            if mig_here and dev.mode == MIG_MODE:
                walk = _take_instances(dev, request, ctx, taken, want)
                if walk.detail is not None:
                    details.append(walk.detail)
                if not walk.devices:
                    counts[walk.refusal] = counts.get(walk.refusal, 0) + 1
                    continue
                taken.extend(walk.devices)
                instances.extend(walk.instances)
                if len(taken) >= want:
                    return _mig_result(taken, instances, want)
                continue
            if mig_here and dev.uuid in held_mig:
                # Reservations name a GPU that is not in MIG mode: its slices are unknown.
                counts[why.CARD_NOT_HEALTH] = counts.get(why.CARD_NOT_HEALTH, 0) + 1
                continue
            memreq = request_memory(dev, request)
            refusal = _before_quota(dev, ctx)
            if not refusal and ctx.quota is not None:
                candidate = ContainerDevice(dev.uuid, request.type, memreq, cores)
                if not ctx.quota(taken, candidate):
                    refusal = why.RESOURCE_QUOTA_NOT_FIT
            refusal = refusal or _after_quota(dev, memreq, cores)
            if not refusal and dev.mode == MIG_MODE:
                refusal = why.CARD_NOT_HEALTH  # a MIG device whose profiles nobody registered
        if refusal:
            counts[refusal] = counts.get(refusal, 0) + 1
            continue
        taken.append(ContainerDevice(dev.uuid, request.type, memreq, cores))
        if not mig_here:
            if not ctx.topology and len(taken) == want:
                return FitResult(ok=True, devices=tuple(taken))
            continue
        instances.append(None)
        if not ctx.topology and len(taken) == want:
            return _mig_result(taken, instances, want)
    if ctx.topology and len(taken) >= want:
        if any(instances):
            return _mig_result(taken, instances, want)
        return FitResult(ok=True, devices=_by_topology(taken, want, ctx.pair_score))
    if taken:
        counts[why.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(taken)
    reason = why.format_reasons(counts, len(devices))
    if details:
        reason += " — " + "; ".join(detail.detail() for detail in details)
    return FitResult(ok=False, reason=reason)


def _mig_result(
    taken: Sequence[ContainerDevice], instances: Sequence[MigChoice | None], want: int
) -> FitResult:
    """The first ``want`` entries; their instances only when some entry is a MIG one."""
    chosen = tuple(instances[:want])
    return FitResult(
        ok=True,
        devices=tuple(taken[:want]),
        instances=chosen if any(chosen) else (),
    )


def _by_topology(
    taken: list[ContainerDevice], want: int, score: PairScore
) -> tuple[ContainerDevice, ...]:
    if len(taken) == want:
        return tuple(taken)
    uuids = [dev.uuid for dev in taken]
    if want == 1:
        return (taken[worst_connected(uuids, score)],)
    return tuple(taken[position] for position in best_subset(uuids, want, score))
