"""What the API server does to pods besides storing them: defaulting, QoS class, validation of
resources and of updates, and the binding subresource."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hami_kubesim.apiserver.errors import (
    BadRequestError,
    ConflictError,
    StatusError,
    precondition_failed,
)
from hami_kubesim.objects.quantities import read_quantity
from hami_kubesim.objects.validation import Cause, forbidden, invalid, is_dns_label, required
from hami_protocol.errors import RequestError

_CONTAINER_GROUPS = ("containers", "initContainers")
_DEFAULT_TOLERATIONS = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
)
UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def _container_defaults(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = container.get("image")
    if "imagePullPolicy" not in container and isinstance(image, str):
        tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
        latest = image.endswith(":latest") or not tagged
        container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
    resources = container.setdefault("resources", {})
    if isinstance(resources, dict):
        limits = resources.get("limits")
        if isinstance(limits, dict) and limits:
            requests = resources.setdefault("requests", {})
            if isinstance(requests, dict):
                for name, value in limits.items():
                    requests.setdefault(name, value)


def default_pod(pod: dict[str, Any]) -> None:
    """Apply the API server's defaults in place (the object is owned by the request)."""
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    tolerations = spec.setdefault("tolerations", [])
    if isinstance(tolerations, list):
        have = {t.get("key") for t in tolerations if isinstance(t, dict)}
        for key in _DEFAULT_TOLERATIONS:
            if key not in have:
                tolerations.append(
                    {
                        "key": key,
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 300,
                    }
                )
    for group in _CONTAINER_GROUPS:
        for container in spec.get(group) or ():
            if isinstance(container, dict):
                _container_defaults(container)


def qos_class(spec: dict[str, Any]) -> str:
    """BestEffort / Burstable / Guaranteed from the cpu and memory requests and limits."""
    any_set = False
    guaranteed = True
    for group in _CONTAINER_GROUPS:
        for container in spec.get(group) or ():
            resources = container.get("resources") or {} if isinstance(container, dict) else {}
            requests = resources.get("requests") or {}
            limits = resources.get("limits") or {}
            for name in ("cpu", "memory"):
                req, lim = requests.get(name), limits.get(name)
                if req is not None or lim is not None:
                    any_set = True
                if lim is None or (req is not None and not _same_quantity(req, lim)):
                    guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def initial_status(pod: dict[str, Any]) -> dict[str, Any]:
    spec = pod.get("spec")
    return {"phase": "Pending", "qosClass": qos_class(spec if isinstance(spec, dict) else {})}


def _overcommit_allowed(name: str) -> bool:
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def _quantity_or_none(value: object) -> Fraction | None:
    try:
        return read_quantity(value)
    except RequestError:
        return None


def _same_quantity(a: object, b: object) -> bool:
    """Equal values (``1000m`` and ``1``); values that do not parse compare as given."""
    qa, qb = _quantity_or_none(a), _quantity_or_none(b)
    return a == b if qa is None or qb is None else qa == qb


def _validate_resources(where: str, resources: Any) -> list[Cause]:
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [invalid(where, resources, "must be an object")]
    causes: list[Cause] = []
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for part, values in (("requests", requests), ("limits", limits)):
        for name, value in values.items():
            quantity = _quantity_or_none(value)
            if quantity is None:
                causes.append(invalid(f"{where}.{part}[{name}]", value, "must be a quantity"))
            elif quantity < 0:
                causes.append(
                    invalid(f"{where}.{part}[{name}]", value, "must be greater than or equal to 0")
                )
            elif not _overcommit_allowed(name) and quantity.denominator != 1:
                causes.append(invalid(f"{where}.{part}[{name}]", value, "must be an integer"))
    for name, value in requests.items():
        if _overcommit_allowed(name):
            if name in limits and (_quantity_or_none(value) or 0) > (
                _quantity_or_none(limits[name]) or 0
            ):
                causes.append(
                    invalid(
                        f"{where}.requests",
                        value,
                        f"must be less than or equal to {name} limit of {limits[name]}",
                    )
                )
            continue
        if name not in limits:
            causes.append(
                forbidden(f"{where}.limits", "Limit must be set for non overcommitable resources")
            )
        elif _quantity_or_none(value) != _quantity_or_none(limits[name]):
            causes.append(
                invalid(
                    f"{where}.requests", value, f"must be equal to {name} limit of {limits[name]}"
                )
            )
    return causes


