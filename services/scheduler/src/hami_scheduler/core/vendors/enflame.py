"""Enflame GCUs: whole GCUs (``GCU``) and DRS slices of one (``Enflame``).

Whole GCU (:func:`fit_gcu`): exclusive.  From the end of the policy order a GCU is refused for
``CardNotHealth``, ``CardTypeMismatch`` (vendor or type selectors) or, when any pod holds it,
``ExclusiveDeviceAllocateConflict``; UUID selectors are not consulted (HAMi does not).  A GCU is
granted whole (its memory and cores).

DRS (:func:`fit`): a request is always one GCU and names a *profile* ``"<S>g.<M>gb"`` of the
node (:attr:`VendorContext.drs_profiles <.context.VendorContext.drs_profiles>`), whose core share
is ``ceil(S × 100 / largest S)`` percent:

* *direct* (``mem_percentagereq`` 0, ``enflame.com/drs-gcu``): ``memreq`` is a slice count S and
  the profile with exactly S slices is taken;
* *spec* (``mem_percentagereq`` −1, ``enflame.com/gcu-memory``/``-core``): ``memreq`` is GB —
  or MiB, rounded up to GB, when above twice the largest profile's GB — and the first profile
  in (slices, GB) order with at least that memory and at least ``coresreq`` percent is taken;
* no such profile → ``ModeNotFit`` counted once over the node's GCUs.

Then from the end of the policy order a GCU is refused for ``CardNotHealth``,
``CardTypeMismatch``, ``CardUuidMismatch``, ``CardTimeSlicingExhausted`` (fewer free slices than
the profile's — HAMi checks only that one is free, which can over-commit the GCU's slices),
``ExclusiveDeviceAllocateConflict`` (mutex and used), ``CardInsufficientMemory`` (profile GB ×
1024) or ``CardInsufficientCore`` (profile percent).  The first GCU passing all is granted the
profile's MiB and percent.  Its usage counts the profile's slices as used slots; which profile
a grant stands for is :func:`choose_profile` of the same request (the choice depends on the
request and the node's profiles only), or :func:`granted_profile` of the grant.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import Tally, selected_out, type_refusal
from hami_scheduler.core.vendors.context import DrsProfile

__all__ = [
    "DIRECT",
    "ENFLAME_DRS",
    "GCU",
    "SPEC",
    "choose_profile",
    "core_percent",
    "fit",
    "fit_gcu",
    "granted_profile",
    "parse_profile",
]

GCU: Final = "GCU"
ENFLAME_DRS: Final = "Enflame"
DIRECT: Final = 0
"""``mem_percentagereq`` of a request by slice count."""
SPEC: Final = -1
"""``mem_percentagereq`` of a request by memory and core percent."""
_MIB_PER_GB: Final = 1024
_PROFILE_NAME: Final = re.compile(r"\s*(\d+)g\.(\d+)gb\s*")


def parse_profile(name: str, profile_id: str) -> DrsProfile | None:
    """The profile named ``"<S>g.<M>gb"`` (case-insensitive); ``None`` for other names."""
    match = _PROFILE_NAME.fullmatch(name.lower())
    if match is None:
        return None
    slices, memory_gb = int(match[1]), int(match[2])
    if slices <= 0 or memory_gb <= 0:
        return None
    return DrsProfile(name, profile_id, slices, memory_gb)


def _ordered(profiles: Sequence[DrsProfile]) -> list[DrsProfile]:
    return sorted(profiles, key=lambda p: (p.slices, p.memory_gb, p.name))


def core_percent(profile: DrsProfile, profiles: Sequence[DrsProfile]) -> int:
    """The profile's share of a GCU's compute, percent."""
    largest = max(p.slices for p in profiles)
    return max(math.ceil(profile.slices * 100 / largest), 1)


def choose_profile(
    profiles: Sequence[DrsProfile], request: ContainerDeviceRequest
) -> DrsProfile | None:
    """The profile a DRS request asks for (see the module doc); ``None`` when none serves."""
    ordered = _ordered(profiles)
    if not ordered:
        return None
    if request.mem_percentagereq == DIRECT:
        return next((p for p in ordered if p.slices == request.memreq), None)
    largest_gb = ordered[-1].memory_gb
    memory_gb = request.memreq
    if memory_gb > 2 * largest_gb:
        memory_gb = -(-memory_gb // _MIB_PER_GB)
    for profile in ordered:
        if memory_gb > 0 and profile.memory_gb < memory_gb:
            continue
        if request.coresreq > 0 and core_percent(profile, ordered) < request.coresreq:
            continue
        return profile
    return None


def granted_profile(granted: ContainerDevice, profiles: Sequence[DrsProfile]) -> DrsProfile | None:
    """The profile a DRS grant stands for (by its MiB and percent), first in profile order."""
    for profile in _ordered(profiles):
        if (
            profile.memory_gb * _MIB_PER_GB == granted.usedmem
            and core_percent(profile, profiles) == granted.usedcores
        ):
            return profile
    return None


def _drs_refusal(
    dev: DeviceUsage,
    request: ContainerDeviceRequest,
    ctx: FitContext,
    *,
    slices: int,
    mem: int,
    cores: int,
) -> str:
    refusal = selected_out(dev, request, ctx)
    if refusal:
        return refusal
    if dev.count - dev.used < slices:
        return why.CARD_TIME_SLICING_EXHAUSTED
    if ctx.mutex and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if dev.totalmem - dev.usedmem < mem:
        return why.CARD_INSUFFICIENT_MEMORY
    if dev.totalcore > 0 and dev.totalcore - dev.usedcores < cores:
        return why.CARD_INSUFFICIENT_CORE
    return ""


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """A DRS slice profile on one GCU (see the module doc)."""
    if request.nums <= 0:
        return FitResult(ok=True)
    tally = Tally(len(devices))
    profiles = ctx.vendor.drs_profiles
    profile = choose_profile(profiles, request)
    if profile is None:
        tally.add(why.MODE_NOT_FIT)
        return tally.failure()
    mem = profile.memory_gb * _MIB_PER_GB
    cores = core_percent(profile, profiles)
    for dev in reversed(devices):
        refusal = _drs_refusal(dev, request, ctx, slices=profile.slices, mem=mem, cores=cores)
        if refusal:
            tally.add(refusal)
            continue
        return FitResult(ok=True, devices=(ContainerDevice(dev.uuid, request.type, mem, cores),))
    return tally.failure()


def fit_gcu(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """Whole, exclusive GCUs (see the module doc)."""
    want = request.nums
    if want <= 0:
        return FitResult(ok=True)
    tally = Tally(len(devices))
    taken: list[ContainerDevice] = []
    for dev in reversed(devices):
        refusal = why.CARD_NOT_HEALTH if not dev.health else type_refusal(dev, request, ctx)
        if not refusal and dev.used > 0:
            refusal = why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        if refusal:
            tally.add(refusal)
            continue
        taken.append(ContainerDevice(dev.uuid, request.type, dev.totalmem, dev.totalcore))
        if len(taken) == want:
            return FitResult(ok=True, devices=tuple(taken))
    if taken:
        tally.add(why.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, len(taken))
    return tally.failure()
