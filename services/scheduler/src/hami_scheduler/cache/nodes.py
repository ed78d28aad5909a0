"""What a Node object says about its devices, read once per distinct annotation value.

:func:`read_node` turns a Node (decoded JSON) into :class:`NodeFacts`: per vendor the register
annotation (``hami.io/node-<x>-register``, JSON or colon encoding) decoded into devices — or the
reason it could not be decoded — plus the RDMA NICs of ``hami.io/node-rdma-register`` (or why
they cannot be read), the device cordon, the GPU pair scores, each vendor's handshake value and
whether the node advertises the vendor's count resource.

Decoding is the only costly part and annotations rarely change (a device plugin rewrites the
same value every 30 s), so a previous :class:`NodeFacts` can be passed in and its decoded
registrations are reused when the raw value is unchanged.  Nothing here raises on bad input:
whatever an annotation holds ends up as an ``error`` text naming the annotation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_kube.objects import NodeView
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.capacity_devices import CapacitySynth
from hami_protocol.node.pairscore import decode_pair_scores
from hami_protocol.node.registry import DeviceInfo, DevicePairScore, decode_node_devices
from hami_protocol.pod.policy import parse_device_cordon
from hami_protocol.request.quantity import parse_quantity
from hami_protocol.topology.layout import RdmaNic, decode_rdma_register
from hami_protocol.vendor.table import Vendor
from hami_scheduler.cache.inventory import capacity_synth

__all__ = ["NodeFacts", "VendorRegistration", "read_node", "slim_node"]


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
    rdma_raw: str = ""
    """``hami.io/node-rdma-register`` as written (``""``: absent)."""
    nics: tuple[RdmaNic, ...] = ()
    rdma_error: str = ""
    """Why the RDMA register cannot be read (its NICs are then unusable)."""

    def registration(self, word: str) -> VendorRegistration | None:
        for registration in self.registrations:
            if registration.word == word:
                return registration
        return None

    @property
    def layout_key(self) -> tuple[object, ...]:
        """What the node's device layout depends on (compared to skip rebuilds)."""
        return (
            tuple((r.word, r.raw) for r in self.registrations),
            self.cordon,
            self.pair_raw,
        )

    @property
    def nic_key(self) -> tuple[object, ...]:
        """What the node's NIC layout depends on: the NICs and where the GPUs sit."""
        return (tuple((r.word, r.raw) for r in self.registrations), self.rdma_raw)


def _problem(key: str, exc: BaseException) -> str:
    reason = exc.reason if isinstance(exc, ProtocolError) else type(exc).__name__
    return f"node annotation {key} is invalid: {reason}"


def _decode(vendor: Vendor, key: str, raw: str) -> VendorRegistration:
    try:
        devices = decode_node_devices(raw, key=key)
    except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
        return VendorRegistration(vendor.common_word, key, raw, error=_problem(key, exc))
    if len({device.id for device in devices}) != len(devices):
        return VendorRegistration(
            vendor.common_word, key, raw, error=f"node annotation {key} lists a device twice"
        )
    return VendorRegistration(vendor.common_word, key, raw, devices=devices)


def _decode_rdma(raw: str) -> tuple[tuple[RdmaNic, ...], str]:
    try:
        return decode_rdma_register(raw), ""
    except (ProtocolError, ValueError, RecursionError, TypeError) as exc:
        return (), _problem(keys.RDMA_REGISTER, exc)


def _capacity_units(capacity: Mapping[str, Any], names: Sequence[str]) -> dict[str, int]:
    """The named resources of ``capacity`` as integers (an unreadable quantity reads as 0)."""
    units: dict[str, int] = {}
    for name in names:
        raw = capacity.get(name)
        if raw is None:
            continue
        try:
            units[name] = int(parse_quantity(str(raw)))
        except ProtocolError:
            units[name] = 0
    return units


