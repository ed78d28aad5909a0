"""CDI spec files (Container Device Interface, spec 1.1.0) as a container runtime reads them.

Pure: a spec file's text in, a :class:`CdiSpec` out (:func:`parse_spec_text`), and the
:class:`ContainerEdits` a list of fully-qualified device IDs (``<vendor>/<class>=<name>``)
makes on a container (:func:`resolve`). Reading the spec directories is the caller's job.

What is checked, as the CDI library does when it loads a spec: ``cdiVersion`` is a known
version and not lower than the features the file uses need (a device name starting with a digit
and a device node ``hostPath`` need 0.5.0, a mount ``type`` 0.4.0, annotations 0.6.0,
``additionalGids``/``intelRdt`` 0.7.0, ``netDevices`` 1.1.0), ``kind`` is ``<vendor>/<class>``,
every device has a valid name, and no field is unknown. A spec that fails is left out (its
devices are then unresolvable) and its error is reported with the unresolvable IDs.

What an ID brings: the spec's own ``containerEdits`` (once per spec, when any of its devices is
asked for) and the device's ``containerEdits``. Env entries ``NAME=value`` are appended (a later
one wins), mounts and device nodes are listed in order; hooks, ``additionalGids``, ``intelRdt``
and ``netDevices`` are accepted but not modelled (no process runs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

__all__ = [
    "CdiError",
    "CdiSpec",
    "ContainerEdits",
    "DeviceNode",
    "Mount",
    "parse_device_id",
    "parse_spec",
    "parse_spec_text",
    "resolve",
]

_VERSIONS: Final = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_VENDOR = re.compile(r"[A-Za-z](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")

_TOP_FIELDS: Final = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_FIELDS: Final = frozenset({"name", "annotations", "containerEdits"})
_EDIT_FIELDS: Final = frozenset(
    {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"}
)
_NODE_FIELDS: Final = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
_MOUNT_FIELDS: Final = frozenset({"hostPath", "containerPath", "type", "options"})
_HOOK_FIELDS: Final = frozenset({"hookName", "path", "args", "env", "timeout"})


class CdiError(ValueError):
    """A spec that cannot be loaded, or IDs that cannot be resolved; ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    host_path: str
    permissions: str


@dataclass(frozen=True, slots=True)
class Mount:
    container_path: str
    host_path: str
    options: tuple[str, ...] = ()

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """What CDI changes in a container (the parts a simulated container has)."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: int = 0
    """How many OCI hooks were asked for (not run here)."""

    def then(self, other: ContainerEdits) -> ContainerEdits:
        """These edits followed by ``other``'s."""
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
        )

    @property
    def env_map(self) -> dict[str, str]:
        """The env as the container sees it: ``NAME=value`` entries, a later one winning."""
        out: dict[str, str] = {}
        for entry in self.env:
            name, _, value = entry.partition("=")
            out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class CdiSpec:
    """One loaded spec file: ``kind`` (``vendor/class``), its edits and its devices' edits."""

    kind: str
    version: str
    source: str
    edits: ContainerEdits = ContainerEdits()
    devices: Mapping[str, ContainerEdits] = field(default_factory=dict)


def parse_device_id(device_id: str) -> tuple[str, str]:
    """``(kind, name)`` of a fully-qualified ID ``<vendor>/<class>=<name>``."""
    kind, sep, name = device_id.partition("=")
    vendor, slash, klass = kind.partition("/")
    if not (sep and slash and _VENDOR.fullmatch(vendor) and _CLASS.fullmatch(klass)):
        raise CdiError(f"invalid qualified device name {device_id!r}")
    if not _NAME.fullmatch(name):
        raise CdiError(f"invalid device name {name!r} in {device_id!r}")
    return kind, name


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CdiError(f"{what} must be an object")
    return value


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CdiError(f"{what} must be a list")
    return value


