"""Moore Threads GPUs (``Mthreads``): the standard loop over a per-device share of the request,
with the same-device custom filter.

A request states the container's total memory (×512 MiB units already resolved to MiB) and
cores (16 per GPU); each device is asked ``memreq // nums`` MiB and ``coresreq // nums`` cores.
The custom filter ``CardNotFoundCustomFilterRule`` refuses a GPU other than the one every
earlier container of the pod was given (:attr:`VendorContext.pod_uuids
<.context.VendorContext.pod_uuids>`).  No node score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.metax_gpu import on_pod_device
from hami_scheduler.core.vendors.standard import standard_fit

__all__ = ["MTHREADS", "fit", "per_device"]

MTHREADS: Final = "Mthreads"


def per_device(request: ContainerDeviceRequest) -> ContainerDeviceRequest:
    """The request one of its ``nums`` devices is asked for."""
    if request.nums <= 1:
        return request
    return dataclasses.replace(
        request,
        memreq=request.memreq // request.nums,
        coresreq=request.coresreq // request.nums,
    )


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """The standard loop over :func:`per_device` with the same-device custom filter."""
    pod_uuids = ctx.vendor.pod_uuids
    share = per_device(request)
    if not pod_uuids:
        return standard_fit(devices, share, ctx)
    return standard_fit(
        devices, share, ctx, custom_filter=lambda dev: on_pod_device(dev, pod_uuids)
    )