def validate_pod_spec(pod: dict[str, Any]) -> list[Cause]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        causes.append(required("spec.containers"))
    seen: set[str] = set()
    for group in _CONTAINER_GROUPS:
        items = spec.get(group) or []
        if not isinstance(items, list):
            causes.append(invalid(f"spec.{group}", items, "must be a list"))
            continue
        for idx, container in enumerate(items):
            where = f"spec.{group}[{idx}]"
            if not isinstance(container, dict):
                causes.append(invalid(where, container, "must be an object"))
                continue
            name = container.get("name")
            if not isinstance(name, str) or not name:
                causes.append(required(f"{where}.name"))
            elif not is_dns_label(name):
                causes.append(invalid(f"{where}.name", name, "must be a DNS label"))
            elif name in seen:
                causes.append(
                    (f"{where}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"')
                )
            else:
                seen.add(name)
            if not container.get("image"):
                causes.append(required(f"{where}.image"))
            causes.extend(_validate_resources(f"{where}.resources", container.get("resources")))
    return causes


def _mutable_view(spec: dict[str, Any]) -> dict[str, Any]:
    view = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
    }
    for group in _CONTAINER_GROUPS:
        if isinstance(view.get(group), list):
            view[group] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in view[group]
            ]
    gates = view.pop("schedulingGates", None)
    view["$gates"] = gates or []
    return view


def validate_pod_update(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    """Pod specs are immutable except for images, deadlines, tolerations and removing gates."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    new_view, old_view = _mutable_view(new_spec), _mutable_view(old_spec)
    new_gates, old_gates = new_view.pop("$gates"), old_view.pop("$gates")
    causes: list[Cause] = []
    if new_view != old_view:
        causes.append(forbidden("spec", UPDATE_FORBIDDEN))
    if any(g not in old_gates for g in new_gates):
        causes.append(forbidden("spec.schedulingGates", "only deletion is allowed"))
    return causes


def bind_pod(pod: dict[str, Any], binding: dict[str, Any], name: str, now: str) -> dict[str, Any]:
    """The pod after ``binding`` (a v1 Binding) is applied, or the API error the server gives."""
    meta = binding.get("metadata") or {}
    if meta.get("name") != name:
        raise BadRequestError("name in URL does not match name in Binding object")
    target = binding.get("target") or {}
    if target.get("kind") not in (None, "", "Node"):
        raise StatusError(
            422,
            f'Binding.meta.k8s.io "{name}" is invalid: target.kind: Invalid value: '
            f"\"{target.get('kind')}\": must be empty or 'Node'",
        )
    node = target.get("name")
    if not node:
        raise StatusError(422, f'Binding "{name}" is invalid: target.name: Required value')
    pod_meta = pod["metadata"]
    uid = meta.get("uid")
    if uid and uid != pod_meta.get("uid"):
        raise ConflictError(
            "pods/binding",
            "",
            name,
            precondition_failed("UID", uid, pod_meta.get("uid")),
        )
    rv = meta.get("resourceVersion")
    if rv and rv != pod_meta.get("resourceVersion"):
        raise ConflictError(
            "pods/binding",
            "",
            name,
            precondition_failed("ResourceVersion", rv, pod_meta.get("resourceVersion")),
        )
    spec = pod.get("spec") or {}
    if pod_meta.get("deletionTimestamp"):
        why = f"pod {name} is being deleted, cannot be assigned to a host"
    elif spec.get("nodeName"):
        why = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
    elif spec.get("schedulingGates"):
        why = f"pod {name} has non-empty .spec.schedulingGates"
    else:
        why = ""
    if why:
        raise ConflictError("pods/binding", "", name, why)
    new_meta = dict(pod_meta)
    extra = meta.get("annotations")
    if isinstance(extra, dict) and extra:
        new_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **extra}
    status = dict(pod.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
    )
    status["conditions"] = conditions
    status.pop("nominatedNodeName", None)
    return {**pod, "metadata": new_meta, "spec": {**spec, "nodeName": node}, "status": status}
