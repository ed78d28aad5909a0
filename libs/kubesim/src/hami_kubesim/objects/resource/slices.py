"""ResourceSlice: ``validateResourceSliceSpec`` / ``validateDevice`` and the update rules
(``pool.name``, ``driver`` and ``nodeName`` immutable; the generation bumps on spec changes).

Not checked: node selectors beyond "one term", taints, counters, binding conditions and
``nodeAllocatableResourceMappings`` (kept as given)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from hami_kubesim.objects.resource import names
from hami_kubesim.objects.resource.capacity import canonical_capacities, validate_capacity
from hami_kubesim.objects.validation import (
    Cause,
    duplicate,
    invalid,
    required,
    too_long,
    too_many,
)

MAX_DEVICES: Final = 128
MAX_DEVICES_WITH_ADVANCED: Final = 64
"""With taints, counters or list attributes on any device."""
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
ATTRIBUTE_VALUE_MAX: Final = 64
_SCOPES: Final = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)
_DEVICE_SCOPES: Final = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
)
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$"
)
_SCALAR_ATTRIBUTES: Final = ("bool", "int", "string", "version")
_LIST_ATTRIBUTES: Final = ("bools", "ints", "strings", "versions")


def canonicalize(obj: dict[str, Any]) -> None:
    """Quantities in canonical form, in place (``obj`` belongs to the request)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), list):
        return
    spec["devices"] = [
        {**d, "capacity": canonical_capacities(d["capacity"])}
        if isinstance(d, dict) and "capacity" in d
        else d
        for d in spec["devices"]
    ]


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _scope(spec: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    chosen: list[str] = []
    node = spec.get("nodeName")
    if node is not None:
        if node:
            chosen.append("`nodeName`")
            causes.extend(names.node_name("spec.nodeName", node))
        else:
            causes.append(
                invalid("spec.nodeName", node, "must be either unset or set to a non-empty string")
            )
    selector = spec.get("nodeSelector")
    if selector is not None:
        chosen.append("`nodeSelector`")
        terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
        if not isinstance(terms, list) or len(terms) != 1:
            causes.append(
                invalid(
                    "spec.nodeSelector.nodeSelectorTerms",
                    _shown(terms),
                    "must have exactly one node selector term",
                )
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        flag = spec.get(key)
        if flag is True:
            chosen.append(f"`{key}`")
        elif flag is not None:
            causes.append(invalid(f"spec.{key}", flag, "must be either unset or set to true"))
    if not chosen:
        causes.append(required("spec", _SCOPES))
    elif len(chosen) > 1:
        causes.append(
            invalid(
                "spec", "{" + ", ".join(chosen) + "}", f"{_SCOPES}, but multiple fields are set"
            )
        )
    return causes


def _advanced(devices: list[Any]) -> bool:
    for device in devices:
        if not isinstance(device, Mapping):
            continue
        if device.get("taints") or device.get("consumesCounters"):
            return True
        attributes = device.get("attributes")
        if isinstance(attributes, Mapping) and any(
            isinstance(a, Mapping) and any(k in a for k in _LIST_ATTRIBUTES)
            for a in attributes.values()
        ):
            return True
    return False


def validate_spec(spec: Any, old_spec: Mapping[str, Any] | None = None) -> list[Cause]:
    """``validateResourceSliceSpec`` (``old_spec`` on updates)."""
    if not isinstance(spec, Mapping):
        return [required("spec")]
    causes = names.driver_name("spec.driver", spec.get("driver"))
    given_pool = spec.get("pool")
    pool: Mapping[str, Any] = given_pool if isinstance(given_pool, Mapping) else {}
    causes.extend(names.pool_name("spec.pool.name", pool.get("name")))
    count = pool.get("resourceSliceCount", 0)
    if not isinstance(count, int) or count <= 0:
        causes.append(invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or generation < 0:
        causes.append(
            invalid("spec.pool.generation", generation, "must be greater than or equal to zero")
        )
    if old_spec is not None:
        old_pool = old_spec.get("pool") or {}
        for where, new, old in (
            ("spec.pool.name", pool.get("name"), old_pool.get("name")),
            ("spec.driver", spec.get("driver"), old_spec.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName")),
        ):
            if new != old:
                causes.append(invalid(where, new, "field is immutable"))
    causes.extend(_scope(spec))
    devices = spec.get("devices")
    if spec.get("sharedCounters") is not None and devices is not None:
        causes.append(invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    if devices is None:
        return causes
    if not isinstance(devices, list):
        return [*causes, invalid("spec.devices", _shown(devices), "must be a list")]
    limit = MAX_DEVICES_WITH_ADVANCED if _advanced(devices) else MAX_DEVICES
    if len(devices) > limit:
        return [*causes, too_many("spec.devices", len(devices), limit)]
    per_device = spec.get("perDeviceNodeSelection") is True
    seen: set[str] = set()
    for i, device in enumerate(devices):
        where = f"spec.devices[{i}]"
        if not isinstance(device, Mapping):
            causes.append(invalid(where, _shown(device), "must be an object"))
            continue
        causes.extend(_validate_device(where, device, per_device=per_device))
        name = names.text(device.get("name"))
        if name in seen:
            causes.append(duplicate(where, name))
        seen.add(name)
    return causes


def _validate_device(where: str, device: Mapping[str, Any], *, per_device: bool) -> list[Cause]:
    causes = names.dns_label(f"{where}.name", device.get("name"))
    attributes = device.get("attributes") or {}
    capacities = device.get("capacity") or {}
    if not isinstance(attributes, Mapping) or not isinstance(capacities, Mapping):
        return [*causes, invalid(where, _shown(device), "attributes and capacity must be maps")]
    total = len(attributes) + len(capacities)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        causes.append(
            invalid(
                where,
                total,
                "the total number of attributes and capacities must not exceed "
                f"{MAX_ATTRIBUTES_AND_CAPACITIES}",
            )
        )
    for key, attribute in attributes.items():
        causes.extend(names.qualified_name(f"{where}.attributes", key))
        causes.extend(_validate_attribute(f"{where}.attributes[{key}]", attribute))
    multi = device.get("allowMultipleAllocations") is True
    for key, capacity in capacities.items():
        causes.extend(names.qualified_name(f"{where}.capacity", key))
        causes.extend(validate_capacity(f"{where}.capacity[{key}]", capacity, multi=multi))
    causes.extend(_device_scope(where, device, per_device=per_device))
    return causes


def _validate_attribute(where: str, attribute: Any) -> list[Cause]:
    if not isinstance(attribute, Mapping):
        return [invalid(where, _shown(attribute), "exactly one value must be specified")]
    given = [k for k in (*_SCALAR_ATTRIBUTES, *_LIST_ATTRIBUTES) if attribute.get(k) is not None]
    if len(given) != 1:
        shown = "" if not given else _shown(attribute)
        return [invalid(where, shown, "exactly one value must be specified")]
    kind = given[0]
    value = attribute[kind]
    causes: list[Cause] = []
    if kind in ("string", "version") and isinstance(value, str):
        if kind == "version" and not _SEMVER.match(value):
            causes.append(
                invalid(
                    f"{where}.version",
                    value,
                    "must be a string compatible with semver.org spec 2.0.0",
                )
            )
        if len(value) > ATTRIBUTE_VALUE_MAX:
            causes.append(too_long(f"{where}.{kind}", ATTRIBUTE_VALUE_MAX))
    elif kind in _LIST_ATTRIBUTES and not value:
        causes.append(invalid(f"{where}.{kind}", _shown(value), "must not be empty if specified"))
    return causes


def _device_scope(where: str, device: Mapping[str, Any], *, per_device: bool) -> list[Cause]:
    present = [k for k in ("nodeName", "nodeSelector", "allNodes") if device.get(k) is not None]
    if not per_device:
        if present:
            return [
                invalid(
                    where,
                    "null",
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                )
            ]
        return []
    causes: list[Cause] = []
    chosen: list[str] = []
    node = device.get("nodeName")
    if node is not None:
        if node:
            chosen.append("`nodeName`")
            causes.extend(names.node_name(f"{where}.nodeName", node))
        else:
            causes.append(invalid(f"{where}.nodeName", node, "must not be empty"))
    if device.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
    flag = device.get("allNodes")
    if flag is True:
        chosen.append("`allNodes`")
    elif flag is not None:
        causes.append(invalid(f"{where}.allNodes", flag, "must be either unset or set to true"))
    if not chosen:
        causes.append(required(where, _DEVICE_SCOPES))
    elif len(chosen) > 1:
        causes.append(invalid(where, "{" + ", ".join(chosen) + "}", _DEVICE_SCOPES))
    return causes
