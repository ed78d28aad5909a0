"""Pure: what a ResourceClaim says this node must prepare, and which container of which pod
uses it.

:func:`allocated_devices` reads ``status.allocation.devices.results`` for driver ``gpu.hami.io``
as the kubelet helper does: the claim must be the one the kubelet named (same UID, else it "got
replaced"), allocated ("not allocated"), and every result of ours must come from this node's
pool.  The ``/<subrequest>`` suffix of a ``firstAvailable`` result is stripped from the request
name the kubelet matches containers by.  ``consumedCapacity`` (set for shares of a
multi-allocatable device) gives the limits; a result without it holds the device exclusively.

:func:`claim_user` picks the container whose HAMi-core cache directory the claim's CDI spec
mounts: ``<podUID>_<container>`` under ``<hook>/vgpu/containers`` is the name the vGPU monitor
maps to a pod and container, so DRA containers are reported like any other.  The pod is the
first of ``status.reservedFor`` (the kubelet prepares a claim only for a reserved pod); the
container is the first app container (else init container) that lists the claim, by its pod
claim name, with this request or with no request.  A claim no container lists (a pod-level claim)
uses the claim's name in place of a container name: the monitor then reports the directory as an
unknown container, but still finds its pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_protocol.dra_driver import CAPACITY_CORES, CAPACITY_MEMORY, DRIVER
from hami_protocol.errors import ProtocolError
from hami_protocol.request.quantity import json_quantity

__all__ = [
    "AllocatedDevice",
    "ClaimError",
    "ClaimRef",
    "PodRef",
    "allocated_devices",
    "claim_user",
    "consumed_mib",
    "reserved_pods",
]

_MIB = 1024 * 1024


class ClaimError(ValueError):
    """Why a claim cannot be prepared here (the per-claim ``error`` of the answer)."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of this driver."""

    request: str
    """The claim request (subrequest suffix stripped)."""
    pool: str
    device: str
    share_id: str | None = None
    """Set for a share of a multi-allocatable device; None: the device is held exclusively."""
    memory_bytes: int | None = None
    """``consumedCapacity.memory``; None: not charged (the whole device)."""
    cores: int | None = None
    """``consumedCapacity.cores``; None: not charged."""
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class PodRef:
    name: str
    uid: str


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ClaimError(f"malformed claim: {what} is not an object")
    return value


def _list(value: object, what: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ClaimError(f"malformed claim: {what} is not a list")
    return value


def _amount(consumed: Mapping[str, Any], key: str, *, ref: ClaimRef) -> int | None:
    raw = consumed.get(key)
    if raw is None:
        return None
    try:
        value = json_quantity(raw, key=f"consumedCapacity.{key}")
    except ProtocolError as exc:
        raise ClaimError(f"claim {ref.key}: {exc}") from None
    if value < 0:
        raise ClaimError(f"claim {ref.key}: consumedCapacity.{key} is negative")
    return int(value)


def _name(result: Mapping[str, Any], key: str, ref: ClaimRef) -> str:
    value = result.get(key)
    if not isinstance(value, str) or not value:
        raise ClaimError(f"malformed claim {ref.key}: an allocation result has no {key}")
    return value


def _result(raw: object, ref: ClaimRef) -> AllocatedDevice:
    result = _mapping(raw, "an allocation result")
    request, pool, device = (_name(result, key, ref) for key in ("request", "pool", "device"))
    share = result.get("shareID")
    consumed = _mapping(result.get("consumedCapacity") or {}, "consumedCapacity")
    return AllocatedDevice(
        request=request.split("/", 1)[0],
        pool=pool,
        device=device,
        share_id=share if isinstance(share, str) and share else None,
        memory_bytes=_amount(consumed, CAPACITY_MEMORY, ref=ref),
        cores=_amount(consumed, CAPACITY_CORES, ref=ref),
        admin_access=result.get("adminAccess") is True,
    )


def allocated_devices(
    claim: Mapping[str, Any], ref: ClaimRef, *, pool: str
) -> tuple[AllocatedDevice, ...]:
    """This driver's results of ``claim`` (the object read back for ``ref``), all from
    ``pool``; :class:`ClaimError` when the claim cannot be prepared on this node."""
    metadata = _mapping(claim.get("metadata") or {}, "metadata")
    uid = metadata.get("uid")
    if uid != ref.uid:
        raise ClaimError(f"claim {ref.key} got replaced (UID {uid!r}, expected {ref.uid!r})")
    status = _mapping(claim.get("status") or {}, "status")
    allocation = status.get("allocation")
    if not allocation:
        raise ClaimError(f"claim {ref.key} not allocated")
    devices = _mapping(_mapping(allocation, "status.allocation").get("devices") or {}, "devices")
    results = _list(devices.get("results"), "status.allocation.devices.results")
    ours: list[AllocatedDevice] = []
    for raw in results:
        if _mapping(raw, "an allocation result").get("driver") != DRIVER:
            continue
        found = _result(raw, ref)
        if found.pool != pool:
            raise ClaimError(
                f"claim {ref.key}: device {found.device} is allocated from pool "
                f"{found.pool!r}, not from this node's pool {pool!r}"
            )
        ours.append(found)
    return tuple(ours)


def reserved_pods(claim: Mapping[str, Any]) -> tuple[PodRef, ...]:
    """The pods in ``status.reservedFor`` (other consumers are left out)."""
    status = claim.get("status")
    entries = status.get("reservedFor") if isinstance(status, Mapping) else None
    pods: list[PodRef] = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or entry.get("resource") != "pods":
            continue
        if entry.get("apiGroup", "") not in ("", None):
            continue
        name, uid = entry.get("name"), entry.get("uid")
        if isinstance(name, str) and isinstance(uid, str) and name and uid:
            pods.append(PodRef(name, uid))
    return tuple(pods)


def _pod_claim_names(pod: Mapping[str, Any], claim_name: str) -> set[str]:
    """The pod's names for the claim: direct references and template-generated ones."""
    names: set[str] = set()
    spec = pod.get("spec")
    status = pod.get("status")
    for source, listed in (
        (spec, "resourceClaims"),
        (status, "resourceClaimStatuses"),
    ):
        entries = source.get(listed) if isinstance(source, Mapping) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, Mapping) and entry.get("resourceClaimName") == claim_name:
                name = entry.get("name")
                if isinstance(name, str):
                    names.add(name)
    return names


def _lists_claim(container: object, names: set[str], request: str) -> bool:
    if not isinstance(container, Mapping):
        return False
    resources = container.get("resources")
    claims = resources.get("claims") if isinstance(resources, Mapping) else None
    for entry in claims if isinstance(claims, list) else ():
        if not isinstance(entry, Mapping) or entry.get("name") not in names:
            continue
        if entry.get("request") in (None, "", request):
            return True
    return False


def claim_user(pod: Mapping[str, Any], claim_name: str, request: str) -> str:
    """The container of ``pod`` whose directory the claim's ``request`` uses (see the module
    docstring; the claim's name when no container lists it)."""
    names = _pod_claim_names(pod, claim_name)
    spec = pod.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    for listed in ("containers", "initContainers"):
        containers = spec.get(listed)
        for container in containers if isinstance(containers, list) else ():
            if _lists_claim(container, names, request):
                name = container.get("name")
                if isinstance(name, str) and name:
                    return name
    return claim_name


def consumed_mib(device: AllocatedDevice, whole_mib: int) -> int:
    """The memory limit of one result in MiB: the consumed bytes rounded down to MiB, or the
    device's whole published memory when the result charges none."""
    if device.memory_bytes is None:
        return whole_mib
    return device.memory_bytes // _MIB
