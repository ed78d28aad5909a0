"""Which pod annotations say a pod was placed and given devices.

* :func:`allocation_keys` — every annotation whose presence says a pod was given devices: each
  vendor's ``-devices-allocated`` and ``-devices-to-allocate`` and :data:`ALLOCATION_EXTRA_KEYS`
  (the RDMA lists, Koordinator's ``device-allocated``);
* :func:`placement_keys` — those and the rest of a placement's record
  (:data:`PLACEMENT_EXTRA_KEYS`: ``hami.io/vgpu-node``, ``vgpu-time``, ``bind-phase``,
  ``bind-time``, the MIG reservations): what a pod copied from a placed pod's manifest carries
  that is not its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from hami_protocol import keys
from hami_protocol.vendor.table import Vendor

__all__ = ["ALLOCATION_EXTRA_KEYS", "PLACEMENT_EXTRA_KEYS", "allocation_keys", "placement_keys"]

ALLOCATION_EXTRA_KEYS: Final = (
    keys.RDMA_DEVICES_ALLOCATED,
    keys.RDMA_DEVICES_TO_ALLOCATE,
    keys.KOORD_DEVICE_ALLOCATED,
)
"""Beyond each vendor's ``-devices-allocated`` / ``-devices-to-allocate``: the other
annotations that say a pod was given devices."""
PLACEMENT_EXTRA_KEYS: Final = (
    keys.VGPU_NODE,
    keys.VGPU_TIME,
    keys.BIND_PHASE,
    keys.BIND_TIME,
    keys.NVIDIA_MIG_ALLOCATIONS,
)
"""Beyond :func:`allocation_keys`: the rest of the record a placement leaves on a pod."""


def allocation_keys(vendors: Sequence[Vendor]) -> frozenset[str]:
    """Every annotation whose presence says a pod was given devices (see the module doc)."""
    found = set(ALLOCATION_EXTRA_KEYS)
    for vendor in vendors:
        found.update(k for k in (vendor.devices_allocated_key, vendor.devices_to_allocate_key) if k)
    return frozenset(found)


def placement_keys(vendors: Sequence[Vendor]) -> frozenset[str]:
    """:func:`allocation_keys` and :data:`PLACEMENT_EXTRA_KEYS`."""
    return allocation_keys(vendors) | frozenset(PLACEMENT_EXTRA_KEYS)
