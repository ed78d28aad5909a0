"""Kunlunxin vXPU's admission rule (HAMi's ``pkg/device/kunlun``), pure.

Memory rounds up to 24576, 49152, else 98304 MiB (limits and requests).
"""

from __future__ import annotations

from typing import Any, Final

from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import present, set_quantity, value
from hami_webhook.mutation.vendors.rule_set import read_sections

__all__ = ["KUNLUN_VXPU_MAX", "KUNLUN_VXPU_SIZES", "apply_kunlun_vxpu", "kunlun_vxpu_memory"]

KUNLUN_VXPU_SIZES: Final = (24576, 49152)
KUNLUN_VXPU_MAX: Final = 98304


def kunlun_vxpu_memory(memory: int) -> int:
    """HAMi's ``trimMemory``: 24576, 49152, else 98304 MiB."""
    for size in KUNLUN_VXPU_SIZES:
        if memory <= size:
            return size
    return KUNLUN_VXPU_MAX


def apply_kunlun_vxpu(ctr: dict[str, Any], vendor: Vendor) -> bool:
    """Apply the rule to ``ctr``; whether it asks for Kunlunxin vXPUs."""
    where = read_sections(ctr)
    if not present(where, vendor.count_resource):
        return False
    memory = value(where, vendor.memory_resource)
    if memory is not None and vendor.memory_resource:
        text = str(kunlun_vxpu_memory(memory))
        set_quantity(ctr, "limits", vendor.memory_resource, text)
        set_quantity(ctr, "requests", vendor.memory_resource, text)
    return True
