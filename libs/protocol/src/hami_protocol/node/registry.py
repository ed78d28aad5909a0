"""The node device registry (``hami.io/node-<x>-register``) codec.

A device plugin publishes one :class:`DeviceInfo` per physical device in a node annotation; the
scheduler reads it back.  Two encodings exist and both are decoded:

* JSON (HAMi >= v2.8, every JSON vendor): an array of objects with Go ``omitempty`` semantics, so
  a missing ``index``/``numa``/``count`` means 0, a missing ``health`` means *unhealthy* and a
  missing ``mode`` means ``""`` (which HAMi's vGPU-mode check treats as "any mode").
* Colon form (NVIDIA <= v2.7, Hygon DCU, Iluvatar): ``ID,Count,Devmem,Devcore,Type,Numa,Health``
  optionally followed by ``,Index,Mode``; every device is terminated by ``:``.  The 7-field legacy
  form means index 0 and mode ``hami-core``.

Our JSON adds three optional topology fields (``pciBusId``, ``pcieSwitch``, ``pcieRoot``), omitted
when empty; HAMi ignores unknown fields, so a HAMi scheduler still reads what we write.

The pair-score annotation (``hami.io/node-nvidia-score``) lives in
:mod:`hami_protocol.node.pairscore`
and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hami_protocol._goparse import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    UINT32_MAX,
    JSONFloat,
    JSONObject,
    JSONReader,
    check_int,
    check_text,
    dump_go_json,
    fold_line_breaks,
    parse_go_bool,
    parse_go_int,
)
from hami_protocol.errors import DecodeError, ValidationError
from hami_protocol.node.pairscore import DevicePairScore, decode_pair_scores, encode_pair_scores

__all__ = [
    "EMPTY_CUSTOM_INFO",
    "LEGACY_DEFAULT_MODE",
    "DeviceInfo",
    "DevicePairScore",
    "MigPlacement",
    "MigProfile",
    "custom_info",
    "decode_node_devices",
    "decode_pair_scores",
    "encode_node_devices_colon",
    "encode_node_devices_json",
    "encode_pair_scores",
    "plain_json",
]

LEGACY_DEFAULT_MODE = "hami-core"
"""Mode of a device registered in the 7-field colon form."""


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """A contiguous run of MIG slices: ``start`` and ``size`` in slice units."""

    start: int
    size: int


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile a GPU offers (``1g.5gb``, ...) and where its instances may be placed."""

    name: str
    memory_mb: int
    core: int
    slice_count: int
    placements: tuple[MigPlacement, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One registered device.  ``count`` is the number of tasks that may share it."""

    id: str
    index: int
    count: int
    devmem: int
    devcore: int
    type: str
    numa: int
    health: bool
    mode: str = LEGACY_DEFAULT_MODE
    mig_profiles: tuple[MigProfile, ...] = ()
    pci_bus_id: str = ""
    pcie_switch: str = ""
    pcie_root: str = ""
    device_vendor: str = ""
    """HAMi's ``devicevendor`` (the vendor's common word; informational)."""
    custom_info: Mapping[str, object] = field(default_factory=lambda: EMPTY_CUSTOM_INFO, hash=False)
    """HAMi's ``custominfo``: vendor facts as plain JSON values (``NetworkID`` of an Ascend NPU,
    ``AIC``/``DeviceStrategy`` of a Vastai die, ``QosPolicy`` of a MetaX sGPU, ...).  Read-only;
    left out of the hash (equality still compares it)."""


EMPTY_CUSTOM_INFO: Mapping[str, object] = MappingProxyType({})


def custom_info(values: Mapping[str, object]) -> Mapping[str, object]:
    """A read-only copy of ``values`` for :attr:`DeviceInfo.custom_info`."""
    return MappingProxyType(dict(values)) if values else EMPTY_CUSTOM_INFO


def plain_json(item: object) -> object:
    """A decoded Go-JSON value as plain Python: objects → dicts (last key wins), fractions →
    floats, arrays → lists."""
    if isinstance(item, JSONObject):
        return {key: plain_json(value) for key, value in item.pairs}
    if isinstance(item, list):
        return [plain_json(value) for value in item]
    if isinstance(item, JSONFloat):
        return float(item.token)
    return item


# --- decoding -------------------------------------------------------------------------------------


def decode_node_devices(value: str, *, key: str = "") -> tuple[DeviceInfo, ...]:
    """Decode a registry annotation in either encoding (JSON when it starts with ``[``; a value
    that is not JSON but reads as the colon form — a first device id starting with ``[`` — is
    read as that).

    Whitespace and line breaks around separators and at the ends are ignored, so values that were
    wrapped in a manifest still decode; whitespace inside a field (``NVIDIA-Tesla V100-...``) is
    kept, a wrapped line inside a field reads as one space.  Raises :class:`DecodeError`.
    """
    if value.strip().startswith("["):
        try:
            return _decode_json_devices(value, key)
        except DecodeError as not_json:
            if ":" not in value:
                raise
            try:
                return _decode_colon_devices(value, key)
            except DecodeError:
                raise not_json from None
    return _decode_colon_devices(value, key)


def _decode_colon_devices(value: str, key: str) -> tuple[DeviceInfo, ...]:
    text = fold_line_breaks(value)
    if ":" not in text:
        raise DecodeError(key, value, "node device list has no ':' device terminator")
    devices: list[DeviceInfo] = []
    for piece in text.split(":"):
        if piece.strip():
            fields = [field.strip() for field in piece.split(",")]
            devices.append(_decode_colon_device(fields, f"device {len(devices)}", key, value))
    return tuple(devices)


def _decode_colon_device(fields: list[str], where: str, key: str, value: str) -> DeviceInfo:
    if len(fields) not in (7, 9):
        raise DecodeError(
            key, value, f"{where}: expected 7 or 9 comma-separated fields, got {len(fields)}"
        )

    def number(position: int, name: str, low: int, high: int) -> int:
        parsed = parse_go_int(fields[position], low=low, high=high)
        if parsed is None:
            raise DecodeError(
                key, value, f"{where}: {name} {fields[position]!r} is not an integer in range"
            )
        return parsed

    health = parse_go_bool(fields[6])
    if health is None:
        raise DecodeError(key, value, f"{where}: health {fields[6]!r} is not a Go boolean")
    return DeviceInfo(
        id=fields[0],
        index=number(7, "index", 0, INT64_MAX) if len(fields) == 9 else 0,
        count=number(1, "count", 0, INT32_MAX),
        devmem=number(2, "devmem", 0, INT32_MAX),
        devcore=number(3, "devcore", 0, INT32_MAX),
        type=fields[4],
        numa=number(5, "numa", INT64_MIN, INT64_MAX),
        health=health,
        mode=fields[8] if len(fields) == 9 else LEGACY_DEFAULT_MODE,
    )


_DEVICE_FIELDS = (
    "id",
    "index",
    "count",
    "devmem",
    "devcore",
    "type",
    "numa",
    "mode",
    "migProfiles",
    "health",
    "pciBusId",
    "pcieSwitch",
    "pcieRoot",
    "devicevendor",
    "custominfo",
)
_PROFILE_FIELDS = ("name", "memoryMB", "core", "sliceCount", "placements")
_PLACEMENT_FIELDS = ("start", "size")


def _decode_json_devices(value: str, key: str) -> tuple[DeviceInfo, ...]:
    reader = JSONReader(key, value)
    document = reader.load()
    if not isinstance(document, list):
        raise reader.fail("document", "expected a JSON array of devices")
    devices: list[DeviceInfo] = []
    for position, item in enumerate(document):
        where = f"device {position}"
        fields = reader.obj_fields(item, where, _DEVICE_FIELDS)
        profiles = tuple(
            _decode_profile(reader, raw, f"{where} migProfiles[{n}]")
            for n, raw in enumerate(reader.array_items(fields.get("migProfiles"), where))
        )
        devices.append(
            DeviceInfo(
                id=reader.text(fields, "id", where),
                index=reader.integer(fields, "index", where, 0, INT64_MAX),
                count=reader.integer(fields, "count", where, 0, INT32_MAX),
                devmem=reader.integer(fields, "devmem", where, 0, INT32_MAX),
                devcore=reader.integer(fields, "devcore", where, 0, INT32_MAX),
                type=reader.text(fields, "type", where),
                numa=reader.integer(fields, "numa", where, INT64_MIN, INT64_MAX),
                health=reader.flag(fields, "health", where),
                mode=reader.text(fields, "mode", where),
                mig_profiles=profiles,
                pci_bus_id=reader.text(fields, "pciBusId", where),
                pcie_switch=reader.text(fields, "pcieSwitch", where),
                pcie_root=reader.text(fields, "pcieRoot", where),
                device_vendor=reader.text(fields, "devicevendor", where),
                custom_info=_decode_custom_info(reader, fields.get("custominfo"), where),
            )
        )
    return tuple(devices)


def _decode_custom_info(reader: JSONReader, item: object, where: str) -> Mapping[str, object]:
    if item is None:
        return EMPTY_CUSTOM_INFO
    if not isinstance(item, JSONObject):
        raise reader.fail(where, "custominfo must be a JSON object")
    try:
        values = plain_json(item)
    except (ValueError, OverflowError):
        raise reader.fail(where, "custominfo holds a number out of range") from None
    assert isinstance(values, dict)
    return custom_info(values)


def _decode_profile(reader: JSONReader, item: object, where: str) -> MigProfile:
    fields = reader.obj_fields(item, where, _PROFILE_FIELDS)
    placements: list[MigPlacement] = []
    for n, raw in enumerate(reader.array_items(fields.get("placements"), where)):
        spot = reader.obj_fields(raw, f"{where} placements[{n}]", _PLACEMENT_FIELDS)
        placements.append(
            MigPlacement(
                start=reader.integer(spot, "start", where, 0, UINT32_MAX),
                size=reader.integer(spot, "size", where, 0, UINT32_MAX),
            )
        )
    return MigProfile(
        name=reader.text(fields, "name", where),
        memory_mb=reader.integer(fields, "memoryMB", where, 0, INT32_MAX),
        core=reader.integer(fields, "core", where, 0, INT32_MAX),
        slice_count=reader.integer(fields, "sliceCount", where, 0, UINT32_MAX),
        placements=tuple(placements),
    )


# --- encoding -------------------------------------------------------------------------------------


def _check_device(device: DeviceInfo, position: int, *, forbidden: str) -> None:
    where = f"device {position}"
    for name in ("id", "type", "mode", "pci_bus_id", "pcie_switch", "pcie_root", "device_vendor"):
        check_text(where, name, getattr(device, name), forbidden=forbidden)
    check_int(where, "index", device.index, 0, INT64_MAX)
    for name in ("count", "devmem", "devcore"):
        check_int(where, name, getattr(device, name), 0, INT32_MAX)
    check_int(where, "numa", device.numa, INT64_MIN, INT64_MAX)
    if device.custom_info:
        try:
            dump_go_json(_go_map(device.custom_info))
        except (TypeError, ValueError) as exc:
            raise ValidationError(where, device.id, f"custom info is not JSON: {exc}") from None
    for profile in device.mig_profiles:
        check_text(where, "MIG profile name", profile.name)
        check_int(where, "MIG memory_mb", profile.memory_mb, 0, INT32_MAX)
        check_int(where, "MIG core", profile.core, 0, INT32_MAX)
        check_int(where, "MIG slice_count", profile.slice_count, 0, UINT32_MAX)
        for spot in profile.placements:
            check_int(where, "MIG placement start", spot.start, 0, UINT32_MAX)
            check_int(where, "MIG placement size", spot.size, 0, UINT32_MAX)


def _device_document(device: DeviceInfo) -> dict[str, object]:
    # Go's json.Marshal emits struct fields in declaration order and drops zero values
    # (omitempty); our topology fields follow HAMi's.
    candidates: tuple[tuple[str, object], ...] = (
        ("id", device.id),
        ("index", device.index),
        ("count", device.count),
        ("devmem", device.devmem),
        ("devcore", device.devcore),
        ("type", device.type),
        ("numa", device.numa),
        ("mode", device.mode),
        ("migProfiles", [_profile_document(p) for p in device.mig_profiles]),
        ("health", device.health),
        ("devicevendor", device.device_vendor),
        ("custominfo", _go_map(device.custom_info)),
        ("pciBusId", device.pci_bus_id),
        ("pcieSwitch", device.pcie_switch),
        ("pcieRoot", device.pcie_root),
    )
    return {name: item for name, item in candidates if item}


def _go_map(item: object) -> object:
    """Go marshals a ``map[string]any`` with its keys sorted."""
    if isinstance(item, Mapping):
        return {key: _go_map(item[key]) for key in sorted(item)}
    if isinstance(item, list | tuple):
        return [_go_map(value) for value in item]
    return item


def _profile_document(profile: MigProfile) -> dict[str, object]:
    return {
        "name": profile.name,
        "memoryMB": profile.memory_mb,
        "core": profile.core,
        "sliceCount": profile.slice_count,
        "placements": [{"start": p.start, "size": p.size} for p in profile.placements],
    }


def encode_node_devices_json(devices: Iterable[DeviceInfo]) -> str:
    """The canonical JSON registry value, byte-compatible with HAMi's ``MarshalNodeDevices``."""
    listed = tuple(devices)
    for position, device in enumerate(listed):
        _check_device(device, position, forbidden="")
    return dump_go_json([_device_document(device) for device in listed])


def encode_node_devices_colon(devices: Iterable[DeviceInfo]) -> str:
    """The colon form, always 9 fields, every device terminated by ``:``.

    It cannot carry MIG profiles or topology, nor text containing ``,``/``:`` or line breaks;
    such devices raise :class:`ValidationError` rather than being written lossily.
    """
    parts: list[str] = []
    for position, device in enumerate(devices):
        _check_device(device, position, forbidden=",:")
        if (
            device.mig_profiles
            or device.pci_bus_id
            or device.pcie_switch
            or device.pcie_root
            or device.device_vendor
            or device.custom_info
        ):
            raise ValidationError(
                f"device {position}",
                device.id,
                "colon form cannot carry MIG profiles, topology, vendor or custom info",
            )
        health = "true" if device.health else "false"
        parts.append(
            f"{device.id},{device.count},{device.devmem},{device.devcore},{device.type},"
            f"{device.numa},{health},{device.index},{device.mode}:"
        )
    return "".join(parts)
