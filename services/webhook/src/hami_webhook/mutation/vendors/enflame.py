"""Enflame DRS's admission rule (HAMi's ``pkg/device/enflame``), pure.

The slice count must be positive; memory positive and core in (0, 100]; each given only in
limits or only in requests is copied to the other.
"""

from __future__ import annotations

from typing import Any

from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import Sections, present, set_quantity, value
from hami_webhook.mutation.vendors.rule_set import (
    VendorRuleError,
    container_name,
    read_count,
    read_sections,
)

__all__ = ["apply_enflame_drs"]


def _mirror(ctr: dict[str, Any], where: Sections, name: str) -> None:
    """Copy ``name`` into whichever of limits/requests lacks it (HAMi's DRS webhook)."""
    limits, requests = where
    raw = limits.get(name, requests.get(name))
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return
    text = raw if isinstance(raw, str) else str(raw)
    if name not in limits:
        set_quantity(ctr, "limits", name, text)
    if name not in requests:
        set_quantity(ctr, "requests", name, text)


def apply_enflame_drs(ctr: dict[str, Any], vendor: Vendor) -> bool:
    """Check and mirror ``ctr``'s request; whether it asks for Enflame DRS slices."""
    where, count = read_count(ctr, vendor)
    container = container_name(ctr)
    count_name = vendor.count_resource
    if count is not None:
        if count <= 0:
            raise VendorRuleError(
                f"{count_name} must be greater than 0", container=container, value=count
            )
        _mirror(ctr, where, count_name)
        return True
    memory_name, core_name = vendor.memory_resource, vendor.cores_resource
    memory, core = value(where, memory_name), value(where, core_name)
    if memory is None and core is None:
        return False
    if memory is not None and memory <= 0:
        raise VendorRuleError(
            f"{memory_name} must be greater than 0", container=container, value=memory
        )
    if core is not None and not 0 < core <= 100:
        raise VendorRuleError(
            f"{core_name} must be in range (0,100]", container=container, value=core
        )
    for name in (memory_name, core_name):
        if name and present(where, name):
            _mirror(ctr, read_sections(ctr), name)
    return True
