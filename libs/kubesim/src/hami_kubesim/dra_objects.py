"""Builders for ``resource.k8s.io/v1`` objects (and the pod fields that use them), as plain
dicts in the wire shape kube-apiserver accepts, for tests and demos of the DRA parts.

Every builder returns a fresh dict; the defaults follow the names the DRA branches share
(driver and DeviceClass ``gpu.hami.io``, devices ``gpu-<index>``, pool = node name, one slice
per node) and the capacity decisions of the allocation side: ``memory`` (whole card by
default, 1Mi steps) and ``cores`` (0 by default, 0..100), both consumable only on shared
(``allowMultipleAllocations``) devices.

    resource_slice("node-a", [gpu_device(0), gpu_device(1, memory="24Gi")])
    device_class()
    resource_claim("train", exact_request("gpu", capacity={"memory": "4Gi", "cores": 30}))
    claim_template("train", exact_request("gpu"))
    pod_claim("gpu", template="train");  container_claim("gpu")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

API_VERSION: Final = "resource.k8s.io/v1"
DRIVER: Final = "gpu.hami.io"
DEVICE_CLASS: Final = "gpu.hami.io"
CLASS_SELECTOR: Final = f'device.driver == "{DRIVER}"'
MEBI: Final = 1024 * 1024

__all__ = [
    "API_VERSION",
    "CLASS_SELECTOR",
    "DEVICE_CLASS",
    "DRIVER",
    "allocation",
    "allocation_result",
    "attribute",
    "capacity",
    "claim_spec",
    "claim_template",
    "container_claim",
    "device",
    "device_class",
    "exact_request",
    "first_available",
    "gpu_device",
    "pod_claim",
    "pod_reference",
    "resource_claim",
    "resource_slice",
    "subrequest",
]


def attribute(value: object) -> dict[str, Any]:
    """A device attribute from a Python value: ``bool`` -> ``{"bool"}``, ``int`` -> ``{"int"}``,
    ``str`` -> ``{"string"}``; a dict (e.g. ``{"version": "1.2.3"}``) is taken as it is."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"string": value}
    raise TypeError(f"no device attribute type for {value!r}")


def capacity(
    value: str | int,
    *,
    default: str | int | None = None,
    valid_range: tuple[str | int, str | int | None, str | int | None] | None = None,
    valid_values: Sequence[str | int] | None = None,
) -> dict[str, Any]:
    """One ``DeviceCapacity``: ``value`` plus, when any of the policy parts is given, a
    ``requestPolicy``; ``valid_range`` is ``(min, max, step)`` (``None`` leaves a part out)."""
    out: dict[str, Any] = {"value": str(value)}
    policy: dict[str, Any] = {}
    if default is not None:
        policy["default"] = str(default)
    if valid_range is not None:
        parts = zip(("min", "max", "step"), valid_range, strict=True)
        policy["validRange"] = {key: str(part) for key, part in parts if part is not None}
    if valid_values is not None:
        policy["validValues"] = [str(v) for v in valid_values]
    if policy:
        out["requestPolicy"] = policy
    return out


