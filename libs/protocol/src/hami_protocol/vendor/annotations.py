"""Inventory carried in a vendor's own node annotation: Enflame DRS
(``enflame.com/gcu-drs-capacity``) and MetaX sGPU (``metax-tech.com/node-gpu-devices``).

Each format has a pure decoder to a small dataclass, an encoder (for stand-ins and round trips)
and a conversion to HAMi's :class:`DeviceInfo` with the custom info HAMi attaches.  Decoders
follow Go's ``encoding/json`` (case-insensitive keys, unknown keys ignored, ``null`` = absent)
and raise only :class:`DecodeError`, naming the annotation key and the field.

* Enflame DRS: ``{"devices":[{"index","minor","capacity"}],"profiles":{"<S>g.<M>gb":"<id>"}}``
  → one device per entry, ID ``<node>-enflame-drs-<index>``, ``Count`` = capacity (slices),
  ``Devmem`` = largest profile GB × 1024, ``Devcore`` 100, custom info
  ``minor, index, profiles, maxSlice``.  Profiles read ``<S>g.<M>gb`` case-insensitively.
* MetaX sGPU: ``[{"uuid","bdf","model","totalDevCount","totalCompute","totalVRam",
  "availableDevCount","availableCompute","availableVRam","numa","healthy","qosPolicy",
  "linkZone"}]`` → ``Count``/``Devcore``/``Devmem`` = the totals, health = ``healthy``, custom
  info ``QosPolicy, Model, LinkZone``.  ``uuid`` and the three totals are required here (HAMi
  would register a device with 0 slots and no name; we report the node instead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from hami_protocol import keys
from hami_protocol._goparse import (
    INT32_MAX,
    JSONFloat,
    JSONObject,
    JSONReader,
    dump_go_json,
    go_json_int,
    parse_go_int,
)
from hami_protocol.errors import DecodeError, ValidationError
from hami_protocol.node.registry import DeviceInfo, custom_info

__all__ = [
    "DRS_TYPE",
    "METAX_SGPU_TYPE",
    "DrsCapacity",
    "DrsDevice",
    "DrsProfile",
    "MetaxSDevice",
    "decode_drs_capacity",
    "decode_inventory",
    "decode_metax_sgpu",
    "drs_devices",
    "drs_profiles",
    "encode_drs_capacity",
    "encode_metax_sgpu",
    "metax_sgpu_devices",
    "parse_drs_profile",
]

DRS_TYPE: Final = "Enflame"
METAX_SGPU_TYPE: Final = "Metax-SGPU"


# --- Enflame DRS ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrsDevice:
    index: str
    """As written (a decimal string); a value that does not parse takes the entry's position."""
    minor: str
    capacity: int
    """Slices on the device."""


@dataclass(frozen=True, slots=True)
class DrsCapacity:
    devices: tuple[DrsDevice, ...]
    profiles: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Profile name (``3g.20gb``) → the plugin's profile ID."""


@dataclass(frozen=True, slots=True)
class DrsProfile:
    """One DRS slice profile, as the fit reads it."""

    name: str
    id: str
    slices: int
    memory_gb: int
    core_percent: int
    """``ceil(slices × 100 / maxSlice)``."""