def _synthesised(
    vendor: Vendor, synth: CapacitySynth, node: str, capacity: Mapping[str, Any]
) -> VendorRegistration | None:
    """The devices HAMi derives from the node's capacity, when it lists the count resource."""
    if vendor.count_resource not in capacity:
        return None
    units = _capacity_units(capacity, vendor.managed_resources)
    raw = ",".join(f"{name}={units[name]}" for name in sorted(units))
    key = vendor.count_resource
    try:
        devices = synth(node, units)
    except ProtocolError as exc:
        bad = exc.key or key
        return VendorRegistration(
            vendor.common_word, bad, raw, error=f"node capacity {bad} is invalid: {exc.reason}"
        )
    return VendorRegistration(vendor.common_word, key, raw, devices=devices)


def _allocatable(allocatable: Mapping[str, Any], vendors: Sequence[Vendor]) -> frozenset[str]:
    found: set[str] = set()
    for vendor in vendors:
        raw = allocatable.get(vendor.count_resource)
        if raw is None:
            continue
        try:
            if parse_quantity(str(raw)) > 0:
                found.add(vendor.common_word)
        except ProtocolError:
            continue
    return frozenset(found)


def read_node(
    obj: Mapping[str, Any], vendors: Sequence[Vendor], previous: NodeFacts | None = None
) -> NodeFacts:
    """The :class:`NodeFacts` of a Node; decoding is skipped for values ``previous`` holds."""
    node = NodeView(obj)
    annotations = node.annotations
    registrations: list[VendorRegistration] = []
    handshakes: dict[str, str | None] = {}
    for vendor in vendors:
        key = vendor.register_key
        if vendor.handshake_key is not None:
            handshakes[vendor.common_word] = annotations.get(vendor.handshake_key)
        if key is None:
            synth = capacity_synth(vendor)
            if synth is not None:
                found = _synthesised(vendor, synth, node.name, node.capacity)
                if found is not None:
                    known = previous.registration(vendor.common_word) if previous else None
                    registrations.append(known if known and known.raw == found.raw else found)
            continue
        if key not in annotations:
            continue
        raw = annotations[key]
        known = previous.registration(vendor.common_word) if previous is not None else None
        registrations.append(known if known and known.raw == raw else _decode(vendor, key, raw))
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
    return NodeFacts(
        name=node.name,
        labels=node.labels,
        registrations=tuple(registrations),
        cordon=parse_device_cordon(annotations.get(keys.DEVICE_CORDON)),
        pair_raw=pair_raw,
        pair_scores=pair_scores,
        pair_error=pair_error,
        handshakes=handshakes,
        allocatable=_allocatable(node.allocatable, vendors),
        rdma_raw=rdma_raw,
        nics=nics,
        rdma_error=rdma_error,
    )


def slim_node(obj: dict[str, Any], vendors: Sequence[Vendor]) -> None:
    """Drop, in place, everything of a watched Node that :func:`read_node` does not read.

    Real nodes carry kilobytes of status (images, conditions, addresses) the scheduler never
    looks at; the reflector would keep all of it.  What stays: name, resourceVersion, labels,
    the device annotations, the node locks (every vendor's key: bind decides on the cached
    copy) and
    ``status.allocatable``.
    """
    node = NodeView(obj)
    wanted = {
        keys.NVIDIA_SCORE,
        keys.DEVICE_CORDON,
        keys.RDMA_REGISTER,
        keys.NODE_LOCK,
        keys.NODE_ALLOCATE_IDENTITY,
    }
    for vendor in vendors:
        own = (vendor.register_key, vendor.handshake_key, vendor.node_lock_key)
        wanted.update(k for k in own if k is not None)
    meta = node.meta
    slim_meta: dict[str, Any] = {
        k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta
    }
    slim_meta["annotations"] = {k: v for k, v in node.annotations.items() if k in wanted}
    allocatable = dict(node.allocatable)
    synthesised = {
        name
        for vendor in vendors
        if vendor.register_key is None and capacity_synth(vendor) is not None
        for name in vendor.managed_resources
    }
    capacity = {k: v for k, v in node.capacity.items() if k in synthesised}
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    obj.clear()
    obj["metadata"] = slim_meta
    status: dict[str, Any] = {"allocatable": allocatable} if allocatable else {}
    if capacity:
        status["capacity"] = capacity
    obj["status"] = status
    if kind is not None:
        obj["kind"] = kind
    if api_version is not None:
        obj["apiVersion"] = api_version
