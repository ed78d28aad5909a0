"""DRA invariants over a cluster snapshot (its claims, slices and CDI spec files); pure.

* capacity (:func:`capacity_problems`): per device of the published ResourceSlices (the newest
  generation of each pool), the capacity the allocated claims consume (``consumedCapacity``)
  sums to at most what the device publishes, and a device without
  ``allowMultipleAllocations`` is in at most one claim's allocation.  A device no slice
  publishes any more (gone after allocation) is not judged: nothing of it is known.
* env (:func:`env_problems`): every Running container that uses a claim got, per the kubelet
  stand-in's record (``claim:<pod claim>[/<request>]`` entries), the devices of that claim's
  allocation and, from the CDI spec, HAMi-core limits equal to it: ``NVIDIA_VISIBLE_DEVICES``
  the devices' UUIDs, one ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` per device equal to its consumed
  memory in MiB (the whole device's without ``consumedCapacity``), ``CUDA_DEVICE_SM_LIMIT`` the
  first device's consumed cores; the claim is allocated and reserved for the pod.
* cdi (:func:`cdi_problems`): no CDI spec file is left for a claim that is gone or no longer
  allocated, unless a kubelet still holds the claim to unprepare it (in flight).

:func:`dra_container_devices` gives what the vGPU monitor must report for a DRA container.
Only our driver's (``gpu.hami.io``) results are judged for env; capacity covers every driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from hami_kube.objects import ObjectView, PodView
from hami_kubesim.objects.quantities import read_quantity
from hami_kubesim.stack.state import (
    ClusterState,
    allocation_record,
    pod_key,
    record_containers,
)
from hami_protocol.errors import RequestError
from hami_protocol.pod import envs

__all__ = [
    "CLAIM_RESOURCE_PREFIX",
    "DRIVER",
    "DeviceKey",
    "capacity_of",
    "capacity_problems",
    "cdi_problems",
    "claim_of",
    "claim_results",
    "device_key",
    "dra_container_devices",
    "env_problems",
    "published_devices",
    "quantity_of",
]

DRIVER: Final = "gpu.hami.io"
CLAIM_RESOURCE_PREFIX: Final = "claim:"
"""The kubelet stand-in's record names a claim entry ``claim:<pod claim>[/<request>]``."""
_MIB: Final = 1 << 20

DeviceKey = tuple[str, str, str]
"""``(driver, pool, device)``."""
Problem = tuple[str, str]
"""``(subject, message)``."""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def quantity_of(value: object) -> Fraction | None:
    try:
        return read_quantity(value)
    except RequestError:
        return None


def claim_results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The claim's allocation results (empty when not allocated)."""
    allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
    return [_mapping(r) for r in _list(_mapping(allocation.get("devices")).get("results"))]


def device_key(result: Mapping[str, Any]) -> DeviceKey:
    return str(result.get("driver")), str(result.get("pool")), str(result.get("device"))


def published_devices(state: ClusterState) -> dict[DeviceKey, Mapping[str, Any]]:
    """Every device of the newest generation of each pool (the report's DRA utilisation reads
    them too)."""
    newest: dict[tuple[str, str], int] = {}
    for item in state.slices:
        spec = ObjectView(item).spec
        pool = _mapping(spec.get("pool"))
        key = (str(spec.get("driver")), str(pool.get("name")))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation") or 0))
    devices: dict[DeviceKey, Mapping[str, Any]] = {}
    for item in state.slices:
        spec = ObjectView(item).spec
        pool = _mapping(spec.get("pool"))
        driver, name = str(spec.get("driver")), str(pool.get("name"))
        if int(pool.get("generation") or 0) != newest[(driver, name)]:
            continue
        for device in _list(spec.get("devices")):
            devices[(driver, name, str(_mapping(device).get("name")))] = _mapping(device)
    return devices


def capacity_of(device: Mapping[str, Any], name: str) -> Fraction | None:
    return quantity_of(_mapping(_mapping(device.get("capacity")).get(name)).get("value"))


def _claim_name(claim: Mapping[str, Any]) -> str:
    view = ObjectView(claim)
    return f"{view.namespace or 'default'}/{view.name}"


