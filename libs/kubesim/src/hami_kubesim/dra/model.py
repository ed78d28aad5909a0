"""The allocator's view of ResourceSlice devices: frozen values read from the API's dicts.

Attribute and capacity names are kept *qualified* for CEL and constraints (an unqualified name
belongs to the driver's domain: ``model`` of driver ``gpu.hami.io`` is ``gpu.hami.io/model``),
while capacities are also kept under their *verbatim* published key, because a claim's
``capacity.requests`` keys are compared verbatim (contract §2.2: request ``memory`` matches only
capacity ``memory``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hami_kubesim.dra.quantities import QuantityError, exact_value, is_binary, quantity_value

__all__ = [
    "Attribute",
    "Capacity",
    "Device",
    "DeviceId",
    "InvalidObjectError",
    "RequestPolicy",
    "ValidRange",
    "parse_device",
    "qualify",
]


class InvalidObjectError(ValueError):
    """An API object the allocator cannot read (the API server would have refused it)."""


class DeviceId(NamedTuple):
    """``(driver, pool, device)``: how allocations name a device."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Attribute:
    """One attribute value; ``kind`` is the API field (``int``, ``bool``, ``string``,
    ``version``) so that constraints compare type and value together."""

    kind: str
    value: object


@dataclass(frozen=True, slots=True)
class ValidRange:
    min: int
    max: int | None
    step: int | None


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: int | None
    valid_values: tuple[int, ...] = ()
    valid_range: ValidRange | None = None


@dataclass(frozen=True, slots=True)
class Capacity:
    value: int
    exact: Any  # fractions.Fraction: what CEL sees (``device.capacity[...]`` is a Quantity)
    binary: bool  # printed with binary suffixes (``16Gi``) in consumedCapacity
    policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class Device:
    id: DeviceId
    attributes: Mapping[str, Attribute]  # qualified names
    capacity: Mapping[str, Capacity]  # verbatim published keys
    multi: bool  # allowMultipleAllocations
    node_local: bool  # from a slice with spec.nodeName, or bindsToNode
    node_selector: Mapping[str, Any] | None = None  # the slice's (or device's) selector
    taints: tuple[Mapping[str, Any], ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def qualify(name: str, driver: str) -> str:
    """The fully-qualified form of an attribute/capacity name (``index`` -> ``<driver>/index``)."""
    return name if "/" in name else f"{driver}/{name}"


def parse_device(
    raw: Mapping[str, Any],
    *,
    driver: str,
    pool: str,
    node_local: bool,
    node_selector: Mapping[str, Any] | None,
) -> Device:
    """One ``spec.devices[]`` entry of a ResourceSlice as the allocator uses it."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObjectError(f"pool {driver}/{pool}: a device has no name")
    where = f"device {driver}/{pool}/{name}"
    attributes = {
        qualify(key, driver): _attribute(value, where=f"{where} attribute {key}")
        for key, value in (raw.get("attributes") or {}).items()
    }
    try:
        capacity = {
            key: _capacity(value, where=f"{where} capacity {key}")
            for key, value in (raw.get("capacity") or {}).items()
        }
    except QuantityError as exc:
        raise InvalidObjectError(str(exc)) from exc
    return Device(
        id=DeviceId(driver, pool, name),
        attributes=attributes,
        capacity=capacity,
        multi=raw.get("allowMultipleAllocations") is True,
        node_local=node_local or raw.get("bindsToNode") is True,
        node_selector=raw.get("nodeSelector") or node_selector,
        taints=tuple(t for t in raw.get("taints") or () if isinstance(t, Mapping)),
        raw=raw,
    )


def _attribute(raw: object, *, where: str) -> Attribute:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise InvalidObjectError(f"{where}: exactly one of int, bool, string, version is required")
    ((kind, value),) = raw.items()
    valid = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "string": isinstance(value, str),
        "version": isinstance(value, str),
    }
    if not valid.get(kind, False):
        raise InvalidObjectError(f"{where}: unsupported attribute value {raw!r}")
    return Attribute(kind, value)


def _capacity(raw: object, *, where: str) -> Capacity:
    if not isinstance(raw, Mapping) or "value" not in raw:
        raise InvalidObjectError(f"{where}: a capacity needs a value")
    value = raw["value"]
    policy = raw.get("requestPolicy")
    return Capacity(
        value=quantity_value(value, where=where),
        exact=exact_value(value, where=where),
        binary=is_binary(value),
        policy=None if not isinstance(policy, Mapping) else _policy(policy, where=where),
    )


def _policy(raw: Mapping[str, Any], *, where: str) -> RequestPolicy:
    default = raw.get("default")
    values = raw.get("validValues") or ()
    span = raw.get("validRange")
    valid_range = None
    if isinstance(span, Mapping):
        valid_range = ValidRange(
            min=quantity_value(span.get("min", "0"), where=f"{where} validRange.min"),
            max=_optional(span.get("max"), where=f"{where} validRange.max"),
            step=_optional(span.get("step"), where=f"{where} validRange.step"),
        )
    return RequestPolicy(
        default=_optional(default, where=f"{where} requestPolicy.default"),
        valid_values=tuple(sorted(quantity_value(v, where=f"{where} validValues") for v in values)),
        valid_range=valid_range,
    )


def _optional(raw: object, *, where: str) -> int | None:
    return None if raw is None else quantity_value(raw, where=where)