def parse_drs_profile(name: str) -> tuple[int, int]:
    """``3g.20gb`` → ``(3, 20)``; ``(0, 0)`` when the slice count does not parse, ``(S, 0)``
    when only the memory does not (HAMi's ``parseProfile``)."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size = parse_go_int(parts[0].strip().removesuffix("g"), low=-INT32_MAX, high=INT32_MAX)
    if size is None:
        return 0, 0
    memory = parse_go_int(parts[1].strip().removesuffix("gb"), low=-INT32_MAX, high=INT32_MAX)
    return size, memory or 0


def drs_profiles(profiles: Mapping[str, str], max_slice: int) -> tuple[DrsProfile, ...]:
    """The usable profiles sorted by (slices, GB), each with its core percentage."""
    found: list[DrsProfile] = []
    if max_slice <= 0:
        return ()
    for name, profile_id in profiles.items():
        slices, memory = parse_drs_profile(name)
        if slices <= 0 or memory <= 0:
            continue
        found.append(
            DrsProfile(name, profile_id, slices, memory, math.ceil(slices * 100 / max_slice))
        )
    return tuple(sorted(found, key=lambda p: (p.slices, p.memory_gb, p.name)))


_DRS_TOP: Final = ("devices", "profiles")
_DRS_DEVICE: Final = ("index", "minor", "capacity")


def decode_drs_capacity(value: str, *, key: str = keys.ENFLAME_DRS_CAPACITY) -> DrsCapacity:
    """Decode ``enflame.com/gcu-drs-capacity``; :class:`DecodeError` naming the field."""
    reader = JSONReader(key, value)
    document = reader.load()
    top = reader.obj_fields(document, "document", _DRS_TOP)
    devices: list[DrsDevice] = []
    for position, item in enumerate(reader.array_items(top.get("devices"), "devices")):
        where = f"devices[{position}]"
        entry = reader.obj_fields(item, where, _DRS_DEVICE)
        devices.append(
            DrsDevice(
                index=reader.text(entry, "index", where),
                minor=reader.text(entry, "minor", where),
                capacity=_drs_slices(reader, entry.get("capacity"), where),
            )
        )
    raw_profiles = top.get("profiles")
    profiles: dict[str, str] = {}
    if raw_profiles is not None:
        if not isinstance(raw_profiles, JSONObject):
            raise reader.fail("profiles", "expected a JSON object")
        for name, profile_id in raw_profiles.pairs:
            if profile_id is None:
                continue
            if not isinstance(profile_id, str):
                raise reader.fail(f"profiles[{name!r}]", "profile ID must be a string")
            profiles[name] = profile_id
    return DrsCapacity(tuple(devices), MappingProxyType(profiles))


def _drs_slices(reader: JSONReader, item: object, where: str) -> int:
    """HAMi accepts a JSON number (truncated) or a decimal string; anything else is an error."""
    number: int | None = None
    if isinstance(item, JSONFloat):
        try:
            as_float = float(item.token)
        except ValueError:
            as_float = math.nan
        if math.isfinite(as_float) and abs(as_float) < 2**31:
            number = int(as_float)
    elif isinstance(item, str):
        number = parse_go_int(item.strip(), low=-(2**31), high=INT32_MAX)
    else:
        number = go_json_int(item, low=-(2**31), high=INT32_MAX)
    if number is None:
        raise reader.fail(where, f"capacity must be a whole number of slices, got {item!r}")
    if number <= 0:
        raise reader.fail(where, f"capacity must be positive, got {item!r}")
    return number


def encode_drs_capacity(capacity: DrsCapacity) -> str:
    """The annotation value Enflame's DRS plugin writes (profiles' keys sorted, as Go does)."""
    for position, device in enumerate(capacity.devices):
        if device.capacity <= 0 or device.capacity > INT32_MAX:
            raise ValidationError(f"devices[{position}]", device.capacity, "capacity out of range")
    return dump_go_json(
        {
            "devices": [
                {"index": d.index, "minor": d.minor, "capacity": d.capacity}
                for d in capacity.devices
            ],
            "profiles": {name: capacity.profiles[name] for name in sorted(capacity.profiles)},
        }
    )


def drs_devices(
    node_name: str, capacity: DrsCapacity, *, key: str = keys.ENFLAME_DRS_CAPACITY
) -> tuple[DeviceInfo, ...]:
    """HAMi's DRS devices for a decoded annotation; :class:`DecodeError` when it has no usable
    profile or no device."""
    max_slice = max_gb = 0
    for name in capacity.profiles:
        slices, memory = parse_drs_profile(name)
        max_slice, max_gb = max(max_slice, slices), max(max_gb, memory)
    if max_slice <= 0:
        raise DecodeError(key, dict(capacity.profiles), "profiles: no valid DRS profile")
    if not capacity.devices:
        raise DecodeError(key, [], "devices: no DRS device listed")
    max_gb = max_gb or max_slice
    if max_gb * 1024 > INT32_MAX:
        raise DecodeError(key, max_gb, "profiles: memory out of range")
    profiles = dict(capacity.profiles)
    devices: list[DeviceInfo] = []
    seen: set[int] = set()
    for position, entry in enumerate(capacity.devices):
        index = parse_go_int(entry.index, low=0, high=INT32_MAX)
        index = position if index is None else index
        if index in seen:
            raise DecodeError(key, entry.index, f"devices[{position}]: index {index} repeated")
        seen.add(index)
        minor = entry.minor.strip() or str(index)
        devices.append(
            DeviceInfo(
                id=f"{node_name}-enflame-drs-{index}",
                index=index,
                count=entry.capacity,
                devmem=max_gb * 1024,
                devcore=100,
                type=DRS_TYPE,
                numa=0,
                health=True,
                device_vendor=DRS_TYPE,
                custom_info=custom_info(
                    {
                        "minor": minor,
                        "index": str(index),
                        "profiles": profiles,
                        "maxSlice": max_slice,
                    }
                ),
            )
        )
    return tuple(devices)


# --- MetaX sGPU -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetaxSDevice:
    """One entry of ``metax-tech.com/node-gpu-devices``."""

    uuid: str
    total_dev_count: int
    total_compute: int
    total_vram: int
    bdf: str = ""
    model: str = ""
    available_dev_count: int = 0
    available_compute: int = 0
    available_vram: int = 0
    numa: int = 0
    healthy: bool = False
    qos_policy: str = ""
    link_zone: int = 0


_METAX_FIELDS: Final = (
    "uuid",
    "bdf",
    "model",
    "totalDevCount",
    "totalCompute",
    "totalVRam",
    "availableDevCount",
    "availableCompute",
    "availableVRam",
    "numa",
    "healthy",
    "qosPolicy",
    "linkZone",
)
_METAX_REQUIRED: Final = ("uuid", "totalDevCount", "totalCompute", "totalVRam")
_INT32_MIN: Final = -(2**31)


def decode_metax_sgpu(
    value: str, *, key: str = keys.METAX_SGPU_DEVICES
) -> tuple[MetaxSDevice, ...]:
    """Decode ``metax-tech.com/node-gpu-devices``; :class:`DecodeError` naming the field."""
    reader = JSONReader(key, value)
    document = reader.load()
    devices: list[MetaxSDevice] = []
    if not isinstance(document, list):
        raise reader.fail("document", "expected a JSON array of devices")
    for position, item in enumerate(document):
        where = f"device {position}"
        fields = reader.obj_fields(item, where, _METAX_FIELDS)
        for name in _METAX_REQUIRED:
            if name not in fields:
                raise reader.fail(where, f"missing field {name}")
        uuid = reader.text(fields, "uuid", where)
        if not uuid:
            raise reader.fail(where, "uuid must not be empty")
        devices.append(
            MetaxSDevice(
                uuid=uuid,
                total_dev_count=_int32(reader, fields, "totalDevCount", where),
                total_compute=_int32(reader, fields, "totalCompute", where),
                total_vram=_int32(reader, fields, "totalVRam", where),
                bdf=reader.text(fields, "bdf", where),
                model=reader.text(fields, "model", where),
                available_dev_count=_int32(reader, fields, "availableDevCount", where, _INT32_MIN),
                available_compute=_int32(reader, fields, "availableCompute", where, _INT32_MIN),
                available_vram=_int32(reader, fields, "availableVRam", where, _INT32_MIN),
                numa=_int32(reader, fields, "numa", where, _INT32_MIN),
                healthy=reader.flag(fields, "healthy", where),
                qos_policy=reader.text(fields, "qosPolicy", where),
                link_zone=_int32(reader, fields, "linkZone", where, _INT32_MIN),
            )
        )
    if len({device.uuid for device in devices}) != len(devices):
        raise reader.fail("document", "a device uuid is listed twice")
    return tuple(devices)


def _int32(
    reader: JSONReader, fields: dict[str, object], name: str, where: str, low: int = 0
) -> int:
    return reader.integer(fields, name, where, low, INT32_MAX)


def encode_metax_sgpu(devices: tuple[MetaxSDevice, ...] | list[MetaxSDevice]) -> str:
    """The annotation value MetaX's plugin writes (Go ``omitempty``: zero fields dropped)."""
    documents: list[dict[str, object]] = []
    for position, device in enumerate(devices):
        if not device.uuid:
            raise ValidationError(f"device {position}", device.uuid, "uuid must not be empty")
        pairs: tuple[tuple[str, object], ...] = (
            ("uuid", device.uuid),
            ("bdf", device.bdf),
            ("model", device.model),
            ("totalDevCount", device.total_dev_count),
            ("totalCompute", device.total_compute),
            ("totalVRam", device.total_vram),
            ("availableDevCount", device.available_dev_count),
            ("availableCompute", device.available_compute),
            ("availableVRam", device.available_vram),
            ("numa", device.numa),
            ("healthy", device.healthy),
            ("qosPolicy", device.qos_policy),
            ("linkZone", device.link_zone),
        )
        for name, item in pairs:
            if (
                isinstance(item, int)
                and not isinstance(item, bool)
                and not _INT32_MIN <= item <= INT32_MAX
            ):
                raise ValidationError(f"device {position}", item, f"{name} out of range")
        # uuid is always written (no omitempty); the rest only when non-zero.
        documents.append({n: v for n, v in pairs if v or n == "uuid"})
    return dump_go_json(documents)


