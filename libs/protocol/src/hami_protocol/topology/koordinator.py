"""Koordinator's device pod annotations: joint allocation, allocation hints, allocation result.

``scheduling.koordinator.sh/device-joint-allocate`` and ``…/device-allocate-hint`` are written by
users, so they are read strictly: unknown fields, unknown device types, bad enum values and bad
label selectors are errors that name the field.  ``…/device-allocated`` is state written by a
scheduler and read back to rebuild usage, so unknown fields and device types there are tolerated
(dropping a record would lose usage); its encoder writes Go's field order and omitempty rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from hami_protocol import keys
from hami_protocol._goparse import (
    INT32_MAX,
    INT32_MIN,
    GoJSONError,
    JSONFloat,
    JSONObject,
    dump_go_json,
    go_json_int,
    load_go_json,
)
from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.request.quantity import parse_quantity
from hami_protocol.selectors import LabelSelector, parse_label_selector

__all__ = [
    "DEVICE_TYPES",
    "DEVICE_TYPE_FPGA",
    "DEVICE_TYPE_GPU",
    "DEVICE_TYPE_RDMA",
    "TOPOLOGY_SCOPE_LEVEL",
    "AllocateStrategy",
    "AllocatedVF",
    "DeviceAllocateHints",
    "DeviceAllocation",
    "DeviceAllocationExtension",
    "DeviceHint",
    "DeviceJointAllocate",
    "ExclusivePolicy",
    "JointScope",
    "TopologyScope",
    "decode_device_allocated",
    "encode_device_allocated",
    "parse_device_allocate_hints",
    "parse_device_joint_allocate",
]

DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_RDMA = "rdma"
DEVICE_TYPE_FPGA = "fpga"
DEVICE_TYPES = frozenset({DEVICE_TYPE_GPU, DEVICE_TYPE_RDMA, DEVICE_TYPE_FPGA})


class JointScope(StrEnum):
    SAME_PCIE = "SamePCIe"


class AllocateStrategy(StrEnum):
    APPLY_FOR_ALL = "ApplyForAll"
    REQUESTS_AS_COUNT = "RequestsAsCount"


class TopologyScope(StrEnum):
    DEVICE = "Device"
    PCIE = "PCIe"
    NUMA_NODE = "NUMANode"
    NODE = "Node"


TOPOLOGY_SCOPE_LEVEL: Mapping[TopologyScope, int] = MappingProxyType(
    {
        TopologyScope.DEVICE: 4,
        TopologyScope.PCIE: 3,
        TopologyScope.NUMA_NODE: 2,
        TopologyScope.NODE: 1,
    }
)
"""Koordinator's levels: a required scope forbids allocating at any scope of a lower level."""


class ExclusivePolicy(StrEnum):
    DEVICE_LEVEL = "DeviceLevel"
    PCIE_LEVEL = "PCIeLevel"


@dataclass(frozen=True, slots=True)
class DeviceJointAllocate:
    """``device-joint-allocate``: the first type is primary, the rest follow its PCIe switches."""

    device_types: tuple[str, ...] = ()
    required_scope: JointScope | None = None

    @property
    def primary(self) -> str | None:
        return self.device_types[0] if self.device_types else None

    @property
    def secondaries(self) -> tuple[str, ...]:
        return self.device_types[1:]


@dataclass(frozen=True, slots=True)
class DeviceHint:
    """One device type's entry of ``device-allocate-hint``; None means the field was absent."""

    selector: LabelSelector | None = None
    vf_selector: LabelSelector | None = None
    allocate_strategy: AllocateStrategy | None = None
    required_topology_scope: TopologyScope | None = None
    exclusive_policy: ExclusivePolicy | None = None

    @property
    def must_allocate_vf(self) -> bool:
        """Any vfSelector, even ``{}``, demands a VF (``{}`` accepts every VF group)."""
        return self.vf_selector is not None