def capacity_problems(state: ClusterState) -> list[Problem]:
    devices = published_devices(state)
    consumed: dict[DeviceKey, dict[str, Fraction]] = {}
    holders: dict[DeviceKey, list[str]] = {}
    for claim in state.claims:
        for result in claim_results(claim):
            key = device_key(result)
            holders.setdefault(key, []).append(_claim_name(claim))
            totals = consumed.setdefault(key, {})
            for name, value in _mapping(result.get("consumedCapacity")).items():
                amount = quantity_of(value)
                if amount is not None:
                    totals[name] = totals.get(name, Fraction(0)) + amount
    found: list[Problem] = []
    for key, claims in sorted(holders.items()):
        device = devices.get(key)
        if device is None:
            continue
        subject = "/".join(key)
        if not device.get("allowMultipleAllocations") and len(claims) > 1:
            found.append((subject, f"not shareable but allocated to {', '.join(claims)}"))
        for name, used in sorted(consumed.get(key, {}).items()):
            limit = capacity_of(device, name)
            if limit is not None and used > limit:
                found.append(
                    (subject, f"{name} over-committed: {used} > {limit} ({', '.join(claims)})")
                )
    return found


def _claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim name -> ResourceClaim name (a template's generated claim once known)."""
    view = PodView(pod)
    generated = {
        str(_mapping(s).get("name")): str(_mapping(s).get("resourceClaimName") or "")
        for s in _list(view.status.get("resourceClaimStatuses"))
    }
    names: dict[str, str] = {}
    for raw in _list(view.spec.get("resourceClaims")):
        entry = _mapping(raw)
        name = str(entry.get("name"))
        names[name] = str(entry.get("resourceClaimName") or generated.get(name) or "")
    return names


def claim_of(state: ClusterState, namespace: str, name: str) -> Mapping[str, Any] | None:
    return next(
        (
            c
            for c in state.claims
            if ObjectView(c).name == name and (ObjectView(c).namespace or "default") == namespace
        ),
        None,
    )


def _claim_entries(
    container: Mapping[str, Any],
) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """``(pod claim, request or "", entry)`` for each claim entry of a record container."""
    for raw in _list(container.get("resources")):
        entry = _mapping(raw)
        resource = str(entry.get("resource") or "")
        if resource.startswith(CLAIM_RESOURCE_PREFIX):
            claim, _, request = resource.removeprefix(CLAIM_RESOURCE_PREFIX).partition("/")
            yield claim, request, entry


def _of_request(results: Sequence[Mapping[str, Any]], request: str) -> list[Mapping[str, Any]]:
    """The results of one request (its subrequests' too); all of them for ``""``."""
    if not request:
        return list(results)
    return [
        r
        for r in results
        if r.get("request") == request or str(r.get("request")).startswith(request + "/")
    ]


def _expected_limits(
    results: Sequence[Mapping[str, Any]], devices: Mapping[DeviceKey, Mapping[str, Any]]
) -> tuple[list[str], list[str], str | None]:
    """UUIDs, memory limits (``<MiB>m``) and the SM limit our driver's results call for."""
    uuids: list[str] = []
    limits: list[str] = []
    cores: str | None = None
    for result in results:
        device = devices.get(device_key(result), {})
        uuid = _mapping(_mapping(device.get("attributes")).get("uuid")).get("string")
        if uuid:
            uuids.append(str(uuid))
        used = _mapping(result.get("consumedCapacity"))
        memory = quantity_of(used["memory"]) if "memory" in used else capacity_of(device, "memory")
        if memory is not None:
            limits.append(f"{int(memory) // _MIB}m")
        if cores is None and "cores" in used:
            value = quantity_of(used["cores"])
            cores = None if value is None else str(int(value))
    return uuids, limits, cores


def _given_limits(given: Mapping[str, str]) -> list[str]:
    """The ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` values, for ``i`` from 0 while present, sorted."""
    found: list[str] = []
    while envs.cuda_device_memory_limit(len(found)) in given:
        found.append(given[envs.cuda_device_memory_limit(len(found))])
    return sorted(found)


def _entry_problems(
    claim: Mapping[str, Any],
    pod: Mapping[str, Any],
    request: str,
    entry: Mapping[str, Any],
    devices: Mapping[DeviceKey, Mapping[str, Any]],
) -> list[str]:
    name = _claim_name(claim)
    results = claim_results(claim)
    if not results:
        return [f"claim {name} is not allocated"]
    reserved = {
        str(_mapping(r).get("uid")) for r in _list(_mapping(claim.get("status")).get("reservedFor"))
    }
    problems = [] if PodView(pod).uid in reserved else [f"claim {name} is not reserved for it"]
    chosen = _of_request(results, request)
    wanted_ids = sorted("/".join(device_key(r)) for r in chosen)
    given_ids = sorted(str(i) for i in _list(entry.get("deviceIDs")))
    if given_ids != wanted_ids:
        problems.append(f"got devices {given_ids}, claim {name} allocates {wanted_ids}")
    ours = [r for r in chosen if r.get("driver") == DRIVER]
    if not ours:
        return problems
    given = {str(k): str(v) for k, v in _mapping(entry.get("envs")).items()}
    uuids, limits, cores = _expected_limits(ours, devices)
    visible = [u for u in given.get(envs.NVIDIA_VISIBLE_DEVICES, "").split(",") if u]
    if len(uuids) == len(ours) and sorted(visible) != sorted(uuids):
        problems.append(f"{envs.NVIDIA_VISIBLE_DEVICES}={visible}, claim {name} has {uuids}")
    if len(limits) == len(ours) and _given_limits(given) != sorted(limits):
        problems.append(
            f"memory limits {_given_limits(given)}, claim {name} consumes {sorted(limits)}"
        )
    sm = given.get(envs.CUDA_DEVICE_SM_LIMIT)
    if cores is not None and sm != cores:
        problems.append(f"{envs.CUDA_DEVICE_SM_LIMIT}={sm!r}, claim {name} consumes {cores}")
    return problems


def env_problems(state: ClusterState) -> list[Problem]:
    devices = published_devices(state)
    found: list[Problem] = []
    for pod in state.pods:
        view = PodView(pod)
        if view.phase != "Running" or not view.spec.get("resourceClaims"):
            continue
        names = _claim_names(pod)
        namespace = view.namespace or "default"
        for container, record in record_containers(allocation_record(pod)).items():
            for pod_claim, request, entry in _claim_entries(record):
                subject = f"{pod_key(pod)}/{container}"
                claim_name = names.get(pod_claim, "")
                claim = claim_of(state, namespace, claim_name) if claim_name else None
                if claim is None:
                    found.append((subject, f"runs with claim {pod_claim!r} that does not exist"))
                    continue
                found.extend(
                    (subject, p) for p in _entry_problems(claim, pod, request, entry, devices)
                )
    return found


def cdi_problems(state: ClusterState) -> list[Problem]:
    allocated = {ObjectView(c).uid for c in state.claims if claim_results(c)}
    return [
        (f"{spec.node}/{spec.name}", f"CDI spec left for claim {spec.claim_uid}, which is gone")
        for spec in state.cdi_files
        if spec.claim_uid not in allocated and spec.claim_uid not in state.unpreparing
    ]


def dra_container_devices(pod: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, int]]]]:
    """Per container with claim entries in the kubelet's record, the ``(UUID, memory limit
    MiB)`` of each device its CDI env names, in ``vdevice_index`` order: what the vGPU monitor
    reports for it."""
    out: list[tuple[str, list[tuple[str, int]]]] = []
    for name, record in record_containers(allocation_record(pod)).items():
        devices: list[tuple[str, int]] = []
        for _, _, entry in _claim_entries(record):
            given = {str(k): str(v) for k, v in _mapping(entry.get("envs")).items()}
            uuids = [u for u in given.get(envs.NVIDIA_VISIBLE_DEVICES, "").split(",") if u]
            for index, uuid in enumerate(uuids):
                limit = given.get(envs.cuda_device_memory_limit(index), "").removesuffix("m")
                devices.append((uuid, int(limit) if limit.isdigit() else 0))
        if devices:
            out.append((name, devices))
    return out