def device(
    name: str,
    *,
    attributes: Mapping[str, object] | None = None,
    capacities: Mapping[str, str | int | Mapping[str, Any]] | None = None,
    allow_multiple_allocations: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A slice ``Device``: attributes as Python values (see :func:`attribute`), capacities as a
    plain quantity or a :func:`capacity` dict; ``extra`` fields (``taints``, ...) verbatim."""
    out: dict[str, Any] = {"name": name}
    if attributes:
        out["attributes"] = {key: attribute(value) for key, value in attributes.items()}
    if capacities:
        out["capacity"] = {
            key: dict(value) if isinstance(value, Mapping) else {"value": str(value)}
            for key, value in capacities.items()
        }
    if allow_multiple_allocations is not None:
        out["allowMultipleAllocations"] = allow_multiple_allocations
    out.update(extra)
    return out


def gpu_device(
    index: int,
    *,
    memory: str = "16Gi",
    cores: int = 100,
    shared: bool = True,
    uuid: str | None = None,
    model: str = "NVIDIA-A100",
    numa: int = 0,
    driver_version: str = "550.54.15",
) -> dict[str, Any]:
    """A GPU as the HAMi driver publishes it: ``gpu-<index>`` with ``uuid``, ``model``,
    ``index``, ``numa`` and ``driverVersion`` attributes and ``memory`` / ``cores`` capacities;
    ``shared`` adds ``allowMultipleAllocations`` and the request policies (memory: whole card
    by default, 1Mi steps; cores: 0 by default, 0..100 in steps of 1)."""
    if shared:
        caps: dict[str, str | int | Mapping[str, Any]] = {
            "memory": capacity(memory, default=memory, valid_range=("1Mi", memory, "1Mi")),
            "cores": capacity(cores, default=0, valid_range=(0, cores, 1)),
        }
    else:
        caps = {"memory": memory, "cores": cores}
    return device(
        f"gpu-{index}",
        attributes={
            "uuid": uuid or f"GPU-{index:08d}-0000-0000-0000-000000000000",
            "model": model,
            "index": index,
            "numa": numa,
            "driverVersion": {"version": driver_version},
        },
        capacities=caps,
        allow_multiple_allocations=True if shared else None,
    )


def resource_slice(
    node: str | None,
    devices: Iterable[Mapping[str, Any]],
    *,
    name: str | None = None,
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    all_nodes: bool = False,
    node_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``ResourceSlice`` for ``node`` (``spec.nodeName``); with ``node=None`` give
    ``all_nodes`` or a ``node_selector`` instead.  Name defaults to ``<node>-<driver>`` (with
    dots as dashes), pool name to the node's."""
    pool_name = pool or node or "cluster"
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": slice_count},
    }
    if node is not None:
        spec["nodeName"] = node
    elif all_nodes:
        spec["allNodes"] = True
    elif node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    spec["devices"] = [dict(d) for d in devices]
    slice_name = name or f"{pool_name}-{driver.replace('.', '-')}"
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name},
        "spec": spec,
    }


