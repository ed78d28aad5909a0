"""Pure: the facts the map needs from one ResourceSlice or ResourceClaim of driver
``gpu.hami.io`` (:mod:`hami_protocol.dra_driver`), as plain frozen data.

The API server has validated both objects, so what does not read (a missing attribute, a
quantity that does not parse) is taken as absent rather than refused: the map shows what it can.
Memory is in MiB (floor of the byte quantities: a sum of floors never exceeds the floor of the
sum, so "Σ consumed ≤ capacity" survives the conversion), cores in percent points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from hami_protocol.dra_driver import (
    ATTR_INDEX,
    ATTR_MODEL,
    ATTR_NUMA,
    ATTR_UUID,
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    DRIVER,
    attribute_value,
)
from hami_protocol.errors import ProtocolError
from hami_protocol.request.quantity import json_quantity

__all__ = [
    "MIB",
    "ClaimFacts",
    "PodRef",
    "PublishedDevice",
    "ResultFacts",
    "SliceFacts",
    "allocated_here",
    "read_claim",
    "read_slice",
]

MIB: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """One device of a slice: a GPU as the node agent publishes it."""

    name: str
    uuid: str
    model: str
    index: int | None
    numa: int | None
    memory: int
    """``capacity.memory`` in MiB (0: not published)."""
    cores: int
    """``capacity.cores`` (100 per whole GPU; 0: not published)."""
    shared: bool
    """``allowMultipleAllocations``: several claims may hold shares of it."""


@dataclass(frozen=True, slots=True)
class SliceFacts:
    name: str
    node: str
    """``spec.nodeName`` (empty: a slice for several nodes, which this driver never writes)."""
    pool: str
    generation: int
    devices: tuple[PublishedDevice, ...]


@dataclass(frozen=True, slots=True)
class PodRef:
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ResultFacts:
    """One ``status.allocation.devices.results[]`` entry of this driver."""

    request: str
    pool: str
    device: str
    share_id: str | None
    """Set for a share of a multi-allocatable device; None: the device is held whole."""
    memory: int | None
    """``consumedCapacity.memory`` in MiB; None: not listed."""
    cores: int | None
    admin: bool
    """``adminAccess``: monitoring access the allocator does not count as usage."""


@dataclass(frozen=True, slots=True)
class ClaimFacts:
    namespace: str
    name: str
    uid: str
    node: str
    """The node ``status.allocation.nodeSelector`` names (empty: none named)."""
    pods: tuple[PodRef, ...]
    """``status.reservedFor`` pods, in their order."""
    results: tuple[ResultFacts, ...]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _amount(raw: object, key: str) -> int | None:
    if raw is None:
        return None
    try:
        value = json_quantity(raw, key=key)
    except ProtocolError:
        return None
    return int(value) if value >= 0 else None


def _mib(raw: object, key: str) -> int | None:
    amount = _amount(raw, key)
    return None if amount is None else amount // MIB


def _device(raw: object) -> PublishedDevice | None:
    device = _map(raw)
    name = _str(device.get("name"))
    if not name:
        return None
    attributes = _map(device.get("attributes"))
    capacity = _map(device.get("capacity"))
    memory = _mib(_map(capacity.get(CAPACITY_MEMORY)).get("value"), CAPACITY_MEMORY)
    cores = _amount(_map(capacity.get(CAPACITY_CORES)).get("value"), CAPACITY_CORES)
    return PublishedDevice(
        name=name,
        uuid=_str(attribute_value(attributes, ATTR_UUID)),
        model=_str(attribute_value(attributes, ATTR_MODEL)),
        index=_int(attribute_value(attributes, ATTR_INDEX)),
        numa=_int(attribute_value(attributes, ATTR_NUMA)),
        memory=memory or 0,
        cores=cores or 0,
        shared=device.get("allowMultipleAllocations") is True,
    )


def read_slice(obj: Mapping[str, Any]) -> SliceFacts | None:
    """The slice's facts; None when it is not one of this driver's."""
    spec = _map(obj.get("spec"))
    if spec.get("driver") != DRIVER:
        return None
    pool = _map(spec.get("pool"))
    devices = (_device(raw) for raw in _list(spec.get("devices")))
    return SliceFacts(
        name=_str(_map(obj.get("metadata")).get("name")),
        node=_str(spec.get("nodeName")),
        pool=_str(pool.get("name")),
        generation=_int(pool.get("generation")) or 0,
        devices=tuple(d for d in devices if d is not None),
    )


def _results(allocation: Mapping[str, Any]) -> tuple[ResultFacts, ...]:
    found: list[ResultFacts] = []
    for raw in _list(_map(allocation.get("devices")).get("results")):
        result = _map(raw)
        if result.get("driver") != DRIVER:
            continue
        consumed = _map(result.get("consumedCapacity"))
        share = _str(result.get("shareID"))
        found.append(
            ResultFacts(
                request=_str(result.get("request")),
                pool=_str(result.get("pool")),
                device=_str(result.get("device")),
                share_id=share or None,
                memory=_mib(consumed.get(CAPACITY_MEMORY), CAPACITY_MEMORY),
                cores=_amount(consumed.get(CAPACITY_CORES), CAPACITY_CORES),
                admin=result.get("adminAccess") is True,
            )
        )
    return tuple(found)


def _selected_node(allocation: Mapping[str, Any]) -> str:
    """The one node ``nodeSelector`` names (``metadata.name In [node]``, as the allocator
    writes it for node-local devices), else empty."""
    for term in _list(_map(allocation.get("nodeSelector")).get("nodeSelectorTerms")):
        for field in _list(_map(term).get("matchFields")):
            entry = _map(field)
            values = _list(entry.get("values"))
            if entry.get("key") == "metadata.name" and len(values) == 1:
                return _str(values[0])
    return ""


def _pods(status: Mapping[str, Any]) -> tuple[PodRef, ...]:
    pods: list[PodRef] = []
    for raw in _list(status.get("reservedFor")):
        entry = _map(raw)
        if entry.get("resource") == "pods" and entry.get("apiGroup", "") in ("", None):
            pods.append(PodRef(_str(entry.get("name")), _str(entry.get("uid"))))
    return tuple(pods)


def allocated_here(obj: Mapping[str, Any]) -> bool:
    """The claim is allocated with at least one device of this driver (the watch keeps only
    such claims)."""
    allocation = _map(_map(obj.get("status")).get("allocation"))
    results = _list(_map(allocation.get("devices")).get("results"))
    return any(_map(result).get("driver") == DRIVER for result in results)


def read_claim(obj: Mapping[str, Any]) -> ClaimFacts | None:
    """The claim's facts; None when nothing of this driver is allocated to it."""
    status = _map(obj.get("status"))
    allocation = _map(status.get("allocation"))
    results = _results(allocation)
    if not results:
        return None
    metadata = _map(obj.get("metadata"))
    return ClaimFacts(
        namespace=_str(metadata.get("namespace")),
        name=_str(metadata.get("name")),
        uid=_str(metadata.get("uid")),
        node=_selected_node(allocation),
        pods=_pods(status),
        results=results,
    )
