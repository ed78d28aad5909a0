"""Builders for the vendor fit tests: a vendor's device or request in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import PERCENTAGE_UNSET, ContainerDeviceRequest
from hami_scheduler.core import DeviceSelectors, FitContext
from hami_scheduler.core.usage.device import DeviceUsage

from ..core_helpers import dev


def vdev(
    vendor: str,
    index: int,
    *,
    uuid: str | None = None,
    count: int = 1,
    mem: int = 100,
    cores: int = 100,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    health: bool = True,
    model: str | None = None,
    mode: str = "hami-core",
    numa: int = 0,
    custom: Mapping[str, str] | None = None,
) -> DeviceUsage:
    return dev(
        uuid if uuid is not None else f"{vendor}-{index}",
        vendor=vendor,
        model=model if model is not None else vendor,
        index=index,
        numa=numa,
        mode=mode,
        health=health,
        count=count,
        mem=mem,
        cores=cores,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        custom=custom,
    )


def vreq(
    vendor: str, nums: int = 1, *, mem: int = 0, pct: int = PERCENTAGE_UNSET, cores: int = 0
) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(
        nums=nums, type=vendor, memreq=mem, mem_percentagereq=pct, coresreq=cores
    )


def ctx_of(
    *,
    mutex: bool = False,
    use_uuids: Sequence[str] = (),
    nouse_uuids: Sequence[str] = (),
    use_types: Sequence[str] = (),
    nouse_types: Sequence[str] = (),
) -> FitContext:
    return FitContext(
        selectors=DeviceSelectors(
            use_types=tuple(use_types),
            nouse_types=tuple(nouse_types),
            use_uuids=tuple(use_uuids),
            nouse_uuids=tuple(nouse_uuids),
        ),
        mutex=mutex,
    )


def uuids_of(devices: Sequence[ContainerDevice]) -> list[str]:
    return [granted.uuid for granted in devices]
