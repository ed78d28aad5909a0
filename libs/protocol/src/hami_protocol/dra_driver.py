"""Names of HAMi's DRA driver that the node agent, the emulator and the docs share
(issue 26; /work/notes/dra-common.md): the driver and DeviceClass name, device names, attribute
and capacity keys, and the CDI kind of prepared claims.

Capacity keys are unqualified (``memory``, ``cores``): the allocator compares a claim's
``capacity.requests`` keys verbatim with the published ones, so claims must use these exact
strings.  Attributes without a domain belong to the driver (``gpu.hami.io/uuid`` in CEL);
``resource.kubernetes.io/pcieRoot`` is the upstream-standard one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "ATTR_DRIVER_VERSION",
    "ATTR_INDEX",
    "ATTR_MODEL",
    "ATTR_NUMA",
    "ATTR_PCIE_ROOT",
    "ATTR_UUID",
    "CAPACITY_CORES",
    "CAPACITY_MEMORY",
    "CDI_CLASS",
    "CDI_KIND",
    "CDI_VENDOR",
    "DEVICE_CLASS",
    "DRIVER",
    "RESOURCE_API_VERSION",
    "attribute_value",
    "device_index",
    "device_name",
]

DRIVER: Final = "gpu.hami.io"
"""``ResourceSlice.spec.driver``, the kubelet plugin's registered name, results' ``driver``."""
DEVICE_CLASS: Final = "gpu.hami.io"
"""The DeviceClass selecting this driver's devices (``device.driver == "gpu.hami.io"``)."""
RESOURCE_API_VERSION: Final = "resource.k8s.io/v1"

ATTR_UUID: Final = "uuid"
ATTR_MODEL: Final = "model"
ATTR_INDEX: Final = "index"
ATTR_NUMA: Final = "numa"
ATTR_DRIVER_VERSION: Final = "driverVersion"
ATTR_PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"

CAPACITY_MEMORY: Final = "memory"
"""Bytes, Mi-granular (``"16Gi"``)."""
CAPACITY_CORES: Final = "cores"
"""Percent of the GPU's SMs (100 per GPU)."""

CDI_VENDOR: Final = "k8s.gpu.hami.io"
CDI_CLASS: Final = "claim"
CDI_KIND: Final = f"{CDI_VENDOR}/{CDI_CLASS}"
"""The CDI kind of the per-claim spec files (ids ``k8s.gpu.hami.io/claim=<name>``)."""

_DEVICE_NAME: Final = re.compile(r"gpu-(0|[1-9][0-9]*)")


def device_name(index: int) -> str:
    """The slice device name of the GPU with this NVML index: ``gpu-<index>``."""
    if index < 0:
        raise ValueError(f"GPU index must not be negative, got {index}")
    return f"gpu-{index}"


def device_index(name: str) -> int | None:
    """The GPU index a device name stands for (None: not one of this driver's names)."""
    matched = _DEVICE_NAME.fullmatch(name)
    return None if matched is None else int(matched.group(1))


_ATTRIBUTE_KINDS: Final = ("string", "int", "bool", "version")
"""The members of a ``DeviceAttribute`` (exactly one is set)."""


def attribute_value(attributes: object, key: str) -> object:
    """The value of a published device's attribute ``key`` (``spec.devices[].attributes``: a
    map of name → ``{string|int|bool|version: value}``), named bare or qualified with this
    driver's domain (``gpu.hami.io/uuid``, as CEL reads it); ``None`` when absent or not one
    of those shapes."""
    if not isinstance(attributes, Mapping):
        return None
    value: Any = attributes.get(key) or attributes.get(f"{DRIVER}/{key}")
    if not isinstance(value, Mapping):
        return None
    return next((value[kind] for kind in _ATTRIBUTE_KINDS if kind in value), None)
