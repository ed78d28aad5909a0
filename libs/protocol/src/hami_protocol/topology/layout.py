"""Where devices sit on a node: PCI addresses, PCIe switches and roots, NUMA nodes, RDMA NICs.

Holds the topology model (:class:`GPUTopology`, :class:`RdmaNic` with its SR-IOV VF groups), the
codec of our node annotation ``hami.io/node-rdma-register``, and pure helpers that group devices by
PCIe switch or NUMA node and compare locality.  PCI bus ids are always kept in one canonical form
(:func:`normalize_pci_bus_id`) so ids from NVML, sysfs and annotations compare equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol, TypeVar

from hami_protocol import keys
from hami_protocol._goparse import GoJSONError, JSONObject, dump_go_json, load_go_json
from hami_protocol.errors import DecodeError, ValidationError
from hami_protocol.selectors import LabelSelector, label_key_problem, label_value_problem

__all__ = [
    "RDMA_DEVICE_TYPE",
    "RDMA_REGISTER_VERSION",
    "RDMA_RESOURCE",
    "RDMA_UNITS_PER_NIC",
    "GPUTopology",
    "Placed",
    "RdmaNic",
    "TopologyLevel",
    "VirtualFunction",
    "VirtualFunctionGroup",
    "bus_id_from_list_device_id",
    "decode_rdma_register",
    "encode_rdma_register",
    "gpu_topology",
    "group_by_numa",
    "group_by_pcie_switch",
    "list_device_id",
    "normalize_pci_bus_id",
    "normalize_pcie_root",
    "same_scope",
    "scope_id",
    "vfs_matching",
]

RDMA_REGISTER_VERSION = 1

RDMA_DEVICE_TYPE = "RDMA"
"""Type word of NIC/VF entries in ``hami.io/rdma-devices-to-allocate`` / ``-allocated``."""
RDMA_UNITS_PER_NIC = 100
"""Capacity of one NIC in ``koordinator.sh/rdma`` units (100 = the whole physical function)."""
RDMA_RESOURCE = "koordinator.sh/rdma"
"""The extended resource a pod asks RDMA NICs with (Koordinator's name)."""

# Domain: NVML writes 8 hex digits, sysfs 4 (more for VMD domains like 10000); lspci may omit it.
_BUS_ID_RE = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_ROOT_RE = re.compile(r"pci([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2})")
_IBDEV_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_INT32_MAX = 2**31 - 1


def normalize_pci_bus_id(value: str, *, annotation: str = "") -> str:
    """``domain:bus:device.function`` in lower case with an (at least) 4-digit domain.

    Accepts NVML's ``00000000:1F:00.0`` and a domain-less ``1f:00.0`` (domain 0).
    """
    match = _BUS_ID_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValidationError(annotation, value, "not a PCI bus id (domain:bus:device.function)")
    domain, bus, device, function = match.groups()
    if int(device, 16) > 0x1F:
        raise ValidationError(annotation, value, "PCI device number is above 1f")
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def normalize_pcie_root(value: str, *, annotation: str = "") -> str:
    """A PCIe root complex as sysfs names it: ``pci<domain>:<bus>``, e.g. ``pci0000:17``."""
    match = _ROOT_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValidationError(annotation, value, "not a PCIe root (pci<domain>:<bus>)")
    return f"pci{int(match.group(1), 16):04x}:{match.group(2).lower()}"


def list_device_id(bus_id: str, *, annotation: str = "") -> str:
    """A NIC's or VF's id for HAMi-style pod device lists: ``0000_1f_00.2``.

    Those lists end every device with ``:``, so a bus id cannot appear there verbatim.
    """
    return normalize_pci_bus_id(bus_id, annotation=annotation).replace(":", "_")


def bus_id_from_list_device_id(text: str, *, annotation: str = "") -> str:
    """Inverse of :func:`list_device_id` (the normalised bus id)."""
    if not isinstance(text, str) or ":" in text:
        raise ValidationError(annotation, text, "not a device-list PCI id (like 0000_1f_00.2)")
    return normalize_pci_bus_id(text.replace("_", ":"), annotation=annotation)


class Placed(Protocol):
    """Anything with a place in the PCIe/NUMA tree ("" = not known)."""

    @property
    def pcie_switch(self) -> str: ...
    @property
    def pcie_root(self) -> str: ...
    @property
    def numa(self) -> int: ...


@dataclass(frozen=True, slots=True)
class GPUTopology:
    """A GPU's place: its PCI address, PCIe switch (upstream-port BDF), root complex and NUMA."""

    uuid: str
    pci_bus_id: str = ""
    pcie_switch: str = ""
    pcie_root: str = ""
    numa: int = 0


def gpu_topology(
    uuid: str,
    *,
    pci_bus_id: str = "",
    pcie_switch: str = "",
    pcie_root: str = "",
    numa: int = 0,
    annotation: str = "",
) -> GPUTopology:
    """A :class:`GPUTopology` with every address normalised ("" stays unknown)."""
    if numa < 0:
        raise ValidationError(annotation, numa, f"{uuid}: numa must not be negative")
    return GPUTopology(
        uuid=uuid,
        pci_bus_id=_optional_bdf(pci_bus_id, annotation),
        pcie_switch=_optional_bdf(pcie_switch, annotation),
        pcie_root=normalize_pcie_root(pcie_root, annotation=annotation) if pcie_root else "",
        numa=numa,
    )


def _optional_bdf(value: str, annotation: str) -> str:
    return normalize_pci_bus_id(value, annotation=annotation) if value else ""


@dataclass(frozen=True, slots=True)
class VirtualFunction:
    """An SR-IOV VF: its PCI address and index (N of the PF's ``virtfnN``)."""

    bus_id: str
    minor: int = 0


def _frozen_labels(labels: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(sorted(labels.items())))


@dataclass(frozen=True, slots=True)
class VirtualFunctionGroup:
    """VFs sharing one set of labels (what a hint's ``vfSelector`` is matched against)."""

    vfs: tuple[VirtualFunction, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_labels(self.labels))


@dataclass(frozen=True, slots=True)
class RdmaNic:
    """An RDMA NIC's physical function.  ``id`` is the PF's PCI bus id, ``name`` its ibdev name."""

    id: str
    name: str
    minor: int = 0
    numa: int = 0
    pcie_switch: str = ""
    pcie_root: str = ""
    healthy: bool = False
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    vf_groups: tuple[VirtualFunctionGroup, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_labels(self.labels))

    @property
    def vfs(self) -> tuple[VirtualFunction, ...]:
        """Every VF of every group, lowest bus id first."""
        return tuple(sorted((vf for g in self.vf_groups for vf in g.vfs), key=lambda v: v.bus_id))


def vfs_matching(nic: RdmaNic, vf_selector: LabelSelector) -> tuple[VirtualFunction, ...]:
    """The VFs of the groups whose labels match (``{}`` matches unlabelled groups), by bus id."""
    chosen = (vf for g in nic.vf_groups if vf_selector.matches(g.labels) for vf in g.vfs)
    return tuple(sorted(chosen, key=lambda v: v.bus_id))


# --- locality ------------------------------------------------------------------------------------
class TopologyLevel(StrEnum):
    """How close two devices are, from closest to farthest."""

    PCIE_SWITCH = "pcieSwitch"
    PCIE_ROOT = "pcieRoot"
    NUMA = "numa"
    NODE = "node"


_P = TypeVar("_P", bound=Placed)
_T = TypeVar("_T")


def scope_id(device: Placed, level: TopologyLevel) -> str | None:
    """The id of the ``level`` scope that holds ``device``; None when that is not known."""
    if level is TopologyLevel.PCIE_SWITCH:
        return device.pcie_switch or None
    if level is TopologyLevel.PCIE_ROOT:
        return device.pcie_root or None
    if level is TopologyLevel.NUMA:
        return f"numa{device.numa}"
    return "node"


def same_scope(a: Placed, b: Placed, level: TopologyLevel) -> bool:
    """True when both devices are known to share the ``level`` scope (unknown never matches)."""
    scope = scope_id(a, level)
    return scope is not None and scope == scope_id(b, level)


def group_by_pcie_switch(devices: Iterable[_P]) -> dict[str, tuple[_P, ...]]:
    """Devices per PCIe switch, in first-seen order; devices with no known switch are left out."""
    groups: dict[str, list[_P]] = {}
    for device in devices:
        if device.pcie_switch:
            groups.setdefault(device.pcie_switch, []).append(device)
    return {switch: tuple(members) for switch, members in groups.items()}


def group_by_numa(devices: Iterable[_P]) -> dict[int, tuple[_P, ...]]:
    """Devices per NUMA node, in first-seen order."""
    groups: dict[int, list[_P]] = {}
    for device in devices:
        groups.setdefault(device.numa, []).append(device)
    return {numa: tuple(members) for numa, members in groups.items()}


# --- hami.io/node-rdma-register -----------------------------------------------------------
def encode_rdma_register(nics: Sequence[RdmaNic]) -> str:
    """The annotation value: ``{"v":1,"nics":[...]}``, zero-valued fields left out.

    Addresses are written normalised; NICs and VFs keep their order.  Raises
    :class:`ValidationError` for anything :func:`decode_rdma_register` would refuse.
    """
    key = keys.RDMA_REGISTER
    checked = [_checked_nic(nic, key, f"nics[{i}]") for i, nic in enumerate(nics)]
    _check_unique(checked, key)
    doc = {"v": RDMA_REGISTER_VERSION, "nics": [_nic_json(nic) for nic in checked]}
    return dump_go_json(doc)


def _nic_json(nic: RdmaNic) -> dict[str, object]:
    out: dict[str, object] = {"id": nic.id, "name": nic.name}
    optional: tuple[tuple[str, object], ...] = (
        ("minor", nic.minor),
        ("numa", nic.numa),
        ("pcieSwitch", nic.pcie_switch),
        ("pcieRoot", nic.pcie_root),
        ("health", nic.healthy),
        ("labels", dict(nic.labels)),
        ("vfGroups", [_group_json(group) for group in nic.vf_groups]),
    )
    out.update((name, value) for name, value in optional if value)
    return out


def _group_json(group: VirtualFunctionGroup) -> dict[str, object]:
    out: dict[str, object] = {}
    if group.labels:
        out["labels"] = dict(group.labels)
    if group.vfs:
        out["vfs"] = [
            {"minor": vf.minor, "busID": vf.bus_id} if vf.minor else {"busID": vf.bus_id}
            for vf in group.vfs
        ]
    return out


def decode_rdma_register(text: str) -> tuple[RdmaNic, ...]:
    """Decode ``hami.io/node-rdma-register``.

    Read as Go's ``encoding/json`` would read it (unknown fields ignored, so writers may add
    optional fields without a version bump); a different ``v`` is refused, as are malformed or
    duplicate NICs and VFs.  Addresses are normalised.
    """
    key = keys.RDMA_REGISTER
    if not isinstance(text, str):
        raise DecodeError(key, text, "annotation value must be a string")
    try:
        raw = load_go_json(text)
    except GoJSONError as exc:
        raise DecodeError(key, text, f"invalid JSON: {exc}") from None
    doc = _struct(raw, ("v", "nics"), key, "register")
    if doc.get("v") != RDMA_REGISTER_VERSION or type(doc.get("v")) is not int:
        want = f"unsupported version (this reader knows v={RDMA_REGISTER_VERSION})"
        raise ValidationError(key, doc.get("v"), want)
    nics = tuple(
        _checked_nic(_decode_nic(item, key, f"nics[{i}]"), key, f"nics[{i}]")
        for i, item in enumerate(_field(doc, "nics", list, key, "register"))
    )
    _check_unique(nics, key)
    return nics


_NIC_FIELDS: tuple[str, ...] = ("id", "name", "minor", "numa", "pcieSwitch", "pcieRoot")
_NIC_FIELDS += ("health", "labels", "vfGroups")


def _struct(value: object, names: tuple[str, ...], key: str, path: str) -> dict[str, object]:
    if not isinstance(value, JSONObject):
        raise DecodeError(key, value, f"{path} must be a JSON object")
    return value.go_fields(names)


def _field(obj: dict[str, object], name: str, kind: type[_T], key: str, path: str) -> _T:
    """Field ``name`` of type ``kind``; absent (or null) gives ``kind()``: "", 0, False, []."""
    value = obj.get(name)
    if value is None:
        return kind()
    if type(value) is not kind:
        raise DecodeError(key, value, f"{path}.{name} must be a {kind.__name__}")
    return value


def _labels(obj: dict[str, object], key: str, path: str) -> dict[str, str]:
    raw = obj.get("labels")
    if raw is None:
        return {}
    if not isinstance(raw, JSONObject) or not all(type(v) is str for _, v in raw.pairs):
        raise DecodeError(key, raw, f"{path}.labels must map strings to strings")
    return {name: str(value) for name, value in raw.pairs}


def _decode_vf(raw: object, key: str, path: str) -> VirtualFunction:
    obj = _struct(raw, ("busID", "minor"), key, path)
    return VirtualFunction(
        bus_id=_field(obj, "busID", str, key, path),
        minor=_field(obj, "minor", int, key, path),
    )


def _decode_group(raw: object, key: str, path: str) -> VirtualFunctionGroup:
    obj = _struct(raw, ("labels", "vfs"), key, path)
    vfs = _field(obj, "vfs", list, key, path)
    return VirtualFunctionGroup(
        vfs=tuple(_decode_vf(vf, key, f"{path}.vfs[{i}]") for i, vf in enumerate(vfs)),
        labels=_labels(obj, key, path),
    )


def _decode_nic(raw: object, key: str, path: str) -> RdmaNic:
    obj = _struct(raw, _NIC_FIELDS, key, path)
    groups = _field(obj, "vfGroups", list, key, path)
    return RdmaNic(
        id=_field(obj, "id", str, key, path),
        name=_field(obj, "name", str, key, path),
        minor=_field(obj, "minor", int, key, path),
        numa=_field(obj, "numa", int, key, path),
        pcie_switch=_field(obj, "pcieSwitch", str, key, path),
        pcie_root=_field(obj, "pcieRoot", str, key, path),
        healthy=_field(obj, "health", bool, key, path),
        labels=_labels(obj, key, path),
        vf_groups=tuple(
            _decode_group(g, key, f"{path}.vfGroups[{i}]") for i, g in enumerate(groups)
        ),
    )


def _check_labels(labels: Mapping[str, str], key: str, path: str) -> None:
    for name, value in labels.items():
        problem = label_key_problem(name) or label_value_problem(value)
        if problem:
            raise ValidationError(key, f"{name}={value}", f"{path}.labels: {problem}")


def _checked_nic(nic: RdmaNic, key: str, path: str) -> RdmaNic:
    """``nic`` with addresses normalised, or ValidationError naming the bad field."""
    if not _IBDEV_NAME_RE.fullmatch(nic.name):
        raise ValidationError(key, nic.name, f"{path}.name is not an RDMA device name")
    for name, number in (("minor", nic.minor), ("numa", nic.numa)):
        if not 0 <= number <= _INT32_MAX:
            raise ValidationError(key, number, f"{path}.{name} must be 0..2^31-1")
    _check_labels(nic.labels, key, path)
    groups = []
    for i, group in enumerate(nic.vf_groups):
        _check_labels(group.labels, key, f"{path}.vfGroups[{i}]")
        vfs = []
        for vf in group.vfs:
            if not 0 <= vf.minor <= _INT32_MAX:
                raise ValidationError(key, vf.minor, f"{path}: VF minor must be 0..2^31-1")
            vfs.append(replace(vf, bus_id=normalize_pci_bus_id(vf.bus_id, annotation=key)))
        groups.append(replace(group, vfs=tuple(vfs)))
    return replace(
        nic,
        id=normalize_pci_bus_id(nic.id, annotation=key),
        pcie_switch=_optional_bdf(nic.pcie_switch, key),
        pcie_root=normalize_pcie_root(nic.pcie_root, annotation=key) if nic.pcie_root else "",
        vf_groups=tuple(groups),
    )


def _check_unique(nics: Sequence[RdmaNic], key: str) -> None:
    """Names, minors and PCI addresses (PFs and VFs together) must each be unique."""
    for what, values in (
        ("PCI address", [n.id for n in nics] + [vf.bus_id for n in nics for vf in n.vfs]),
        ("name", [n.name for n in nics]),
        ("minor", [n.minor for n in nics]),
    ):
        seen: set[object] = set()
        for value in values:
            if value in seen:
                raise ValidationError(key, value, f"two entries share the {what}")
            seen.add(value)
