"""Where each vendor's devices come from, when not from a register annotation.

HAMi synthesises the devices of Cambricon MLU, Moore Threads and MetaX whole GPUs from node
capacity (:mod:`hami_protocol.node.capacity_devices`).  :func:`capacity_synth` binds a vendor
row's resource names to its synthesis function; vendors with a register annotation, and vendors
without either source, get ``None``.
"""

from __future__ import annotations

from functools import cache, partial

from hami_protocol.node.capacity_devices import (
    CapacitySynth,
    cambricon_devices,
    metax_gpu_devices,
    mthreads_devices,
)
from hami_protocol.vendor.table import METAX_GPU, MLU, MTHREADS, Vendor

__all__ = ["capacity_synth"]


@cache
def capacity_synth(vendor: Vendor) -> CapacitySynth | None:
    """The capacity synthesis of ``vendor`` with its configured resource names, if it has one."""
    if vendor.register_key is not None:
        return None
    word = vendor.common_word
    if word == MLU:
        return partial(
            cambricon_devices,
            count_resource=vendor.count_resource,
            memory_resource=vendor.memory_resource,
            core_resource=vendor.cores_resource,
        )
    if word == MTHREADS:
        return partial(
            mthreads_devices,
            count_resource=vendor.count_resource,
            memory_resource=vendor.memory_resource,
            core_resource=vendor.cores_resource,
        )
    if word == METAX_GPU:
        return partial(metax_gpu_devices, count_resource=vendor.count_resource)
    return None