@dataclass(frozen=True, slots=True)
class DeviceAllocateHints:
    """``device-allocate-hint``: hints keyed by device type, sorted by type."""

    hints: tuple[tuple[str, DeviceHint], ...] = ()

    def get(self, device_type: str) -> DeviceHint | None:
        return next((hint for kind, hint in self.hints if kind == device_type), None)

    def __contains__(self, device_type: object) -> bool:
        return any(kind == device_type for kind, _ in self.hints)


@dataclass(frozen=True, slots=True)
class AllocatedVF:
    """A VF given to a pod; Koordinator writes ``minor`` -1 when unknown, 0 is omitted."""

    bus_id: str = ""
    minor: int = 0


@dataclass(frozen=True, slots=True)
class DeviceAllocationExtension:
    vfs: tuple[AllocatedVF, ...] = ()
    gpu_shared_resource_template: str = ""


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One device instance given to a pod; quantities are Kubernetes quantity strings."""

    minor: int
    resources: Mapping[str, str] = field(default_factory=dict, hash=False)
    id: str = ""
    extension: DeviceAllocationExtension | None = None

    def __post_init__(self) -> None:
        frozen = MappingProxyType(dict(sorted(self.resources.items())))
        object.__setattr__(self, "resources", frozen)


# --- strict JSON for the user-written annotations --------------------------------------------
_E = TypeVar("_E", bound=StrEnum)


class _DuplicateFieldError(ValueError):
    pass


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for name, value in pairs:
        if name in result:
            raise _DuplicateFieldError(name)
        result[name] = value
    return result


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _load(text: str, annotation: str) -> object:
    if not isinstance(text, str):
        raise DecodeError(annotation, text, "annotation value must be a string")
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_constant=_reject_constant)
    except _DuplicateFieldError as exc:
        raise DecodeError(annotation, text, f"duplicate field {exc.args[0]!r}") from None
    except (ValueError, RecursionError) as exc:
        raise DecodeError(annotation, text, f"invalid JSON: {exc}") from None


def _object(value: object, annotation: str, path: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise DecodeError(annotation, value, f"{path} must be a JSON object")
    return value


def _strict_fields(
    obj: dict[str, object], known: tuple[str, ...], annotation: str, path: str
) -> None:
    for name in obj:
        if name not in known:
            hint = next((k for k in known if k.lower() == name.lower()), None)
            extra = f" (field names are case-sensitive: did you mean {hint!r}?)" if hint else ""
            raise ValidationError(annotation, name, f"{path}: unknown field {name!r}{extra}")


def _string(value: object, annotation: str, path: str) -> str:
    if value is None:
        return ""
    if type(value) is not str:
        raise DecodeError(annotation, value, f"{path} must be a string")
    return value


def _enum(kind: type[_E], value: object, annotation: str, path: str) -> _E | None:
    text = _string(value, annotation, path)
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise ValidationError(annotation, text, f"{path} must be one of {allowed}") from None


def _device_type(value: object, annotation: str, path: str) -> str:
    text = _string(value, annotation, path)
    if text not in DEVICE_TYPES:
        known = ", ".join(sorted(DEVICE_TYPES))
        raise ValidationError(annotation, text, f"{path}: unknown device type (known: {known})")
    return text


# --- device-joint-allocate ------------------------------------------------------------------
def parse_device_joint_allocate(text: str) -> DeviceJointAllocate:
    """Decode ``scheduling.koordinator.sh/device-joint-allocate``."""
    key = keys.KOORD_DEVICE_JOINT_ALLOCATE
    obj = _object(_load(text, key), key, "device-joint-allocate")
    _strict_fields(obj, ("deviceTypes", "requiredScope"), key, "device-joint-allocate")
    raw_types = obj.get("deviceTypes")
    if raw_types is None:
        raw_types = []
    if not isinstance(raw_types, list):
        raise DecodeError(key, raw_types, "deviceTypes must be a list")
    types = tuple(_device_type(t, key, f"deviceTypes[{i}]") for i, t in enumerate(raw_types))
    if len(set(types)) != len(types):
        raise ValidationError(key, raw_types, "deviceTypes lists a device type twice")
    scope = _enum(JointScope, obj.get("requiredScope"), key, "requiredScope")
    return DeviceJointAllocate(device_types=types, required_scope=scope)


# --- device-allocate-hint -------------------------------------------------------------------
_HINT_FIELDS = (
    "selector",
    "vfSelector",
    "allocateStrategy",
    "requiredTopologyScope",
    "exclusivePolicy",
)


def parse_device_allocate_hints(text: str) -> DeviceAllocateHints:
    """Decode ``scheduling.koordinator.sh/device-allocate-hint``; a ``null`` entry is no hint."""
    key = keys.KOORD_DEVICE_ALLOCATE_HINT
    obj = _object(_load(text, key), key, "device-allocate-hint")
    hints: list[tuple[str, DeviceHint]] = []
    for raw_type, raw_hint in obj.items():
        device_type = _device_type(raw_type, key, "device type")
        if raw_hint is not None:
            hints.append((device_type, _parse_hint(raw_hint, key, device_type)))
    return DeviceAllocateHints(tuple(sorted(hints, key=lambda item: item[0])))


def _parse_hint(raw: object, key: str, path: str) -> DeviceHint:
    obj = _object(raw, key, path)
    _strict_fields(obj, _HINT_FIELDS, key, path)
    selectors: list[LabelSelector | None] = []
    for name in ("selector", "vfSelector"):
        value = obj.get(name)
        parsed = (
            None
            if value is None
            else parse_label_selector(value, annotation=key, path=f"{path}.{name}")
        )
        selectors.append(parsed)
    return DeviceHint(
        selector=selectors[0],
        vf_selector=selectors[1],
        allocate_strategy=_enum(
            AllocateStrategy, obj.get("allocateStrategy"), key, f"{path}.allocateStrategy"
        ),
        required_topology_scope=_enum(
            TopologyScope, obj.get("requiredTopologyScope"), key, f"{path}.requiredTopologyScope"
        ),
        exclusive_policy=_enum(
            ExclusivePolicy, obj.get("exclusivePolicy"), key, f"{path}.exclusivePolicy"
        ),
    )


# --- device-allocated -----------------------------------------------------------------------
# Read exactly as Go's encoding/json reads Koordinator's structs: field names match
# case-insensitively, unknown fields are ignored, null leaves a field unset, last duplicate wins.
_ALLOCATION_FIELDS = ("minor", "resources", "id", "extension")
_EXTENSION_FIELDS = ("vfs", "gpuSharedResourceTemplate")
_VF_FIELDS = ("minor", "busID")


def decode_device_allocated(text: str) -> dict[str, tuple[DeviceAllocation, ...]]:
    """Decode ``scheduling.koordinator.sh/device-allocated`` (device type → allocations).

    Quantities may be strings or bare JSON numbers (Go accepts both); they are kept as text.
    """
    key = keys.KOORD_DEVICE_ALLOCATED
    if not isinstance(text, str):
        raise DecodeError(key, text, "annotation value must be a string")
    try:
        doc = load_go_json(text)
    except GoJSONError as exc:
        raise DecodeError(key, text, f"invalid JSON: {exc}") from None
    if doc is None:
        return {}
    result: dict[str, tuple[DeviceAllocation, ...]] = {}
    for device_type, raw_list in _go_map(doc, key, "device-allocated").items():
        items = [] if raw_list is None else raw_list
        if not isinstance(items, list):
            raise DecodeError(key, raw_list, f"{device_type} must be a list")
        result[device_type] = tuple(
            _decode_allocation(item, key, f"{device_type}[{i}]") for i, item in enumerate(items)
        )
    return result


def _go_map(value: object, key: str, path: str) -> dict[str, object]:
    if not isinstance(value, JSONObject):
        raise DecodeError(key, value, f"{path} must be a JSON object")
    return dict(value.pairs)


def _go_struct(value: object, names: tuple[str, ...], key: str, path: str) -> dict[str, object]:
    if not isinstance(value, JSONObject):
        raise DecodeError(key, value, f"{path} must be a JSON object")
    return value.go_fields(names)


def _int32(value: object, key: str, path: str) -> int:
    number = 0 if value is None else go_json_int(value, low=INT32_MIN, high=INT32_MAX)
    if number is None:
        raise DecodeError(key, value, f"{path} must be a 32-bit integer")
    return number


def _quantity(value: object, key: str, path: str) -> str:
    if value is None:
        return "0"
    if isinstance(value, JSONFloat):
        value = value.token
    elif type(value) is int:
        value = str(value)
    if type(value) is not str:
        raise DecodeError(key, value, f"{path} must be a quantity string")
    try:
        parse_quantity(value, key=key)
    except ProtocolError as exc:
        raise ValidationError(key, value, f"{path}: {exc.reason}") from None
    return value


def _decode_allocation(raw: object, key: str, path: str) -> DeviceAllocation:
    obj = _go_struct(raw, _ALLOCATION_FIELDS, key, path)
    raw_resources = obj.get("resources")
    resources = {
        name: _quantity(quantity, key, f"{path}.resources.{name}")
        for name, quantity in _go_map(
            JSONObject(()) if raw_resources is None else raw_resources, key, path
        ).items()
    }
    extension = None
    if "extension" in obj:
        ext = _go_struct(obj["extension"], _EXTENSION_FIELDS, key, f"{path}.extension")
        raw_vfs = ext.get("vfs", [])
        if not isinstance(raw_vfs, list):
            raise DecodeError(key, raw_vfs, f"{path}.extension.vfs must be a list")
        vfs = tuple(
            _decode_vf(vf, key, f"{path}.extension.vfs[{i}]") for i, vf in enumerate(raw_vfs)
        )
        template = _string(ext.get("gpuSharedResourceTemplate"), key, f"{path}.extension")
        extension = DeviceAllocationExtension(vfs=vfs, gpu_shared_resource_template=template)
    return DeviceAllocation(
        minor=_int32(obj.get("minor"), key, f"{path}.minor"),
        resources=resources,
        id=_string(obj.get("id"), key, f"{path}.id"),
        extension=extension,
    )


def _decode_vf(raw: object, key: str, path: str) -> AllocatedVF:
    obj = _go_struct(raw, _VF_FIELDS, key, path)
    return AllocatedVF(
        bus_id=_string(obj.get("busID"), key, f"{path}.busID"),
        minor=_int32(obj.get("minor"), key, f"{path}.minor"),
    )


def encode_device_allocated(allocations: Mapping[str, Sequence[DeviceAllocation]]) -> str:
    """The annotation value, byte-compatible with Go's ``json.Marshal`` of Koordinator's types."""
    doc = {kind: [_allocation_json(a) for a in allocations[kind]] for kind in sorted(allocations)}
    return dump_go_json(doc)


def _allocation_json(allocation: DeviceAllocation) -> dict[str, object]:
    out: dict[str, object] = {"minor": allocation.minor, "resources": dict(allocation.resources)}
    if allocation.id:
        out["id"] = allocation.id
    ext = allocation.extension
    if ext is not None:
        ext_json: dict[str, object] = {}
        if ext.vfs:
            ext_json["vfs"] = [_vf_json(vf) for vf in ext.vfs]
        if ext.gpu_shared_resource_template:
            ext_json["gpuSharedResourceTemplate"] = ext.gpu_shared_resource_template
        out["extension"] = ext_json
    return out


def _vf_json(vf: AllocatedVF) -> dict[str, object]:
    out: dict[str, object] = {}
    if vf.minor:
        out["minor"] = vf.minor
    if vf.bus_id:
        out["busID"] = vf.bus_id
    return out
