"""What claims (and templates) and DeviceClasses ask for: ``validateDeviceClaim`` (requests,
``exactly`` / ``firstAvailable``, constraints, config), ``validateDeviceClassSpec``, the CEL
selector limits and ``SetDefaults_ExactDeviceRequest`` / ``..._DeviceSubRequest``.

CEL expressions are length-checked only: the real server also compiles them (and estimates
their cost); here a bad expression first fails when the scheduler evaluates it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from hami_kubesim.objects.resource import names
from hami_kubesim.objects.resource.capacity import canonical_map, quantity_problem
from hami_kubesim.objects.validation import (
    Cause,
    duplicate,
    invalid,
    required,
    too_long,
    too_many,
    unsupported,
)

REQUESTS_MAX: Final = 32
SELECTORS_MAX: Final = 32
CONSTRAINTS_MAX: Final = 32
CONFIG_MAX: Final = 32
FIRST_AVAILABLE_MAX: Final = 8
TOLERATIONS_MAX: Final = 16
CEL_MAX_LENGTH: Final = 10 * 1024
OPAQUE_PARAMETERS_MAX: Final = 10 * 1024
EXACT_COUNT: Final = "ExactCount"
ALL: Final = "All"
REQUEST_REF: Final = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)
_BOTH_REQUEST_KINDS: Final = "exactly one of `exactly` or `firstAvailable` is required"
_CONSTRAINT_KINDS: Final = (
    'exactly one of "matchAttribute" or "distinctAttribute" is required, '
    "but multiple fields are set"
)


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _as_list(where: str, value: Any, limit: int) -> tuple[list[Any], list[Cause]]:
    """``value`` as a list (``None`` is empty) and the size error ``validateSlice`` gives."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [invalid(where, _shown(value), "must be a list")]
    if len(value) > limit:
        return [], [too_many(where, len(value), limit)]
    return value, []


# ----- defaults ------------------------------------------------------------------------
def _default_request_body(body: Any) -> Any:
    if not isinstance(body, Mapping):
        return body
    out = dict(body)
    if not out.get("allocationMode"):
        out["allocationMode"] = EXACT_COUNT
    if out["allocationMode"] == EXACT_COUNT and not out.get("count"):
        out["count"] = 1
    capacity = out.get("capacity")
    if isinstance(capacity, Mapping) and "requests" in capacity:
        out["capacity"] = {**capacity, "requests": canonical_map(capacity["requests"])}
    tolerations = out.get("tolerations")
    if isinstance(tolerations, list):
        out["tolerations"] = [
            {"operator": "Equal", **t} if isinstance(t, Mapping) and not t.get("operator") else t
            for t in tolerations
        ]
    return out