def metax_sgpu_devices(devices: tuple[MetaxSDevice, ...]) -> tuple[DeviceInfo, ...]:
    """HAMi's ``convertMetaxSDeviceToHAMIDevice``."""
    return tuple(
        DeviceInfo(
            id=device.uuid,
            index=position,
            count=device.total_dev_count,
            devmem=device.total_vram,
            devcore=device.total_compute,
            type=METAX_SGPU_TYPE,
            numa=device.numa,
            health=device.healthy,
            mode="",
            device_vendor=METAX_SGPU_TYPE,
            custom_info=custom_info(
                {
                    "QosPolicy": device.qos_policy,
                    "Model": device.model,
                    "LinkZone": device.link_zone,
                }
            ),
        )
        for position, device in enumerate(devices)
    )


# --- dispatch ---------------------------------------------------------------------------------


def decode_inventory(key: str, node_name: str, value: str) -> tuple[DeviceInfo, ...]:
    """The devices a vendor annotation ``key`` lists on ``node_name``
    (:attr:`Vendor.inventory_key`); :class:`DecodeError` on bad input or an unknown key."""
    if key == keys.ENFLAME_DRS_CAPACITY:
        return drs_devices(node_name, decode_drs_capacity(value, key=key), key=key)
    if key == keys.METAX_SGPU_DEVICES:
        return metax_sgpu_devices(decode_metax_sgpu(value, key=key))
    raise DecodeError(key, value, "not a vendor inventory annotation this library reads")
