"""Biren GPUs (``Biren``): count-only — healthy, the pod's type and UUID selectors, a slot
free, and under the mutex policy idle; devices are taken from the end of the policy order and
granted no memory and the asked cores (Biren requests ask 0).  No node score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.standard import count_only_walk

__all__ = ["BIREN", "fit"]

BIREN: Final = "Biren"


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """Biren's fit (see the module doc)."""
    if request.nums <= 0:
        return FitResult(ok=True)
    return count_only_walk(devices, request, ctx).result(request.nums)
