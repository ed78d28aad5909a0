"""What the device plugins (and DRA drivers) gave each container of a pod, and its JSON form.

The records (:class:`PodAllocation` of :class:`ContainerAllocation` of
:class:`ResourceAllocation`) are what the kubelet stand-in keeps per admitted pod; their JSON
is stored in the emulator's own pod annotation ``kubesim.hami.io/container-allocations``
(written, and read back by :func:`parse_allocation_record` as the checkpoint of a pod that was
running before the stand-in saw it):
``{"node": N, "containers": [{"name", "kind": init|sidecar|app, "resources": [{"resource",
"deviceIDs", "envs", "mounts", "devices", "annotations", "cdiDevices"}]}]}``.
Pure; kept apart from the status builders of :mod:`.builders`, which never read them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami_kube.objects import PodView
from hami_kubesim.kubelet.deviceplugins.devices import ContainerKind

ALLOCATIONS_ANNOTATION = "kubesim.hami.io/container-allocations"
CLAIM_RESOURCE_PREFIX = "claim:"
"""Records of DRA claims are named ``claim:<pod claim>[/<request>]`` (as the kubelet names
them in container statuses); device-plugin resource names never contain ``:``."""


@dataclass(frozen=True, slots=True)
class MountRecord:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class DeviceSpecRecord:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True, slots=True)
class ResourceAllocation:
    """One ``ContainerAllocateResponse`` and the device IDs it was asked for."""

    resource: str
    device_ids: tuple[str, ...]
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[MountRecord, ...] = ()
    devices: tuple[DeviceSpecRecord, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "deviceIDs": list(self.device_ids),
            "envs": dict(sorted(self.envs.items())),
            "mounts": [
                {
                    "containerPath": m.container_path,
                    "hostPath": m.host_path,
                    "readOnly": m.read_only,
                }
                for m in self.mounts
            ],
            "devices": [
                {
                    "containerPath": d.container_path,
                    "hostPath": d.host_path,
                    "permissions": d.permissions,
                }
                for d in self.devices
            ],
            "annotations": dict(sorted(self.annotations.items())),
            "cdiDevices": list(self.cdi_devices),
        }


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """Everything one container was given, one entry per device-plugin resource."""

    name: str
    kind: ContainerKind
    resources: tuple[ResourceAllocation, ...] = ()

    @property
    def envs(self) -> dict[str, str]:
        """Env from every resource merged in order, as the runtime would see it."""
        merged: dict[str, str] = {}
        for allocation in self.resources:
            merged.update(allocation.envs)
        return merged

    def resource(self, name: str) -> ResourceAllocation | None:
        return next((r for r in self.resources if r.resource == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "resources": [r.to_json() for r in self.resources],
        }


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """What a kubelet stand-in gave one pod's containers, init containers first."""

    namespace: str
    name: str
    uid: str
    node: str
    containers: tuple[ContainerAllocation, ...] = ()

    def container(self, name: str) -> ContainerAllocation | None:
        return next((c for c in self.containers if c.name == name), None)

    @property
    def has_devices(self) -> bool:
        return any(c.resources for c in self.containers)

    def with_resources(self, extra: Mapping[str, tuple[ResourceAllocation, ...]]) -> PodAllocation:
        """Each container's records followed by ``extra``'s for it (its DRA claims)."""
        return replace(
            self,
            containers=tuple(
                replace(c, resources=c.resources + extra.get(c.name, ())) for c in self.containers
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "containers": [c.to_json() for c in self.containers]}

    def annotation_value(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=False)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _text_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _resource_from_json(raw: object) -> ResourceAllocation | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("resource"), str):
        return None
    mounts = [m for m in raw.get("mounts") or () if isinstance(m, Mapping)]
    devices = [d for d in raw.get("devices") or () if isinstance(d, Mapping)]
    return ResourceAllocation(
        resource=raw["resource"],
        device_ids=_strings(raw.get("deviceIDs")),
        envs=_text_map(raw.get("envs")),
        mounts=tuple(
            MountRecord(
                str(m.get("containerPath", "")), str(m.get("hostPath", "")), bool(m.get("readOnly"))
            )
            for m in mounts
        ),
        devices=tuple(
            DeviceSpecRecord(
                str(d.get("containerPath", "")),
                str(d.get("hostPath", "")),
                str(d.get("permissions", "")),
            )
            for d in devices
        ),
        annotations=_text_map(raw.get("annotations")),
        cdi_devices=_strings(raw.get("cdiDevices")),
    )


_KINDS: dict[str, ContainerKind] = {"init": "init", "sidecar": "sidecar", "app": "app"}


def parse_allocation_record(value: str, *, pod: PodView) -> PodAllocation | None:
    """The :class:`PodAllocation` an ``ALLOCATIONS_ANNOTATION`` value records for ``pod`` — the
    stand-in's checkpoint of a pod it did not admit itself; ``None`` when unreadable.  Entries
    that are not well formed are left out."""
    try:
        record = json.loads(value)
    except ValueError:
        return None
    if not isinstance(record, Mapping):
        return None
    containers = []
    for raw in record.get("containers") or ():
        if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
            continue
        resources = (_resource_from_json(r) for r in raw.get("resources") or ())
        containers.append(
            ContainerAllocation(
                raw["name"],
                _KINDS.get(str(raw.get("kind")), "app"),
                tuple(r for r in resources if r is not None),
            )
        )
    return PodAllocation(
        namespace=pod.namespace or "default",
        name=pod.name,
        uid=pod.uid,
        node=str(record.get("node") or ""),
        containers=tuple(containers),
    )