def device_class(
    name: str = DEVICE_CLASS,
    *,
    selectors: Iterable[str] = (CLASS_SELECTOR,),
    config: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ``DeviceClass`` whose selectors are the given CEL expressions; ``config`` entries are
    ``DeviceClassConfiguration`` dicts (``{"opaque": {"driver", "parameters"}}``)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    configs = [dict(c) for c in config]
    if configs:
        spec["config"] = configs
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def _request_body(
    device_class_name: str,
    count: int | None,
    selectors: Iterable[str],
    capacity_requests: Mapping[str, str | int] | None,
    allocation_mode: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class_name}
    chosen = [{"cel": {"expression": e}} for e in selectors]
    if chosen:
        body["selectors"] = chosen
    if allocation_mode is not None:
        body["allocationMode"] = allocation_mode
    if count is not None:
        body["count"] = count
    if capacity_requests:
        body["capacity"] = {"requests": {k: str(v) for k, v in capacity_requests.items()}}
    return body


def exact_request(
    name: str = "gpu",
    *,
    device_class_name: str = DEVICE_CLASS,
    count: int | None = None,
    selectors: Iterable[str] = (),
    capacity: Mapping[str, str | int] | None = None,
    allocation_mode: str | None = None,
) -> dict[str, Any]:
    """A ``DeviceRequest`` with ``exactly``; ``capacity`` becomes ``capacity.requests``
    (e.g. ``{"memory": "4Gi", "cores": 30}``).  Unset ``count`` / mode are the server's
    defaults (``ExactCount``, 1)."""
    body = _request_body(device_class_name, count, selectors, capacity, allocation_mode)
    return {"name": name, "exactly": body}


def subrequest(
    name: str,
    *,
    device_class_name: str = DEVICE_CLASS,
    count: int | None = None,
    selectors: Iterable[str] = (),
    capacity: Mapping[str, str | int] | None = None,
    allocation_mode: str | None = None,
) -> dict[str, Any]:
    """One ``DeviceSubRequest`` of a ``firstAvailable`` list."""
    body = _request_body(device_class_name, count, selectors, capacity, allocation_mode)
    return {"name": name, **body}


def first_available(name: str, *subrequests: Mapping[str, Any]) -> dict[str, Any]:
    """A ``DeviceRequest`` trying ``subrequests`` (see :func:`subrequest`) in order."""
    return {"name": name, "firstAvailable": [dict(s) for s in subrequests]}


def claim_spec(
    *requests: Mapping[str, Any],
    constraints: Iterable[Mapping[str, Any]] = (),
    config: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ``ResourceClaimSpec``; ``constraints`` like ``{"requests": [...],
    "distinctAttribute": "gpu.hami.io/uuid"}``, ``config`` like ``{"requests": [...],
    "opaque": {...}}``."""
    devices: dict[str, Any] = {"requests": [dict(r) for r in requests]}
    chosen = [dict(c) for c in constraints]
    if chosen:
        devices["constraints"] = chosen
    configs = [dict(c) for c in config]
    if configs:
        devices["config"] = configs
    return {"devices": devices}


def resource_claim(
    name: str,
    *requests: Mapping[str, Any],
    namespace: str = "default",
    constraints: Iterable[Mapping[str, Any]] = (),
    config: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ``ResourceClaim`` asking for ``requests`` (default: one :func:`exact_request`)."""
    chosen = requests or (exact_request(),)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(*chosen, constraints=constraints, config=config),
    }


def claim_template(
    name: str,
    *requests: Mapping[str, Any],
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    constraints: Iterable[Mapping[str, Any]] = (),
    config: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ``ResourceClaimTemplate``; ``labels`` / ``annotations`` go to ``spec.metadata`` (copied
    into every claim made from it)."""
    chosen = requests or (exact_request(),)
    spec: dict[str, Any] = {"spec": claim_spec(*chosen, constraints=constraints, config=config)}
    meta = {
        key: dict(value)
        for key, value in (("labels", labels), ("annotations", annotations))
        if value
    }
    if meta:
        spec["metadata"] = meta
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pod_claim(
    name: str, *, claim: str | None = None, template: str | None = None
) -> dict[str, Any]:
    """A pod ``spec.resourceClaims[]`` entry naming a claim or a template (give one)."""
    out: dict[str, Any] = {"name": name}
    if claim is not None:
        out["resourceClaimName"] = claim
    if template is not None:
        out["resourceClaimTemplateName"] = template
    return out


def container_claim(name: str, request: str | None = None) -> dict[str, Any]:
    """A container ``resources.claims[]`` entry: the pod claim ``name``, optionally one
    request of it."""
    return {"name": name} if request is None else {"name": name, "request": request}


def pod_reference(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ``status.reservedFor[]`` entry for ``pod`` (a stored pod dict)."""
    meta = pod["metadata"]
    return {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}


def allocation_result(
    request: str,
    device_name: str,
    *,
    pool: str,
    driver: str = DRIVER,
    share_id: str | None = None,
    consumed: Mapping[str, str | int] | None = None,
) -> dict[str, Any]:
    """One ``status.allocation.devices.results[]`` entry."""
    out: dict[str, Any] = {
        "request": request,
        "driver": driver,
        "pool": pool,
        "device": device_name,
    }
    if share_id is not None:
        out["shareID"] = share_id
    if consumed is not None:
        out["consumedCapacity"] = {k: str(v) for k, v in consumed.items()}
    return out


def allocation(results: Iterable[Mapping[str, Any]], *, node: str | None = None) -> dict[str, Any]:
    """A ``status.allocation``: the results, and for node-local devices the node selector the
    allocator writes (one term, ``metadata.name In [node]``)."""
    out: dict[str, Any] = {"devices": {"results": [dict(r) for r in results]}}
    if node is not None:
        out["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
    return out
