"""AMD GPUs (``AMD``): memory in MiB and compute units (CUs) by percentage.

From the end of the policy order a GPU is refused for ``CardNotHealth``, ``CardTypeMismatch``
(vendor or the ``amd.com/use-gputype``/``nouse-gputype`` lists), ``CardUuidMismatch``,
``CardTimeSlicingExhausted`` (``count <= used``), ``ExclusiveDeviceAllocateConflict`` (mutex and
used), ``CardInsufficientMemory`` or ``CardInsufficientCore``.  The memory asked is the request's
MiB, or the whole GPU when it asks none; the cores asked are ``coresreq`` percent of the GPU's
CUs (``totalcore``), at least 1 and at most all of them.  A grant names the GPU's product type
(``AMD_Instinct_MI300X_VF``), not the vendor word, and its cores in CUs.  No node score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import Tally, selected_out
from hami_scheduler.core.vendors.standard import Walk

__all__ = ["AMD", "compute_units", "fit"]

AMD: Final = "AMD"


def compute_units(dev: DeviceUsage, percent: int) -> int:
    """CUs of ``dev`` that ``percent`` asks: ``totalcore × percent / 100`` within 1…totalcore."""
    return min(max(dev.totalcore * percent // 100, 1), dev.totalcore)


def _refusal(dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext) -> str:
    refusal = selected_out(dev, request, ctx)
    if refusal:
        return refusal
    if dev.count <= dev.used:
        return why.CARD_TIME_SLICING_EXHAUSTED
    if ctx.mutex and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    memreq = request.memreq if request.memreq > 0 else dev.totalmem
    if dev.totalmem - dev.usedmem < memreq:
        return why.CARD_INSUFFICIENT_MEMORY
    if dev.totalcore - dev.usedcores < compute_units(dev, request.coresreq):
        return why.CARD_INSUFFICIENT_CORE
    return ""


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """AMD's fit (see the module doc)."""
    if request.nums <= 0:
        return FitResult(ok=True)
    walk = Walk(Tally(len(devices)))
    for dev in reversed(devices):
        refusal = _refusal(dev, request, ctx)
        if refusal:
            walk.tally.add(refusal)
            continue
        memreq = request.memreq if request.memreq > 0 else dev.totalmem
        granted = ContainerDevice(dev.uuid, dev.type, memreq, compute_units(dev, request.coresreq))
        walk.taken.append((dev, granted))
        if len(walk.taken) == request.nums:
            break
    return walk.result(request.nums)