def default_claim_spec(spec: Any) -> Any:
    """``spec`` (a ResourceClaimSpec) with the request defaults applied; a fresh dict along
    the changed path."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("devices"), Mapping):
        return spec
    devices = dict(spec["devices"])
    requests = devices.get("requests")
    if isinstance(requests, list):
        fixed = []
        for given in requests:
            request = dict(given) if isinstance(given, Mapping) else given
            if isinstance(request, dict):
                if "exactly" in request:
                    request["exactly"] = _default_request_body(request["exactly"])
                if isinstance(request.get("firstAvailable"), list):
                    request["firstAvailable"] = [
                        _default_request_body(s) for s in request["firstAvailable"]
                    ]
            fixed.append(request)
        devices["requests"] = fixed
    return {**spec, "devices": devices}


# ----- claims --------------------------------------------------------------------------
RequestNames = dict[str, set[str] | None]


def request_names(spec: Any) -> RequestNames:
    """``gatherRequestNames``: each request name and, for ``firstAvailable``, its
    subrequests."""
    out: RequestNames = {}
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    for request in (devices or {}).get("requests") or ():
        if not isinstance(request, Mapping):
            continue
        subs = request.get("firstAvailable")
        out[names.text(request.get("name"))] = (
            {names.text(s.get("name")) for s in subs if isinstance(s, Mapping)} if subs else None
        )
    return out


def _known(ref: str, known: RequestNames) -> bool:
    parts = ref.split("/")
    if len(parts) > 2 or parts[0] not in known:
        return False
    return len(parts) == 1 or parts[1] in (known[parts[0]] or set())


def validate_request_ref(where: str, ref: Any, known: RequestNames) -> list[Cause]:
    """``validateRequestNameRef``: ``<request>`` or ``<request>/<subrequest>`` of this claim."""
    name = names.text(ref)
    parts = name.split("/")
    if len(parts) > 2:
        return [invalid(where, name, REQUEST_REF)]
    causes = [c for part in parts for c in names.dns_label(where, part)]
    if not _known(name, known):
        causes.append(invalid(where, name, REQUEST_REF))
    return causes


def _validate_refs(where: str, refs: Any, known: RequestNames) -> list[Cause]:
    items, causes = _as_list(where, refs, REQUESTS_MAX)
    seen: set[str] = set()
    for i, ref in enumerate(items):
        causes.extend(validate_request_ref(f"{where}[{i}]", ref, known))
        if ref in seen:
            causes.append(duplicate(f"{where}[{i}]", ref))
        seen.add(names.text(ref))
    return causes


def validate_claim_spec(where: str, spec: Any) -> list[Cause]:
    """``validateResourceClaimSpec`` at ``where`` (``spec`` or ``spec.spec``)."""
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return [invalid(where, _shown(spec), "must be an object")]
    devices = spec.get("devices") or {}
    if not isinstance(devices, Mapping):
        return [invalid(f"{where}.devices", _shown(devices), "must be an object")]
    base = f"{where}.devices"
    known = request_names(spec)
    requests, causes = _as_list(f"{base}.requests", devices.get("requests"), REQUESTS_MAX)
    causes.extend(_each_unique(f"{base}.requests", requests, _validate_request))
    constraints, more = _as_list(f"{base}.constraints", devices.get("constraints"), CONSTRAINTS_MAX)
    causes.extend(more)
    for i, constraint in enumerate(constraints):
        causes.extend(_validate_constraint(f"{base}.constraints[{i}]", constraint, known))
    configs, more = _as_list(f"{base}.config", devices.get("config"), CONFIG_MAX)
    causes.extend(more)
    for i, config in enumerate(configs):
        at = f"{base}.config[{i}]"
        if not isinstance(config, Mapping):
            causes.append(invalid(at, _shown(config), "must be an object"))
            continue
        causes.extend(_validate_refs(f"{at}.requests", config.get("requests"), known))
        causes.extend(validate_opaque(at, config))
    return causes


def _each_unique(
    where: str, items: list[Any], check: Callable[[str, Mapping[str, Any]], list[Cause]]
) -> list[Cause]:
    """``validateSet`` keyed by ``name``: each item checked, repeated names refused."""
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            causes.append(invalid(at, _shown(item), "must be an object"))
            continue
        causes.extend(check(at, item))
    for i, item in enumerate(items):
        name = names.text(item.get("name")) if isinstance(item, Mapping) else ""
        if name in seen:
            causes.append(duplicate(f"{where}[{i}]", name))
        seen.add(name)
    return causes


def _validate_request(where: str, request: Mapping[str, Any]) -> list[Cause]:
    causes = names.dns_label(f"{where}.name", request.get("name"))
    subrequests = request.get("firstAvailable")
    exactly = request.get("exactly")
    has_first, has_exactly = bool(subrequests), exactly is not None
    if not has_first and not has_exactly:
        return [*causes, required(where, _BOTH_REQUEST_KINDS)]
    if has_first and has_exactly:
        return [
            *causes,
            invalid(where, "null", f"{_BOTH_REQUEST_KINDS}, but multiple fields are set"),
        ]
    if has_exactly:
        if not isinstance(exactly, Mapping):
            return [*causes, invalid(f"{where}.exactly", _shown(exactly), "must be an object")]
        return [*causes, *_validate_body(f"{where}.exactly", exactly)]
    subs, more = _as_list(f"{where}.firstAvailable", subrequests, FIRST_AVAILABLE_MAX)
    causes.extend(more)
    causes.extend(_each_unique(f"{where}.firstAvailable", subs, _validate_subrequest))
    return causes


def _validate_subrequest(where: str, sub: Mapping[str, Any]) -> list[Cause]:
    causes = names.dns_label(f"{where}.name", sub.get("name"))
    if sub.get("adminAccess") is not None:
        causes.append(invalid(f"{where}.adminAccess", sub["adminAccess"], "must not be set"))
    return [*causes, *_validate_body(where, sub)]


def _validate_body(where: str, body: Mapping[str, Any]) -> list[Cause]:
    """The fields ``exactly`` and a subrequest share."""
    causes = names.required_subdomain(f"{where}.deviceClassName", body.get("deviceClassName"))
    causes.extend(validate_selectors(f"{where}.selectors", body.get("selectors")))
    mode, count = body.get("allocationMode"), body.get("count", 0)
    if mode == ALL:
        if count:
            causes.append(
                invalid(
                    f"{where}.count", count, "must not be specified when allocationMode is 'All'"
                )
            )
    elif mode == EXACT_COUNT:
        if not isinstance(count, int) or count <= 0:
            causes.append(invalid(f"{where}.count", count, "must be greater than zero"))
    else:
        causes.append(unsupported(f"{where}.allocationMode", mode or "", (ALL, EXACT_COUNT)))
    tolerations, more = _as_list(f"{where}.tolerations", body.get("tolerations"), TOLERATIONS_MAX)
    causes.extend(more)
    capacity = body.get("capacity")
    if isinstance(capacity, Mapping):
        wanted = capacity.get("requests") or {}
        if isinstance(wanted, Mapping):
            for key, amount in wanted.items():
                causes.extend(names.qualified_name(f"{where}.capacity.requests", key))
                causes.extend(quantity_problem(f"{where}.capacity.requests[{key}]", amount))
    del tolerations  # their keys and operators are not checked (documented)
    return causes


def _validate_constraint(where: str, constraint: Any, known: RequestNames) -> list[Cause]:
    if not isinstance(constraint, Mapping):
        return [invalid(where, _shown(constraint), "must be an object")]
    causes = _validate_refs(f"{where}.requests", constraint.get("requests"), known)
    for key in ("matchAttribute", "distinctAttribute"):
        if constraint.get(key) is not None:
            return [*causes, *names.fully_qualified_name(f"{where}.{key}", constraint[key])]
    return [*causes, required(where, _CONSTRAINT_KINDS)]


# ----- shared with DeviceClass ---------------------------------------------------------
def validate_selectors(where: str, selectors: Any) -> list[Cause]:
    """At most 32 selectors, each ``cel.expression`` at most 10 Ki."""
    items, causes = _as_list(where, selectors, SELECTORS_MAX)
    for i, selector in enumerate(items):
        cel = selector.get("cel") if isinstance(selector, Mapping) else None
        if not isinstance(cel, Mapping):
            causes.append(required(f"{where}[{i}].cel"))
            continue
        expression = names.text(cel.get("expression"))
        if not expression:
            causes.append(required(f"{where}[{i}].cel.expression", "expression must not be empty"))
        elif len(expression.encode()) > CEL_MAX_LENGTH:
            causes.append(too_long(f"{where}[{i}].cel.expression", CEL_MAX_LENGTH))
    return causes


def validate_opaque(where: str, config: Mapping[str, Any]) -> list[Cause]:
    """``validateDeviceConfiguration``: ``opaque`` required, its driver name and parameters
    (a JSON object of at most 10 Ki)."""
    opaque = config.get("opaque")
    if not isinstance(opaque, Mapping):
        return [required(f"{where}.opaque")]
    causes = names.driver_name(f"{where}.opaque.driver", opaque.get("driver"))
    parameters = opaque.get("parameters")
    at = f"{where}.opaque.parameters"
    if parameters is None:
        causes.append(required(at))
    elif len(json.dumps(parameters, separators=(",", ":"))) > OPAQUE_PARAMETERS_MAX:
        causes.append(too_long(at, OPAQUE_PARAMETERS_MAX))
    elif not isinstance(parameters, Mapping):
        causes.append(invalid(at, "<value omitted>", "must be a valid JSON object"))
    return causes


def validate_class_spec(spec: Any) -> list[Cause]:
    """``validateDeviceClassSpec``: selectors, config, ``extendedResourceName``."""
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return [invalid("spec", _shown(spec), "must be an object")]
    causes = validate_selectors("spec.selectors", spec.get("selectors"))
    configs, more = _as_list("spec.config", spec.get("config"), CONFIG_MAX)
    causes.extend(more)
    for i, config in enumerate(configs):
        if isinstance(config, Mapping):
            causes.extend(validate_opaque(f"spec.config[{i}]", config))
        else:
            causes.append(invalid(f"spec.config[{i}]", _shown(config), "must be an object"))
    extended = spec.get("extendedResourceName")
    if extended is not None and not _is_extended_resource_name(names.text(extended)):
        causes.append(
            invalid("spec.extendedResourceName", extended, "must be a valid extended resource name")
        )
    return causes


def _is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName``: a qualified name outside ``kubernetes.io``, not
    ``requests.``-prefixed."""
    domain, _, rest = name.partition("/")
    if not rest or "kubernetes.io" in domain or name.startswith("requests."):
        return False
    return not names.subdomain_problems(domain) and bool(rest)