def _known(raw: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise CdiError(f"unknown field {unknown[0]!r} in {what}")


class _Needs:
    """The lowest spec version the features seen so far need, and the first that needed it."""

    def __init__(self) -> None:
        self.version, self.why = "0.3.0", ""

    def note(self, version: str, why: str) -> None:
        if _version_key(version) > _version_key(self.version):
            self.version, self.why = version, why


def _edits(raw: object, what: str, needs: _Needs) -> ContainerEdits:
    edits = _mapping(raw, what)
    _known(edits, _EDIT_FIELDS, what)
    env = tuple(str(e) for e in _list(edits.get("env"), f"{what}.env"))
    for entry in env:
        if "=" not in entry:
            raise CdiError(f"{what}.env entry {entry!r} is not NAME=value")
    nodes = []
    for raw_node in _list(edits.get("deviceNodes"), f"{what}.deviceNodes"):
        node = _mapping(raw_node, f"{what}.deviceNodes[]")
        _known(node, _NODE_FIELDS, f"{what}.deviceNodes[]")
        path = str(node.get("path") or "")
        if not path:
            raise CdiError(f"{what}.deviceNodes[] has no path")
        if node.get("hostPath"):
            needs.note("0.5.0", "a device node hostPath")
        host = str(node.get("hostPath") or path)
        nodes.append(DeviceNode(path, host, str(node.get("permissions") or "rwm")))
    mounts = []
    for raw_mount in _list(edits.get("mounts"), f"{what}.mounts"):
        mount = _mapping(raw_mount, f"{what}.mounts[]")
        _known(mount, _MOUNT_FIELDS, f"{what}.mounts[]")
        if not mount.get("containerPath") or not mount.get("hostPath"):
            raise CdiError(f"{what}.mounts[] needs hostPath and containerPath")
        if mount.get("type"):
            needs.note("0.4.0", "a mount type")
        options = tuple(str(o) for o in _list(mount.get("options"), f"{what}.mounts[].options"))
        mounts.append(Mount(str(mount["containerPath"]), str(mount["hostPath"]), options))
    hooks = _list(edits.get("hooks"), f"{what}.hooks")
    for hook in hooks:
        _known(_mapping(hook, f"{what}.hooks[]"), _HOOK_FIELDS, f"{what}.hooks[]")
    if "additionalGids" in edits:
        needs.note("0.7.0", "additionalGids")
    if "intelRdt" in edits:
        needs.note("0.7.0", "intelRdt")
    if "netDevices" in edits:
        needs.note("1.1.0", "netDevices")
    return ContainerEdits(env, tuple(nodes), tuple(mounts), len(hooks))


def parse_spec(raw: object, *, source: str = "") -> CdiSpec:
    """A decoded spec file as the runtime loads it; :class:`CdiError` when it would refuse it."""
    spec = _mapping(raw, "the spec")
    _known(spec, _TOP_FIELDS, "the spec")
    version = str(spec.get("cdiVersion") or "")
    if version not in _VERSIONS:
        raise CdiError(f"invalid cdiVersion {version!r}")
    kind = str(spec.get("kind") or "")
    vendor, slash, klass = kind.partition("/")
    if not (slash and _VENDOR.fullmatch(vendor) and _CLASS.fullmatch(klass)):
        raise CdiError(f"invalid kind {kind!r} (want <vendor>/<class>)")
    needs = _Needs()
    if "annotations" in spec:
        needs.note("0.6.0", "annotations")
    edits = _edits(spec.get("containerEdits"), "containerEdits", needs)
    devices: dict[str, ContainerEdits] = {}
    raw_devices = _list(spec.get("devices"), "devices")
    if not raw_devices:
        raise CdiError("the spec has no devices")
    for raw_device in raw_devices:
        device = _mapping(raw_device, "devices[]")
        _known(device, _DEVICE_FIELDS, "devices[]")
        name = str(device.get("name") or "")
        if not _NAME.fullmatch(name):
            raise CdiError(f"invalid device name {name!r}")
        if name[0].isdigit():
            needs.note("0.5.0", f"device name {name!r} (starts with a digit)")
        if "annotations" in device:
            needs.note("0.6.0", "annotations")
        if name in devices:
            raise CdiError(f"device {name!r} is defined twice")
        devices[name] = _edits(device.get("containerEdits"), f"device {name!r}", needs)
    if _version_key(version) < _version_key(needs.version):
        raise CdiError(f"cdiVersion {version} is too low: {needs.why} needs {needs.version}")
    return CdiSpec(kind=kind, version=version, source=source, edits=edits, devices=devices)


def parse_spec_text(text: str, *, source: str) -> CdiSpec:
    """A spec file's content (JSON for ``*.json``, else YAML, of which JSON is a subset)."""
    try:
        raw = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise CdiError(f"cannot decode: {error}") from error
    return parse_spec(raw, source=source)


def resolve(
    specs: Sequence[CdiSpec], device_ids: Iterable[str], *, spec_errors: Sequence[str] = ()
) -> ContainerEdits:
    """The edits ``device_ids`` make, from ``specs`` listed lowest priority first (a device
    defined again in a later spec overrides it, as ``/var/run/cdi`` overrides ``/etc/cdi``).

    :class:`CdiError` names every ID no spec defines (``spec_errors``, the files that could
    not be loaded, are added to the message)."""
    found: dict[tuple[str, str], CdiSpec] = {}
    for spec in specs:
        for name in spec.devices:
            found[(spec.kind, name)] = spec
    edits = ContainerEdits()
    applied: set[int] = set()
    missing: list[str] = []
    for device_id in dict.fromkeys(device_ids):
        try:
            key = parse_device_id(device_id)
        except CdiError:
            missing.append(device_id)
            continue
        owner = found.get(key)
        if owner is None:
            missing.append(device_id)
            continue
        if id(owner) not in applied:  # a spec's own edits come once, before its first device
            applied.add(id(owner))
            edits = edits.then(owner.edits)
        edits = edits.then(owner.devices[key[1]])
    if missing:
        message = f"unresolvable CDI devices {', '.join(missing)}"
        if spec_errors:
            message += f" (specs not loaded: {'; '.join(spec_errors)})"
        raise CdiError(message)
    return edits
