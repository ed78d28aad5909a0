"""Devices of vendors whose plugin registers no annotation: synthesised from node capacity.

HAMi builds these vendors' device lists from the node's ``status.capacity`` (its
``GetNodeDevices``): Cambricon MLU, Moore Threads and MetaX whole GPUs.  The ids are HAMi's
(``<node>-cambricon-mlu-<i>``, ``<node>-mthreads-<i>``, ``<node>-metax-<i>``), so pod annotations
written by HAMi name the same devices.

Each function takes the node name and its capacity as integers (resource name → units; a name
absent means 0) and returns the devices — none when the count resource is 0 — or raises
:class:`~hami_protocol.errors.ValidationError` naming the resource when the count is advertised
without the resource the sizes are derived from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from hami_protocol.errors import ValidationError
from hami_protocol.node.registry import DeviceInfo

__all__ = [
    "CAMBRICON_MEMORY_UNIT_MIB",
    "METAX_GPU_MEMORY_MIB",
    "MTHREADS_CORES_PER_GPU",
    "MTHREADS_MEMORY_UNIT_MIB",
    "CapacitySynth",
    "cambricon_devices",
    "metax_gpu_devices",
    "mthreads_devices",
]

CapacitySynth = Callable[[str, Mapping[str, int]], tuple[DeviceInfo, ...]]
"""``(node name, capacity) -> devices`` with the vendor's resource names bound."""

CAMBRICON_MEMORY_UNIT_MIB: Final = 256
MTHREADS_MEMORY_UNIT_MIB: Final = 512
MTHREADS_CORES_PER_GPU: Final = 16
METAX_GPU_MEMORY_MIB: Final = 65536


def _required(capacity: Mapping[str, int], name: str | None, count_resource: str) -> int:
    value = capacity.get(name, 0) if name else 0
    if value <= 0:
        raise ValidationError(
            name or count_resource,
            value,
            f"node advertises {count_resource} without {name or 'a sizing resource'}",
        )
    return value


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def cambricon_devices(
    node: str,
    capacity: Mapping[str, int],
    *,
    count_resource: str,
    memory_resource: str | None,
    core_resource: str | None,
) -> tuple[DeviceInfo, ...]:
    """ceil(vcore/100) MLUs of 100 shares each; memory split evenly by cores (256 MiB units)."""
    if capacity.get(count_resource, 0) <= 0:
        return ()
    cores = _required(capacity, core_resource, count_resource)
    memory = _required(capacity, memory_resource, count_resource)
    devmem = memory * CAMBRICON_MEMORY_UNIT_MIB * 100 // cores
    return tuple(
        DeviceInfo(
            id=f"{node}-cambricon-mlu-{i}",
            index=i,
            count=100,
            devmem=devmem,
            devcore=100,
            type="MLU",
            numa=0,
            health=True,
        )
        for i in range(_ceil_div(cores, 100))
    )


def mthreads_devices(
    node: str,
    capacity: Mapping[str, int],
    *,
    count_resource: str,
    memory_resource: str | None,
    core_resource: str | None,
) -> tuple[DeviceInfo, ...]:
    """ceil(cores/16) GPUs of 16 cores each; memory split evenly by cores (512 MiB units)."""
    if capacity.get(count_resource, 0) <= 0:
        return ()
    cores = _required(capacity, core_resource, count_resource)
    memory = _required(capacity, memory_resource, count_resource)
    devmem = memory * MTHREADS_MEMORY_UNIT_MIB * MTHREADS_CORES_PER_GPU // cores
    return tuple(
        DeviceInfo(
            id=f"{node}-mthreads-{i}",
            index=i,
            count=100,
            devmem=devmem,
            devcore=MTHREADS_CORES_PER_GPU,
            type="Mthreads",
            numa=0,
            health=True,
        )
        for i in range(_ceil_div(cores, MTHREADS_CORES_PER_GPU))
    )


def metax_gpu_devices(
    node: str, capacity: Mapping[str, int], *, count_resource: str
) -> tuple[DeviceInfo, ...]:
    """One exclusive 64 GiB GPU per unit of the count resource."""
    return tuple(
        DeviceInfo(
            id=f"{node}-metax-{i}",
            index=i,
            count=1,
            devmem=METAX_GPU_MEMORY_MIB,
            devcore=100,
            type="Metax-GPU",
            numa=0,
            health=True,
        )
        for i in range(max(capacity.get(count_resource, 0), 0))
    )
