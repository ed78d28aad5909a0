"""ResourceClaims as the allocator reads them: what a claim asks for, and what claims already hold.

:func:`parse_claim` turns ``spec.devices`` into :class:`ClaimSpec` (requests with their
``exactly`` or ``firstAvailable`` alternatives, constraints, configs).  :func:`allocated_state`
sums what existing allocations hold (contract §2.3): an ``adminAccess`` result holds nothing, a
result with a ``shareID`` holds its ``consumedCapacity`` of a shared device, any other result
holds the whole device.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_kubesim.dra.model import DeviceId, InvalidObjectError
from hami_kubesim.dra.quantities import QuantityError, quantity_value

__all__ = [
    "AllocatedState",
    "ClaimSpec",
    "Constraint",
    "DeviceRequest",
    "Request",
    "allocated_state",
    "claim_key",
    "parse_claim",
]

MAX_DEVICES_PER_CLAIM = 32


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One way to satisfy a request: the ``exactly`` part, or one ``firstAvailable`` entry."""

    name: str  # the result's ``request``: ``<req>`` or ``<req>/<sub>``
    class_name: str
    selectors: tuple[str, ...]
    all_devices: bool  # allocationMode All
    count: int
    admin_access: bool = False
    tolerations: tuple[Mapping[str, Any], ...] = ()
    capacity: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    name: str
    alternatives: tuple[DeviceRequest, ...]  # one for ``exactly``, in order for firstAvailable


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request of the claim
    match_attribute: str = ""
    distinct_attribute: str = ""

    def applies_to(self, request: str) -> bool:
        parent = request.split("/", 1)[0]
        return not self.requests or request in self.requests or parent in self.requests


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    key: str  # namespace/name
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatedState:
    """What allocations already hold, across every claim but those being allocated."""

    exclusive: frozenset[DeviceId] = frozenset()
    consumed: Mapping[DeviceId, Mapping[str, int]] = field(default_factory=dict)
    share_ids: frozenset[tuple[DeviceId, str]] = frozenset()


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def parse_claim(claim: Mapping[str, Any]) -> ClaimSpec:
    """The allocator's view of a ResourceClaim (``spec.devices``).

    Raises :class:`InvalidObjectError` for what the API server's validation would have refused."""
    key = claim_key(claim)
    devices = ((claim.get("spec") or {}).get("devices")) or {}
    requests = tuple(_request(raw, key) for raw in devices.get("requests") or ())
    constraints = tuple(
        Constraint(
            requests=tuple(str(r) for r in raw.get("requests") or ()),
            match_attribute=str(raw.get("matchAttribute") or ""),
            distinct_attribute=str(raw.get("distinctAttribute") or ""),
        )
        for raw in devices.get("constraints") or ()
        if isinstance(raw, Mapping)
    )
    config = tuple(c for c in devices.get("config") or () if isinstance(c, Mapping))
    return ClaimSpec(key, requests, constraints, config)


def _request(raw: object, claim: str) -> Request:
    if not isinstance(raw, Mapping) or not raw.get("name"):
        raise InvalidObjectError(f"claim {claim}: a request has no name")
    name = str(raw["name"])
    exactly = raw.get("exactly")
    subrequests = raw.get("firstAvailable")
    if isinstance(exactly, Mapping) == isinstance(subrequests, list):
        raise InvalidObjectError(
            f"claim {claim}, request {name}: exactly one of exactly, firstAvailable"
        )
    if isinstance(exactly, Mapping) or not isinstance(subrequests, list):
        return Request(name, (_device_request(exactly or {}, name, claim),))
    alternatives = tuple(
        _device_request(sub, f"{name}/{sub.get('name')}", claim)
        for sub in subrequests
        if isinstance(sub, Mapping)
    )
    return Request(name, alternatives)


def _device_request(raw: Mapping[str, Any], name: str, claim: str) -> DeviceRequest:
    where = f"claim {claim}, request {name}"
    class_name = raw.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise InvalidObjectError(f"{where}: deviceClassName is required")
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise InvalidObjectError(f"{where}: unsupported allocationMode {mode!r}")
    count = raw.get("count", 1) if mode == "ExactCount" else 0
    if (
        not isinstance(count, int)
        or isinstance(count, bool)
        or (mode == "ExactCount" and count < 1)
    ):
        raise InvalidObjectError(f"{where}: count must be a positive integer")
    try:
        capacity = {
            str(k): quantity_value(v, where=f"{where} capacity {k}")
            for k, v in ((raw.get("capacity") or {}).get("requests") or {}).items()
        }
    except QuantityError as exc:
        raise InvalidObjectError(str(exc)) from exc
    return DeviceRequest(
        name=name,
        class_name=class_name,
        selectors=tuple(_selectors(raw.get("selectors"))),
        all_devices=mode == "All",
        count=count,
        admin_access=raw.get("adminAccess") is True,
        tolerations=tuple(t for t in raw.get("tolerations") or () if isinstance(t, Mapping)),
        capacity=capacity,
    )


def _selectors(raw: object) -> Iterable[str]:
    for selector in raw if isinstance(raw, list) else ():
        expression = ((selector or {}).get("cel") or {}).get("expression")
        if isinstance(expression, str):
            yield expression


def allocated_state(allocations: Iterable[Mapping[str, Any] | None]) -> AllocatedState:
    """Sum what the given ``status.allocation`` objects hold (``None`` entries are skipped)."""
    exclusive: set[DeviceId] = set()
    consumed: dict[DeviceId, dict[str, int]] = {}
    share_ids: set[tuple[DeviceId, str]] = set()
    for allocation in allocations:
        results = ((allocation or {}).get("devices") or {}).get("results") or ()
        for result in results:
            if not isinstance(result, Mapping) or result.get("adminAccess") is True:
                continue
            device = DeviceId(
                str(result.get("driver")), str(result.get("pool")), str(result.get("device"))
            )
            share = result.get("shareID")
            if not share:
                exclusive.add(device)
                continue
            share_ids.add((device, str(share)))
            held = consumed.setdefault(device, {})
            for name, amount in (result.get("consumedCapacity") or {}).items():
                try:
                    value = quantity_value(amount, where=f"{device} consumedCapacity {name}")
                except QuantityError:
                    continue  # the API server never stores such a value
                held[name] = held.get(name, 0) + value
    return AllocatedState(frozenset(exclusive), consumed, frozenset(share_ids))
