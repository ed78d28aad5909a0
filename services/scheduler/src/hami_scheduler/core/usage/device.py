"""One device as the scheduler counts it: capacity from its registration, usage from its pods.

:class:`DeviceUsage` is immutable; :meth:`DeviceUsage.shifted` gives the device with usage moved.
Vendor facts a fit reads come through :attr:`DeviceUsage.custom` (the registration's
``custominfo`` as text, :func:`custom_text`); an Enflame DRS grant is charged the slices of its
profile, not one slot (:func:`drs_slices`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from hami_protocol.node.registry import DeviceInfo

__all__ = [
    "DRS_SLICE_KEY",
    "DRS_WORD",
    "MIG_MODE",
    "NO_CUSTOM",
    "DeviceUsage",
    "custom_text",
    "device_usage",
    "drs_slices",
]

MIG_MODE: Final = "mig"

NO_CUSTOM: Final[Mapping[str, str]] = MappingProxyType({})
"""A device without vendor ``custominfo`` (every NVIDIA device)."""

DRS_WORD: Final = "Enflame"
"""Enflame DRS: a grant holds its profile's slices, not one slot (:func:`drs_slices`)."""
DRS_SLICE_KEY: Final = "maxSlice"
"""custominfo of a DRS device: the slices of its largest profile."""


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One device: capacity from its registration, usage from the pods placed on it."""

    uuid: str
    vendor: str
    """The vendor's common word (``NVIDIA``); the registry annotation the device came from."""
    type: str
    """The device model as registered (``NVIDIA-Tesla T4``)."""
    index: int
    numa: int
    mode: str
    health: bool
    count: int
    totalmem: int
    totalcore: int
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    custom: Mapping[str, str] = field(default_factory=lambda: NO_CUSTOM, hash=False)
    """The registration's ``custominfo`` as text (Ascend ``NetworkID``, Vastai ``AIC`` and
    ``DeviceStrategy``, AWS ``AWSNodeType``, MetaX ``QosPolicy``/``LinkZone``); read-only,
    shared by every usage version of the device, empty for vendors that have none."""

    def shifted(self, slots: int, mem: int, cores: int) -> DeviceUsage:
        """This device with usage moved by the given amounts, never below zero."""
        return DeviceUsage(
            self.uuid,
            self.vendor,
            self.type,
            self.index,
            self.numa,
            self.mode,
            self.health,
            self.count,
            self.totalmem,
            self.totalcore,
            max(self.used + slots, 0),
            max(self.usedmem + mem, 0),
            max(self.usedcores + cores, 0),
            self.custom,
        )


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def custom_text(info: Mapping[str, object]) -> Mapping[str, str]:
    """A registration's ``custominfo`` as text: strings as they are, numbers and booleans as
    Go prints them, anything else (DRS ``profiles``) as compact JSON."""
    if not info:
        return NO_CUSTOM
    return MappingProxyType({key: _text(value) for key, value in info.items()})


def drs_slices(usedcores: int, max_slice: int) -> int:
    """The slices an Enflame DRS grant of ``usedcores`` percent holds on a GCU of ``max_slice``
    slices: its profile's ``S`` (``usedcores = ceil(S × 100 / max_slice)``, so
    ``usedcores × max_slice // 100 = S`` exactly for ``max_slice ≤ 100``); at least 1.

    A pod's usage of one device is a sum over its containers (``slots`` grants); it is charged
    ``slots × drs_slices(usedcores // slots)`` — exact when those containers hold one profile,
    as a DRS pod's containers asking alike do."""
    if max_slice <= 0:
        return 1
    return max(usedcores * max_slice // 100, 1)


def device_usage(info: DeviceInfo, vendor: str) -> DeviceUsage:
    """An idle :class:`DeviceUsage` for a registered device of ``vendor``."""
    return DeviceUsage(
        uuid=info.id,
        vendor=vendor,
        type=info.type,
        index=info.index,
        numa=info.numa,
        mode=info.mode,
        health=info.health,
        count=info.count,
        totalmem=info.devmem,
        totalcore=info.devcore,
        custom=custom_text(info.custom_info) if info.custom_info else NO_CUSTOM,
    )
