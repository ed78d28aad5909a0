"""Pure: is any device list of a pod still waiting for its device plugin?

A pod is complete, and its node lock can go, only when every vendor's
``hami.io/<x>-devices-to-allocate`` has been consumed, the GPUs' and the RDMA NICs' alike.
Whichever plugin consumes the last pending entry writes ``bind-phase: success`` and releases the
lock.  The test for the *other* lists is HAMi's: a remaining list still contains its device type
word (``NVIDIA``, ``RDMA``, ...), since every device entry carries it and a consumed list is only
``;`` separators.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from hami_protocol.keys import RDMA_DEVICES_TO_ALLOCATE
from hami_protocol.topology.layout import RDMA_DEVICE_TYPE
from hami_protocol.vendor.table import DEFAULT_VENDORS

__all__ = ["RDMA_DEVICE_TYPE", "device_lists", "others_pending"]

"""The type field of every entry of ``hami.io/rdma-devices-to-allocate``."""


def device_lists() -> tuple[tuple[str, str], ...]:
    """``(to-allocate key, type word)`` of every list a plugin on this node may consume."""
    vendors = tuple(
        (vendor.devices_to_allocate_key, vendor.common_word)
        for vendor in DEFAULT_VENDORS
        if vendor.devices_to_allocate_key is not None
    )
    return (*vendors, (RDMA_DEVICES_TO_ALLOCATE, RDMA_DEVICE_TYPE))


_LISTS: Final = device_lists()


def others_pending(annotations: Mapping[str, str], *, own_key: str) -> bool:
    """True when a list other than ``own_key`` still holds a device for some container."""
    return any(word in annotations.get(key, "") for key, word in _LISTS if key != own_key)
