"""What a Node object says about its devices, read once per distinct annotation value.

:func:`read_node` turns a Node (decoded JSON) into :class:`NodeFacts`: per vendor its devices —
or the reason they cannot be read — from where the vendor's row says they are
(:attr:`Vendor.inventory <hami_protocol.vendor.model.Vendor.inventory>`):

* ``register-json`` / ``register-colon``: the register annotation
  (``hami.io/node-<x>-register``, :func:`~hami_protocol.node.registry.decode_node_devices`);
* ``capacity``: synthesised from ``status.capacity``
  (:func:`hami_protocol.vendor.capacity.synthesize`, HAMi's ids);
* ``vendor-annotation``: the vendor's own node annotation :attr:`Vendor.inventory_key`
  (:func:`hami_protocol.vendor.annotations.decode_inventory`: Enflame DRS, MetaX sGPU);

plus the RDMA NICs of ``hami.io/node-rdma-register`` (or why they cannot be read), the device
cordon, the GPU pair scores, each vendor's handshake value, whether the node advertises the
vendor's count resource (allocatable, and capacity for the ``capacity`` health rule) and the
node annotations vendor fits read (:data:`VENDOR_NODE_KEYS`).  A vendor whose input is bad has
an ``error`` naming the annotation or capacity resource; the node's other vendors are unaffected.

Decoding is the only costly part and annotations rarely change (a device plugin rewrites the
same value every 30 s), so a previous :class:`NodeFacts` can be passed in and its decoded
registrations are reused when the raw value is unchanged.  Nothing here raises on bad input:
whatever an annotation holds ends up as an ``error`` text naming the annotation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from hami_kube.objects import NodeView
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.pairscore import decode_pair_scores
from hami_protocol.node.registry import DeviceInfo, DevicePairScore, decode_node_devices
from hami_protocol.pod.policy import parse_device_cordon
from hami_protocol.request.quantity import parse_quantity
from hami_protocol.topology.layout import RdmaNic, decode_rdma_register
from hami_protocol.vendor.annotations import decode_inventory
from hami_protocol.vendor.capacity import synthesize
from hami_protocol.vendor.table import Vendor

__all__ = [
    "VENDOR_NODE_KEYS",
    "NodeFacts",
    "VendorRegistration",
    "capacity_resources",
    "foreign_register_key",
    "internal_ip",
    "read_node",
    "slim_node",
]

VENDOR_NODE_KEYS: Final = (
    keys.ASCEND_NODE_VNPU_CORE,
    keys.METAX_GPU_TOPOLOGY_LOSSES,
    keys.METAX_GPU_TOPOLOGY_SCORES,
)
"""Node annotations that vendor fits and scores read (Ascend's ``hami-vnpu-core``, MetaX's
topology losses and scores): kept by :func:`slim_node`, part of :attr:`NodeFacts.layout_key`."""


@dataclass(frozen=True, slots=True)
class VendorRegistration:
    """One vendor's register annotation: the raw value and its devices, or why it is unusable."""

    word: str
    key: str
    raw: str
    devices: tuple[DeviceInfo, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The device-related content of one Node object."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    registrations: tuple[VendorRegistration, ...] = ()
    """Vendors whose register annotation is present, in vendor-row order."""
    cordon: frozenset[str] = frozenset()
    pair_raw: str = ""
    pair_scores: tuple[DevicePairScore, ...] = ()
    pair_error: str = ""
    handshakes: Mapping[str, str | None] = field(default_factory=dict)
    """Vendor word → handshake value (``None`` when absent), for vendors with a handshake key."""
    allocatable: frozenset[str] = frozenset()
    """Vendor words whose count resource the node advertises as allocatable (> 0)."""
    capacity: frozenset[str] = frozenset()
    """Vendor words whose count resource the node's ``status.capacity`` holds (> 0)."""
    vendor_notes: tuple[tuple[str, str], ...] = ()
    """The :data:`VENDOR_NODE_KEYS` annotations the node carries, ``(key, value)``."""
    rdma_raw: str = ""
    """``hami.io/node-rdma-register`` as written (``""``: absent)."""
    nics: tuple[RdmaNic, ...] = ()
    rdma_error: str = ""
    """Why the RDMA register cannot be read (its NICs are then unusable)."""
    foreign: tuple[tuple[str, str], ...] = ()
    """Register-like annotations (``hami.io/node-…register…``) of vendors this scheduler does
    not handle, ``(key, value)``: never decoded or scheduled on, kept only so the GPU map shows
    them raw instead of hiding them (:func:`foreign_register_key`)."""
    address: str = ""
    """The node's ``InternalIP`` (``""``: none): where the GPU map may reach its vGPU monitor
    (``--gpumap-monitors`` with ``{node_ip}``)."""

    def registration(self, word: str) -> VendorRegistration | None:
        for registration in self.registrations:
            if registration.word == word:
                return registration
        return None

    def note(self, key: str) -> str | None:
        """The value of vendor node annotation ``key`` (one of :data:`VENDOR_NODE_KEYS`)."""
        for name, value in self.vendor_notes:
            if name == key:
                return value
        return None

    @property
    def layout_key(self) -> tuple[object, ...]:
        """What the node's device layout depends on (compared to skip rebuilds)."""
        return (
            tuple((r.word, r.raw) for r in self.registrations),
            self.cordon,
            self.pair_raw,
            self.vendor_notes,
        )

    @property
    def nic_key(self) -> tuple[object, ...]:
        """What the node's NIC layout depends on: the NICs and where the GPUs sit."""
        return (tuple((r.word, r.raw) for r in self.registrations), self.rdma_raw)


_FOREIGN_PREFIX: Final = "hami.io/node-"


def foreign_register_key(key: str, known: Collection[str]) -> bool:
    """Whether ``key`` looks like a vendor's device registration (``hami.io/node-<x>-register``,
    ``hami.io/node-register-<x>``) that none of ``known`` (the configured vendors' keys and
    the RDMA register) is."""
    return key.startswith(_FOREIGN_PREFIX) and "register" in key and key not in known


def _known_register_keys(vendors: Sequence[Vendor]) -> frozenset[str]:
    found = {keys.RDMA_REGISTER}
    for vendor in vendors:
        found.update(k for k in (vendor.register_key, vendor.inventory_key) if k is not None)
    return frozenset(found)


def _problem(key: str, exc: BaseException) -> str:
    reason = exc.reason if isinstance(exc, ProtocolError) else type(exc).__name__
    return f"node annotation {key} is invalid: {reason}"


def _decode(vendor: Vendor, key: str, raw: str) -> VendorRegistration:
    try:
        devices = decode_node_devices(raw, key=key)
    except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
        return VendorRegistration(vendor.common_word, key, raw, error=_problem(key, exc))
    return _unique(VendorRegistration(vendor.common_word, key, raw, devices=devices))


def _unique(registration: VendorRegistration) -> VendorRegistration:
    devices = registration.devices
    if len({device.id for device in devices}) == len(devices):
        return registration
    return VendorRegistration(
        registration.word,
        registration.key,
        registration.raw,
        error=f"node annotation {registration.key} lists a device twice",
    )


def _decode_vendor_annotation(vendor: Vendor, key: str, node: str, raw: str) -> VendorRegistration:
    try:
        devices = decode_inventory(key, node, raw)
    except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
        return VendorRegistration(vendor.common_word, key, raw, error=_problem(key, exc))
    return _unique(VendorRegistration(vendor.common_word, key, raw, devices=devices))


def _decode_rdma(raw: str) -> tuple[tuple[RdmaNic, ...], str]:
    try:
        return decode_rdma_register(raw), ""
    except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
        return (), _problem(keys.RDMA_REGISTER, exc)


def capacity_resources(vendor: Vendor) -> tuple[str, ...]:
    """The ``status.capacity`` resources the vendor's devices or health are read from."""
    names: list[str] = []
    spec = vendor.capacity
    if vendor.inventory == "capacity" and spec is not None:
        names += [spec.units_resource, spec.memory_resource or "", spec.cores_resource or ""]
    if vendor.health == "capacity":
        names.append(vendor.count_resource)
    return tuple(dict.fromkeys(name for name in names if name))


def _synthesised(
    vendor: Vendor,
    node: str,
    capacity: Mapping[str, Any],
    labels: Mapping[str, str],
    previous: VendorRegistration | None,
) -> VendorRegistration | None:
    """The devices HAMi derives from the node's capacity; ``None`` when it lists none of the
    vendor's resources."""
    names = capacity_resources(vendor)
    present = [name for name in names if name in capacity]
    if not present:
        return None
    raw = ",".join(f"{name}={capacity[name]}" for name in present)
    if vendor.capacity is not None and vendor.capacity.strategy == "awsneuron":
        raw += f",{keys.AWS_INSTANCE_TYPE_LABEL}={labels.get(keys.AWS_INSTANCE_TYPE_LABEL, '')}"
    if previous is not None and previous.raw == raw:
        return previous
    key = vendor.capacity.units_resource if vendor.capacity is not None else vendor.count_resource
    try:
        devices = synthesize(vendor, node, capacity, labels)
    except ProtocolError as exc:
        bad = exc.key or key
        return VendorRegistration(
            vendor.common_word, bad, raw, error=f"node capacity {bad} is invalid: {exc.reason}"
        )
    return VendorRegistration(vendor.common_word, key, raw, devices=devices)


def _advertised(counts: Mapping[str, Any], vendors: Sequence[Vendor]) -> frozenset[str]:
    found: set[str] = set()
    for vendor in vendors:
        raw = counts.get(vendor.count_resource)
        if raw is None:
            continue
        try:
            if parse_quantity(str(raw)) > 0:
                found.add(vendor.common_word)
        except ProtocolError:
            continue
    return frozenset(found)


def _inventory(
    vendor: Vendor,
    node: NodeView,
    annotations: Mapping[str, str],
    known: VendorRegistration | None,
) -> VendorRegistration | None:
    """The vendor's devices on ``node`` from where its row says they are (module doc)."""
    source = vendor.inventory
    if source == "capacity":
        return _synthesised(vendor, node.name, node.capacity, node.labels, known)
    key = vendor.inventory_key if source == "vendor-annotation" else vendor.register_key
    if key is None or key not in annotations:
        return None
    raw = annotations[key]
    if known is not None and known.raw == raw and known.key == key:
        return known
    if source == "vendor-annotation":
        return _decode_vendor_annotation(vendor, key, node.name, raw)
    return _decode(vendor, key, raw)


def read_node(
    obj: Mapping[str, Any], vendors: Sequence[Vendor], previous: NodeFacts | None = None
) -> NodeFacts:
    """The :class:`NodeFacts` of a Node; decoding is skipped for values ``previous`` holds."""
    node = NodeView(obj)
    annotations = node.annotations
    registrations: list[VendorRegistration] = []
    handshakes: dict[str, str | None] = {}
    for vendor in vendors:
        if vendor.handshake_key is not None:
            handshakes[vendor.common_word] = annotations.get(vendor.handshake_key)
        known = previous.registration(vendor.common_word) if previous is not None else None
        found = _inventory(vendor, node, annotations, known)
        if found is not None:
            registrations.append(found)
    pair_raw = annotations.get(keys.NVIDIA_SCORE, "")
    pair_scores: tuple[DevicePairScore, ...] = ()
    pair_error = ""
    if previous is not None and previous.pair_raw == pair_raw:
        pair_scores, pair_error = previous.pair_scores, previous.pair_error
    elif pair_raw:
        try:
            pair_scores = decode_pair_scores(pair_raw)
        except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
            pair_error = _problem(keys.NVIDIA_SCORE, exc)
    rdma_raw = annotations.get(keys.RDMA_REGISTER, "")
    nics: tuple[RdmaNic, ...] = ()
    rdma_error = ""
    if previous is not None and previous.rdma_raw == rdma_raw:
        nics, rdma_error = previous.nics, previous.rdma_error
    elif rdma_raw:
        nics, rdma_error = _decode_rdma(rdma_raw)
    handled = _known_register_keys(vendors)
    foreign = tuple(
        (key, value)
        for key, value in annotations.items()
        if foreign_register_key(key, handled) and isinstance(value, str)
    )
    return NodeFacts(
        name=node.name,
        labels=node.labels,
        registrations=tuple(registrations),
        cordon=parse_device_cordon(annotations.get(keys.DEVICE_CORDON)),
        pair_raw=pair_raw,
        pair_scores=pair_scores,
        pair_error=pair_error,
        handshakes=handshakes,
        allocatable=_advertised(node.allocatable, vendors),
        capacity=_advertised(node.capacity, vendors),
        vendor_notes=tuple((k, annotations[k]) for k in VENDOR_NODE_KEYS if k in annotations),
        rdma_raw=rdma_raw,
        nics=nics,
        rdma_error=rdma_error,
        foreign=foreign,
        address=internal_ip(obj),
    )


def internal_ip(obj: Mapping[str, Any]) -> str:
    """The Node's first ``InternalIP`` address (``""``: none)."""
    for address in NodeView(obj).addresses:
        if address.get("type") == "InternalIP" and isinstance(address.get("address"), str):
            return str(address["address"])
    return ""


def slim_node(obj: dict[str, Any], vendors: Sequence[Vendor]) -> None:
    """Drop, in place, everything of a watched Node that :func:`read_node` does not read.

    Real nodes carry kilobytes of status (images, conditions, addresses) the scheduler never
    looks at; the reflector would keep all of it.  What stays: name, resourceVersion, labels,
    the device annotations (and register-like ones of vendors not handled here, for the GPU
    map), the node locks (every vendor's key: bind decides on the cached
    copy), ``status.allocatable`` and the ``InternalIP`` address (the GPU map's way to a
    monitor on the host network).
    """
    node = NodeView(obj)
    wanted = {
        keys.NVIDIA_SCORE,
        keys.DEVICE_CORDON,
        keys.RDMA_REGISTER,
        keys.NODE_LOCK,
        keys.NODE_ALLOCATE_IDENTITY,
        *VENDOR_NODE_KEYS,
    }
    for vendor in vendors:
        own = (
            vendor.register_key,
            vendor.handshake_key,
            vendor.inventory_key,
            vendor.node_lock_key,
        )
        wanted.update(k for k in own if k is not None)
    meta = node.meta
    slim_meta: dict[str, Any] = {
        k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta
    }
    known = _known_register_keys(vendors)
    slim_meta["annotations"] = {
        k: v for k, v in node.annotations.items() if k in wanted or foreign_register_key(k, known)
    }
    allocatable = dict(node.allocatable)
    synthesised = {name for vendor in vendors for name in capacity_resources(vendor)}
    capacity = {k: v for k, v in node.capacity.items() if k in synthesised}
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    address = internal_ip(obj)
    obj.clear()
    obj["metadata"] = slim_meta
    status: dict[str, Any] = {"allocatable": allocatable} if allocatable else {}
    if capacity:
        status["capacity"] = capacity
    if address:
        status["addresses"] = [{"type": "InternalIP", "address": address}]
    obj["status"] = status
    if kind is not None:
        obj["kind"] = kind
    if api_version is not None:
        obj["apiVersion"] = api_version
