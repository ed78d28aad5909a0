"""A vendor's devices on one node: what its plugin publishes, and how the scheduler reads it back.

:class:`VendorDevices` is one ``nodes[].vendors[]`` entry of the cluster file (see
:mod:`hami_kubesim.cluster.config`).  From it, for its :class:`~.profiles.Profile`:

* :func:`node_annotations` — the register annotation (HAMi's JSON, with ``custominfo`` where the
  plugin writes one: Ascend's ``NetworkID`` (0 for NPUs 0–3, 1 above; 910C always 0), Vastai's
  ``AIC`` and ``DeviceStrategy: die``; or the colon form) plus the handshake ``Reported …``;
  or the vendor's own annotation (Enflame's ``gcu-drs-capacity``, MetaX's
  ``node-gpu-devices``).  ``annotations`` in the entry replace what would be written (a
  garbage register, for tests);
* :func:`kubelet_devices` — the device IDs each kubelet resource advertises: the count resource
  has ``split`` replicas per device; capacity vendors also serve their memory (in the vendor's
  unit) and core resources, one ID per unit, so node capacity says what HAMi synthesizes from;
* :func:`node_inventory` — the devices as HAMi's scheduler derives them from a node object
  (§1: register decoded, capacity synthesized, vendor annotation parsed), which the invariants
  hold pods' allocations against.  Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hami_kube.objects import NodeView
from hami_kubesim.vendors.profiles import Profile, profile_for
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.handshake import format_reported
from hami_protocol.node.registry import (
    DeviceInfo,
    custom_info,
    decode_node_devices,
    encode_node_devices_colon,
    encode_node_devices_json,
)
from hami_protocol.vendor.annotations import (
    DrsCapacity,
    DrsDevice,
    MetaxSDevice,
    decode_inventory,
    encode_drs_capacity,
    encode_metax_sgpu,
)
from hami_protocol.vendor.capacity import synthesize

__all__ = [
    "AWS_INSTANCE_TYPE_LABEL",
    "VendorDevices",
    "device_ids",
    "kubelet_devices",
    "node_annotations",
    "node_inventory",
    "node_labels",
]

AWS_INSTANCE_TYPE_LABEL = keys.AWS_INSTANCE_TYPE_LABEL
_ASCEND_910C = "Ascend910C"
_MIB_PER_GB = 1024


@dataclass(frozen=True, slots=True)
class VendorDevices:
    """One vendor's devices on a node, as its device plugin sees them."""

    vendor: str
    """The common word (``DCU``, ``Ascend910B3``, ``MLU``, ``Metax-SGPU``, ``AWSNeuron`` …)."""
    devices: int = 1
    memory_mib: int = 0
    """Per device (0: the vendor's default)."""
    cores: int = 0
    """Per device: percent, AMD compute units, Mthreads cores, AWS NeuronCores (0: default)."""
    split: int = 0
    """Tasks per device: register ``count``, kubelet replicas, Enflame DRS slices (0: default)."""
    type: str = ""
    numa_nodes: int = 1
    unhealthy: frozenset[int] = frozenset()
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Written as given instead of what the plugin would write (bad-input tests)."""
    unserved: frozenset[str] = frozenset()
    """Resources the plugin does not advertise though its vendor has them (bad-input tests: a
    capacity vendor's count without its memory resource)."""
    report_interval: float = 30.0
    instance_type: str = "trn1.32xlarge"
    qos_policy: str = "best-effort"

    @property
    def profile(self) -> Profile:
        return profile_for(self.vendor)

    @property
    def memory(self) -> int:
        return self.memory_mib or self.profile.default_memory_mib

    @property
    def core_count(self) -> int:
        return self.cores or self.profile.default_cores

    @property
    def slots(self) -> int:
        if self.split:
            return self.split
        whole = self.profile.inventory == "capacity" and self.vendor not in ("MLU", "Mthreads")
        return 1 if whole else (6 if self.vendor == "Enflame" else 10)

    @property
    def device_type(self) -> str:
        return self.type or self.profile.default_type

    def numa(self, index: int) -> int:
        per = max(1, -(-self.devices // max(1, self.numa_nodes)))
        return index // per


def device_ids(spec: VendorDevices, node: str) -> tuple[str, ...]:
    """The IDs the scheduler will know the devices by (synthesized ones for capacity vendors)."""
    profile = spec.profile
    if profile.inventory == "capacity":
        return tuple(profile.device_id(node, i) for i in range(spec.devices))
    if spec.vendor == "Enflame":
        # DRS devices are named by the scheduler from the capacity annotation's indices.
        key = profile.register_key or ""
        return tuple(d.id for d in decode_inventory(key, node, _enflame_drs(spec)))
    if spec.vendor == "Metax-SGPU":
        return tuple(_uuid("GPU", node, spec.vendor, i) for i in range(spec.devices))
    return tuple(_uuid(spec.vendor, node, spec.vendor, i) for i in range(spec.devices))


def _uuid(prefix: str, node: str, vendor: str, index: int) -> str:
    digest = hashlib.sha1(f"{node}/{vendor}/{index}".encode()).hexdigest()
    return f"{prefix}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _register_devices(spec: VendorDevices, node: str) -> list[DeviceInfo]:
    return [
        DeviceInfo(
            id=uuid,
            index=i,
            count=spec.slots,
            devmem=spec.memory,
            devcore=spec.core_count,
            type=spec.device_type,
            numa=spec.numa(i),
            health=i not in spec.unhealthy,
            device_vendor=spec.vendor if spec.profile.inventory == "register-json" else "",
            custom_info=custom_info(_custom_info(spec, i) or {}),
        )
        for i, uuid in enumerate(device_ids(spec, node))
    ]


def _custom_info(spec: VendorDevices, index: int) -> dict[str, Any] | None:
    if spec.vendor.startswith("Ascend910"):
        return {"NetworkID": 0 if spec.vendor == _ASCEND_910C or index <= 3 else 1}
    if spec.vendor == "Vastai":
        # The plugin runs with --device-strategy=die: each device is one die of a two-die card.
        return {"AIC": str(index // 2), "DeviceStrategy": "die"}
    return None


def _enflame_drs(spec: VendorDevices) -> str:
    slices = spec.slots
    per_slice_gb = max(1, spec.memory // _MIB_PER_GB // slices)
    sizes = sorted({1, *(s for s in (2, 3, slices) if s <= slices)})
    profiles = {f"{s}g.{s * per_slice_gb}gb": str(i) for i, s in enumerate(sizes)}
    devices = tuple(DrsDevice(str(i), str(i), slices) for i in range(spec.devices))
    return encode_drs_capacity(DrsCapacity(devices, profiles))


def _metax_sgpu(spec: VendorDevices, node: str) -> str:
    return encode_metax_sgpu(
        [
            MetaxSDevice(
                uuid=uuid,
                total_dev_count=spec.slots,
                total_compute=spec.core_count,
                total_vram=spec.memory,
                bdf=f"0000:{0x10 + i:02x}:00.0",
                model=spec.device_type,
                available_dev_count=spec.slots,
                available_compute=spec.core_count,
                available_vram=spec.memory,
                numa=spec.numa(i),
                healthy=i not in spec.unhealthy,
                qos_policy=spec.qos_policy,
                link_zone=1 + i // 4,
            )
            for i, uuid in enumerate(device_ids(spec, node))
        ]
    )


def handshake_value(spec: VendorDevices, now: datetime) -> str:
    """``Reported <now>``; Ascend's plugin writes ``Reported_<2006.01.02 15:04:05>``."""
    if spec.profile.handshake_style == "ascend":
        return f"Reported_{now:%Y.%m.%d %H:%M:%S}"
    return format_reported(now)


def node_annotations(spec: VendorDevices, node: str, now: datetime) -> dict[str, str]:
    """What the plugin writes on its node at each report (empty for capacity vendors)."""
    profile = spec.profile
    written: dict[str, str] = {}
    if profile.register_key is not None:
        devices = _register_devices(spec, node)
        if profile.inventory == "register-colon":
            written[profile.register_key] = encode_node_devices_colon(devices)
        elif profile.inventory == "register-json":
            written[profile.register_key] = encode_node_devices_json(devices)
        elif spec.vendor == "Enflame":
            written[profile.register_key] = _enflame_drs(spec)
        else:
            written[profile.register_key] = _metax_sgpu(spec, node)
    if profile.handshake_key is not None:
        written[profile.handshake_key] = handshake_value(spec, now)
    return {**written, **spec.annotations}


def node_labels(spec: VendorDevices) -> dict[str, str]:
    return {AWS_INSTANCE_TYPE_LABEL: spec.instance_type} if spec.vendor == "AWSNeuron" else {}


def kubelet_devices(spec: VendorDevices, node: str) -> dict[str, list[tuple[str, bool]]]:
    """``resource → [(device ID, healthy)]`` for every resource the plugin serves."""
    profile = spec.profile
    served: dict[str, list[tuple[str, bool]]] = {}
    ids = device_ids(spec, node)
    served[profile.count_resource] = [
        (f"{uuid}-{k}" if spec.slots > 1 else uuid, i not in spec.unhealthy)
        for i, uuid in enumerate(ids)
        for k in range(spec.slots)
    ]
    if profile.inventory == "capacity":
        if profile.memory_resource:
            units = spec.memory // profile.memory_unit_mib
            served[profile.memory_resource] = _units(ids, spec, units, "mem")
        if profile.cores_resource:
            served[profile.cores_resource] = _units(ids, spec, spec.core_count, "core")
    return {name: ids for name, ids in served.items() if name not in spec.unserved}


def _units(
    ids: tuple[str, ...], spec: VendorDevices, per_device: int, what: str
) -> list[tuple[str, bool]]:
    return [
        (f"{uuid}-{what}-{k}", i not in spec.unhealthy)
        for i, uuid in enumerate(ids)
        for k in range(per_device)
    ]


# --- reading back, as the scheduler does ----------------------------------------------------------


def node_inventory(profile: Profile, node: Mapping[str, Any]) -> tuple[DeviceInfo, ...] | None:
    """The vendor's devices on ``node`` as HAMi's scheduler derives them; ``()`` when it has
    none, ``None`` when what the node says does not decode."""
    view = NodeView(node)
    key = profile.register_key or ""
    raw = view.annotations.get(key)
    try:
        if profile.inventory == "capacity":
            return synthesize(profile.row, view.name, view.capacity, view.labels)
        if not raw:
            return ()
        if profile.inventory == "vendor-annotation":
            return decode_inventory(key, view.name, raw)
        return decode_node_devices(raw, key=key)
    except (ProtocolError, ValueError):
        return None
