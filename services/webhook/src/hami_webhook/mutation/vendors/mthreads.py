"""Moore Threads' admission rule (HAMi's ``pkg/device/mthreads``), pure.

A count ≤ 0 is refused ``<count> must be greater than 0``; a count above 1 → cores
``16 × count``, memory ``96 × count`` (``96`` = ``memoryPerCard[0]``) and the pod annotation
``mthreads.com/request-gpu-num``; a count of 1 without memory → 16 / 96; a memory that is not a
legal slice (2, 4, 8, 16, 32, 64 or a card size) is refused ``sGPU memory request value is
invalid, valid values are [2, 4, 8, 16, 32, 64, 96]``.
"""

from __future__ import annotations

from typing import Any, Final

from hami_protocol import keys
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import set_limit, value
from hami_webhook.mutation.vendors.rule_set import (
    PodEdits,
    VendorRuleError,
    container_name,
    read_count,
)

__all__ = [
    "MTHREADS_CORES_PER_CARD",
    "MTHREADS_SLICES",
    "apply_mthreads",
    "mthreads_legal_memory",
]

MTHREADS_CORES_PER_CARD: Final = 16
MTHREADS_SLICES: Final = (2, 4, 8, 16, 32, 64)
"""Moore Threads memory slices below a whole card (512 MiB units)."""


def mthreads_legal_memory(memory_per_card: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted({*MTHREADS_SLICES, *memory_per_card}))


def apply_mthreads(
    ctr: dict[str, Any], vendor: Vendor, memory_per_card: tuple[int, ...], edits: PodEdits
) -> bool:
    """Apply the rule to ``ctr``; whether it asks for Moore Threads GPUs."""
    where, count = read_count(ctr, vendor)
    if count is None:
        return False
    container = container_name(ctr)
    if count <= 0:
        raise VendorRuleError(
            f"{vendor.count_resource} must be greater than 0",
            container=container,
            resource=vendor.count_resource,
            value=count,
        )
    card = memory_per_card[0]
    cores, memory = vendor.cores_resource, vendor.memory_resource
    if count > 1:
        if cores:
            set_limit(ctr, cores, count * MTHREADS_CORES_PER_CARD)
        if memory:
            set_limit(ctr, memory, count * card)
        edits.annotations[keys.MTHREADS_REQUEST_GPU_NUM] = str(count)
        return True
    asked = value(where, memory)
    if asked is None:
        if cores:
            set_limit(ctr, cores, MTHREADS_CORES_PER_CARD)
        if memory:
            set_limit(ctr, memory, card)
        return True
    legal = mthreads_legal_memory(memory_per_card)
    if asked not in legal:
        shown = ", ".join(str(size) for size in legal)
        raise VendorRuleError(
            f"sGPU memory request value is invalid, valid values are [{shown}]",
            container=container,
            resource=memory,
            value=asked,
        )
    return True
