"""Per-kind rules applied on create and update: defaults, status/spec separation between the main
resource and ``/status``, and validation."""

from __future__ import annotations

from typing import Any

from hami_kubesim.apiserver.errors import BadRequestError
from hami_kubesim.apiserver.history import clone
from hami_kubesim.objects import disruptionbudgets as budgets
from hami_kubesim.objects import pods as pod_strategy
from hami_kubesim.objects import priorityclasses
from hami_kubesim.objects import services as service_strategy
from hami_kubesim.objects.quantities import stringify
from hami_kubesim.objects.resource import podclaims
from hami_kubesim.objects.resource import strategy as resource_strategy
from hami_kubesim.objects.resources import (
    ENDPOINT_SLICES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_QUOTAS,
    SERVICES,
    ResourceType,
)
from hami_kubesim.objects.validation import (
    SUBDOMAIN_MSG,
    Cause,
    invalid,
    is_subdomain,
    required,
    validate_meta_maps,
    validate_name,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def normalize_body(rt: ResourceType, obj: Any, namespace: str | None) -> dict[str, Any]:
    """Check a request body against the URL and strip ``kind``/``apiVersion``."""
    if not isinstance(obj, dict):
        raise BadRequestError("the body of the request must be a JSON object")
    api_version = obj.pop("apiVersion", None)
    kind = obj.pop("kind", None)
    if api_version and api_version != rt.api_version:
        raise BadRequestError(
            f"the API version in the data ({api_version}) does not match the expected "
            f"API version ({rt.api_version})"
        )
    if kind and kind != rt.kind:
        raise BadRequestError(
            f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
        )
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise BadRequestError("metadata must be an object")
    if rt.namespaced:
        given = meta.get("namespace")
        if given and given != namespace:
            raise BadRequestError(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    return obj


_QUANTITY_MAPS: dict[str, tuple[tuple[str, str], ...]] = {
    NODES.key: (("status", "capacity"), ("status", "allocatable")),
    RESOURCE_QUOTAS.key: (("spec", "hard"), ("status", "hard"), ("status", "used")),
}


def _replace_in(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``obj`` with ``path`` set to ``value``, copying only the dicts along the path."""
    out = dict(obj)
    if len(path) == 1:
        out[path[0]] = value
    else:
        out[path[0]] = _replace_in(out[path[0]], path[1:], value)
    return out


def quantities_as_strings(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Numeric quantities written as strings, as a ``resource.Quantity`` serializes; the
    same ``obj`` when there are none.  Never modifies ``obj`` (it may share stored parts)."""
    if rt is PODS:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return obj
        for group in ("containers", "initContainers"):
            for idx, container in enumerate(spec.get(group) or ()):
                resources = container.get("resources") if isinstance(container, dict) else None
                if not isinstance(resources, dict):
                    continue
                for part in ("requests", "limits"):
                    fixed = stringify(resources.get(part))
                    if fixed is not resources.get(part):
                        items = list(obj["spec"][group])
                        items[idx] = _replace_in(items[idx], ("resources", part), fixed)
                        obj = _replace_in(obj, ("spec", group), items)
                        resources = obj["spec"][group][idx]["resources"]
        return obj
    for path in _QUANTITY_MAPS.get(rt.key, ()):
        current: Any = obj
        for part in path:
            current = current.get(part) if isinstance(current, dict) else None
        fixed = stringify(current)
        if fixed is not current:
            obj = _replace_in(obj, path, fixed)
    return obj


def prepare_for_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Defaults and status resets, in place (the request owns ``obj``)."""
    fixed = quantities_as_strings(rt, obj)
    if fixed is not obj:
        obj.update(fixed)
    if rt is PODS:
        pod_strategy.default_pod(obj)
        obj["status"] = pod_strategy.initial_status(obj)
    elif rt is NAMESPACES:
        _namespace_defaults(obj)
    elif rt is MUTATING_WEBHOOKS:
        _webhook_defaults(obj)
    elif rt is PRIORITY_CLASSES:
        priorityclasses.prepare_for_create(obj)
    elif rt is POD_DISRUPTION_BUDGETS:
        budgets.prepare_for_create(obj)
    elif rt is SERVICES:
        service_strategy.prepare_service(obj)
    elif rt is ENDPOINT_SLICES:
        service_strategy.prepare_endpoint_slice(obj)
    elif resource_strategy.handles(rt):
        resource_strategy.prepare_for_create(rt, obj)


def validate_create(rt: ResourceType, obj: dict[str, Any]) -> list[Cause]:
    meta = obj["metadata"]
    causes = validate_name(meta["name"], dns_label=rt is NAMESPACES)
    causes.extend(validate_meta_maps(meta))
    if rt is PODS:
        causes.extend(pod_strategy.validate_pod_spec(obj))
        if isinstance(obj.get("spec"), dict):
            causes.extend(podclaims.validate_pod_claims(obj["spec"]))
    elif resource_strategy.handles(rt):
        causes.extend(resource_strategy.validate_create(rt, obj))
    elif rt is MUTATING_WEBHOOKS:
        causes.extend(_validate_webhooks(obj))
    elif rt is PRIORITY_CLASSES:
        causes.extend(priorityclasses.validate_priority_class(obj))
    elif rt is POD_DISRUPTION_BUDGETS:
        causes.extend(budgets.validate_budget(obj))
    elif rt is SERVICES:
        causes.extend(service_strategy.validate_service(obj))
    elif rt is ENDPOINT_SLICES:
        causes.extend(service_strategy.validate_endpoint_slice(obj))
    return causes


def prepare_for_update(
    rt: ResourceType, new: dict[str, Any], old: dict[str, Any], subresource: str | None
) -> dict[str, Any]:
    """The object to store for an update of ``old`` with ``new``.  Writes to the main resource
    keep the stored status; writes to ``/status`` keep the stored spec (and owner references).
    Returns a fresh top-level dict; nested values may be shared and are not modified."""
    out = dict(quantities_as_strings(rt, new))
    if subresource == "status":
        for key in ("spec",):
            if key in old:
                out[key] = old[key]
            else:
                out.pop(key, None)
        meta = dict(out["metadata"])
        owners = old["metadata"].get("ownerReferences")
        if owners is None:
            meta.pop("ownerReferences", None)
        else:
            meta["ownerReferences"] = owners
        out["metadata"] = meta
        if rt is PODS and not (out.get("status") or {}).get("qosClass"):
            status = dict(out.get("status") or {})
            status["qosClass"] = (old.get("status") or {}).get("qosClass", "")
            out["status"] = status
    elif rt.has_status:
        if "status" in old:
            out["status"] = old["status"]
        else:
            out.pop("status", None)
    if rt is PODS and subresource is None and isinstance(out.get("spec"), dict):
        # Defaulting runs on every decoded body, so a PUT of the original manifest matches the
        # stored (defaulted) spec.  The spec may be shared with the stored object: copy first.
        out["spec"] = clone(out["spec"])
        pod_strategy.default_pod(out)
        # Priority is not a default but the Priority plugin's, which keeps it on updates.
        priorityclasses.keep_pod_priority(out["spec"], old.get("spec") or {})
    elif rt is NAMESPACES:
        out["metadata"] = dict(out["metadata"])
        _namespace_defaults(out)
    elif rt is MUTATING_WEBHOOKS:
        out = clone(out)
        _webhook_defaults(out)
    elif rt is PRIORITY_CLASSES:
        priorityclasses.prepare_for_update(out, old)
    elif rt is POD_DISRUPTION_BUDGETS:
        budgets.prepare_for_update(out, old, subresource)
    elif rt is SERVICES and subresource is None:
        out = clone(out)
        service_strategy.keep_cluster_ip(out, old)
        service_strategy.prepare_service({**out})  # defaults the shared spec; status is kept
    elif rt is ENDPOINT_SLICES:
        out = clone(out)
        service_strategy.prepare_endpoint_slice(out)
    elif resource_strategy.handles(rt):
        out = resource_strategy.prepare_for_update(rt, out, old, subresource)
    return out


def validate_update(
    rt: ResourceType, new: dict[str, Any], old: dict[str, Any], subresource: str | None
) -> list[Cause]:
    causes = validate_meta_maps(new["metadata"])
    if rt is PODS and subresource is None:
        causes.extend(pod_strategy.validate_pod_update(new, old))
    elif rt is PODS and subresource == "status":
        nominated = (new.get("status") or {}).get("nominatedNodeName")
        if nominated and not (isinstance(nominated, str) and is_subdomain(nominated)):
            causes.append(invalid("status.nominatedNodeName", nominated, SUBDOMAIN_MSG))
        causes.extend(podclaims.validate_claim_statuses(new))
    elif resource_strategy.handles(rt):
        causes.extend(resource_strategy.validate_update(rt, new, old, subresource))
    elif rt is MUTATING_WEBHOOKS:
        causes.extend(_validate_webhooks(new))
    elif rt is PRIORITY_CLASSES:
        causes.extend(priorityclasses.validate_priority_class(new))
        causes.extend(priorityclasses.validate_priority_class_update(new, old))
    elif rt is POD_DISRUPTION_BUDGETS:
        causes.extend(
            budgets.validate_status(new)
            if subresource == "status"
            else budgets.validate_budget(new)
        )
    elif rt is SERVICES and subresource is None:
        causes.extend(service_strategy.validate_service_update(new, old))
    elif rt is ENDPOINT_SLICES:
        causes.extend(service_strategy.validate_endpoint_slice_update(new, old))
    return causes


def _namespace_defaults(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    labels = dict(meta.get("labels") or {})
    labels[NAMESPACE_NAME_LABEL] = meta.get("name", "")
    meta["labels"] = labels
    status = obj.get("status")
    if not isinstance(status, dict) or not status.get("phase"):
        obj["status"] = {**(status if isinstance(status, dict) else {}), "phase": "Active"}


def _webhook_defaults(obj: dict[str, Any]) -> None:
    for hook in obj.get("webhooks") or ():
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or ():
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def _validate_webhooks(obj: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    hooks = obj.get("webhooks") or []
    if not isinstance(hooks, list):
        return [invalid("webhooks", hooks, "must be a list")]
    names: set[str] = set()
    for idx, hook in enumerate(hooks):
        where = f"webhooks[{idx}]"
        if not isinstance(hook, dict):
            causes.append(invalid(where, hook, "must be an object"))
            continue
        name = hook.get("name")
        if not name:
            causes.append(required(f"{where}.name"))
        elif name in names:
            causes.append((f"{where}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"'))
        else:
            names.add(name)
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            causes.append(
                (
                    f"{where}.sideEffects",
                    "FieldValueNotSupported",
                    f"Unsupported value: {hook.get('sideEffects')!r}: supported values: "
                    '"None", "NoneOnDryRun"',
                )
            )
        if not hook.get("admissionReviewVersions"):
            causes.append(
                required(
                    f"{where}.admissionReviewVersions",
                    "must specify one of v1, v1beta1",
                )
            )
        config = hook.get("clientConfig") or {}
        has_url, has_service = bool(config.get("url")), bool(config.get("service"))
        if has_url == has_service:
            causes.append(
                required(f"{where}.clientConfig", "exactly one of url or service is required")
            )
        elif has_url and not str(config["url"]).startswith("https://"):
            causes.append(
                invalid(
                    f"{where}.clientConfig.url",
                    config["url"],
                    "'https' is the only allowed URL scheme",
                )
            )
        if hook.get("failurePolicy") not in ("Ignore", "Fail"):
            causes.append(
                invalid(
                    f"{where}.failurePolicy",
                    hook.get("failurePolicy"),
                    'supported values: "Fail", "Ignore"',
                )
            )
        timeout = hook.get("timeoutSeconds")
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            causes.append(
                invalid(
                    f"{where}.timeoutSeconds",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            )
    return causes


def validate_immutable(new_meta: dict[str, Any], old_meta: dict[str, Any]) -> list[Cause]:
    """``metadata.uid`` (when given), ``name`` and ``namespace`` cannot change."""
    causes: list[Cause] = []
    uid = new_meta.get("uid")
    if uid and uid != old_meta.get("uid"):
        causes.append(invalid("metadata.uid", uid, "field is immutable"))
    return causes
