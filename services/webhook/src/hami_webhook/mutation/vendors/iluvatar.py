"""Iluvatar's admission rule (HAMi's ``pkg/device/iluvatar``), per enabled chip, pure.

A count above 1 makes the core limit ``count × 100``; env ``SOL_CONTINER_NAME`` (HAMi's
spelling) = the container's name unless already set.
"""

from __future__ import annotations

from typing import Any

from hami_protocol import keys
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import add_env_if_absent, set_limit
from hami_webhook.mutation.vendors.rule_set import container_name, read_count

__all__ = ["apply_iluvatar"]


def apply_iluvatar(ctr: dict[str, Any], vendor: Vendor) -> bool:
    """Apply the rule to ``ctr``; whether it asks for this Iluvatar chip."""
    _, count = read_count(ctr, vendor)
    if count is None:
        return False
    if count > 1 and vendor.cores_resource:
        set_limit(ctr, vendor.cores_resource, count * 100)
    name = container_name(ctr)
    if name:
        add_env_if_absent(ctr, keys.ILUVATAR_CONTAINER_NAME_ENV, name)
    return True
