"""ResourceClaim status (written through ``/status`` only) and the ResourceClaimTemplate:
``validateResourceClaimStatusUpdate``, ``ValidateResourceClaimTemplate``, and the spec
immutability both kinds share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from hami_kubesim.objects.resource import names
from hami_kubesim.objects.resource.capacity import canonical_map, quantity_problem
from hami_kubesim.objects.resource.requests import (
    CONFIG_MAX,
    RequestNames,
    request_names,
    validate_claim_spec,
    validate_opaque,
    validate_request_ref,
)
from hami_kubesim.objects.validation import (
    Cause,
    duplicate,
    forbidden,
    invalid,
    required,
    too_many,
    unsupported,
    validate_meta_maps,
)

RESERVED_FOR_MAX: Final = 256
RESULTS_MAX: Final = 32
DEVICE_CONDITIONS_MAX: Final = 8
CONFIG_SOURCES: Final = ("FromClaim", "FromClass")
NOT_ALLOCATED: Final = "must be an allocated device in the claim"
_STATUS_META_KEPT: Final = ("labels", "annotations", "finalizers", "ownerReferences")


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def immutable_spec(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """``ValidateImmutableField(spec)`` (the value is printed as JSON, not as a Go struct)."""
    if new.get("spec") == old.get("spec"):
        return []
    return [invalid("spec", _shown(new.get("spec")), "field is immutable")]


def canonicalize_status(obj: dict[str, Any]) -> None:
    """``consumedCapacity`` quantities in canonical form, in place."""
    status = obj.get("status")
    if not isinstance(status, dict) or not isinstance(status.get("allocation"), dict):
        return
    allocation = status["allocation"]
    devices = allocation.get("devices")
    if not isinstance(devices, dict) or not isinstance(devices.get("results"), list):
        return
    results = devices["results"]
    fixed = [
        {**r, "consumedCapacity": canonical_map(r["consumedCapacity"])}
        if isinstance(r, Mapping) and "consumedCapacity" in r
        else r
        for r in results
    ]
    obj["status"] = {
        **status,
        "allocation": {**allocation, "devices": {**devices, "results": fixed}},
    }


def keep_meta_for_status(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """``ResetObjectMetaForStatus``: a status write keeps the stored labels, annotations,
    finalizers and owners.  ``new["metadata"]`` is replaced, not changed."""
    meta = dict(new["metadata"])
    for key in _STATUS_META_KEPT:
        if key in old["metadata"]:
            meta[key] = old["metadata"][key]
        else:
            meta.pop(key, None)
    new["metadata"] = meta


def _device_id(entry: Mapping[str, Any]) -> str:
    """``SharedDeviceID.String()``: ``driver/pool/device`` (``/shareID`` when shared)."""
    parts = [names.text(entry.get(k)) for k in ("driver", "pool", "device")]
    share = entry.get("shareID")
    return "/".join(parts + ([names.text(share)] if share is not None else []))


def validate_status(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """``ValidateResourceClaimStatusUpdate``."""
    status = new.get("status") or {}
    old_status = old.get("status") or {}
    if not isinstance(status, Mapping):
        return [invalid("status", _shown(status), "must be an object")]
    known = request_names(new.get("spec"))
    causes = _validate_reserved(status.get("reservedFor"))
    allocation = status.get("allocation")
    allocated = set()
    if isinstance(allocation, Mapping):
        results = (allocation.get("devices") or {}).get("results") or []
        allocated = {_device_id(r) for r in results if isinstance(r, Mapping)}
    causes.extend(_validate_device_statuses(status.get("devices"), allocated))
    reserved = status.get("reservedFor") or []
    if reserved:
        if allocation is None:
            causes.append(
                forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
            )
        elif new["metadata"].get("deletionTimestamp"):
            before = {_shown(r) for r in old_status.get("reservedFor") or ()}
            if any(_shown(r) not in before for r in reserved):
                causes.append(
                    forbidden(
                        "status.reservedFor",
                        "new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set",
                    )
                )
    old_allocation = old_status.get("allocation")
    if old_allocation is not None and allocation is not None:
        if allocation != old_allocation:
            causes.append(invalid("status.allocation", _shown(allocation), "field is immutable"))
    elif allocation is not None:
        causes.extend(_validate_allocation(allocation, known))
    return causes


def _validate_reserved(reserved: Any) -> list[Cause]:
    where = "status.reservedFor"
    if reserved is None:
        return []
    if not isinstance(reserved, list):
        return [invalid(where, _shown(reserved), "must be a list")]
    if len(reserved) > RESERVED_FOR_MAX:
        return [too_many(where, len(reserved), RESERVED_FOR_MAX)]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, ref in enumerate(reserved):
        at = f"{where}[{i}]"
        if not isinstance(ref, Mapping):
            causes.append(invalid(at, _shown(ref), "must be an object"))
            continue
        causes.extend(required(f"{at}.{k}") for k in ("resource", "name", "uid") if not ref.get(k))
        uid = names.text(ref.get("uid"))
        if uid in seen:
            causes.append(duplicate(at, uid))
        seen.add(uid)
    return causes


def _validate_device_statuses(devices: Any, allocated: set[str]) -> list[Cause]:
    where = "status.devices"
    if devices is None:
        return []
    if not isinstance(devices, list):
        return [invalid(where, _shown(devices), "must be a list")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        at = f"{where}[{i}]"
        if not isinstance(device, Mapping):
            causes.append(invalid(at, _shown(device), "must be an object"))
            continue
        causes.extend(_device_ref(at, device))
        key = _device_id(device)
        if key not in allocated:
            causes.append(invalid(at, key, NOT_ALLOCATED))
        conditions = device.get("conditions") or []
        if isinstance(conditions, list) and len(conditions) > DEVICE_CONDITIONS_MAX:
            causes.append(too_many(f"{at}.conditions", len(conditions), DEVICE_CONDITIONS_MAX))
        if key in seen:
            causes.append(duplicate(at, key))
        seen.add(key)
    return causes


def _device_ref(where: str, entry: Mapping[str, Any]) -> list[Cause]:
    """driver, pool, device and (when given) shareID of a result or a device status."""
    causes = names.driver_name(f"{where}.driver", entry.get("driver"))
    causes.extend(names.pool_name(f"{where}.pool", entry.get("pool")))
    causes.extend(names.dns_label(f"{where}.device", entry.get("device")))
    if entry.get("shareID") is not None:
        causes.extend(names.uid(f"{where}.shareID", entry["shareID"]))
    return causes


def _validate_allocation(allocation: Any, known: RequestNames) -> list[Cause]:
    where = "status.allocation"
    if not isinstance(allocation, Mapping):
        return [invalid(where, _shown(allocation), "must be an object")]
    devices = allocation.get("devices") or {}
    results = devices.get("results") or [] if isinstance(devices, Mapping) else []
    at = f"{where}.devices.results"
    if not isinstance(results, list):
        return [invalid(at, _shown(results), "must be a list")]
    if len(results) > RESULTS_MAX:
        return [too_many(at, len(results), RESULTS_MAX)]
    causes: list[Cause] = []
    for i, result in enumerate(results):
        if not isinstance(result, Mapping):
            causes.append(invalid(f"{at}[{i}]", _shown(result), "must be an object"))
            continue
        causes.extend(validate_request_ref(f"{at}[{i}].request", result.get("request"), known))
        causes.extend(_device_ref(f"{at}[{i}]", result))
        for key, amount in (result.get("consumedCapacity") or {}).items():
            causes.extend(quantity_problem(f"{at}[{i}].consumedCapacity[{key}]", amount))
    configs = devices.get("config") or [] if isinstance(devices, Mapping) else []
    at = f"{where}.devices.config"
    if isinstance(configs, list) and len(configs) > 2 * CONFIG_MAX:
        return [*causes, too_many(at, len(configs), 2 * CONFIG_MAX)]
    for i, config in enumerate(configs if isinstance(configs, list) else ()):
        if not isinstance(config, Mapping):
            causes.append(invalid(f"{at}[{i}]", _shown(config), "must be an object"))
            continue
        source = config.get("source")
        if not source:
            causes.append(required(f"{at}[{i}].source"))
        elif source not in CONFIG_SOURCES:
            causes.append(unsupported(f"{at}[{i}].source", source, CONFIG_SOURCES))
        for j, ref in enumerate(config.get("requests") or ()):
            causes.extend(validate_request_ref(f"{at}[{i}].requests[{j}]", ref, known))
        causes.extend(validate_opaque(f"{at}[{i}]", config))
    return causes


def validate_template(obj: Mapping[str, Any]) -> list[Cause]:
    """``validateResourceClaimTemplateSpec``: the claim metadata it copies and the claim
    spec."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return [invalid("spec", _shown(spec), "must be an object")]
    meta = spec.get("metadata") or {}
    causes = [
        (where.replace("metadata.", "spec.metadata.", 1), reason, message)
        for where, reason, message in validate_meta_maps(meta if isinstance(meta, Mapping) else {})
    ]
    causes.extend(validate_claim_spec("spec.spec", spec.get("spec")))
    return causes
