"""Which ResourceClaims a pod uses, the kubelet's checks on them, and which CDI devices each
container gets (pure; the kubelet's ``resourceclaim.Name``, ``IsForPod``, ``IsReservedForPod``,
``newClaimInfoFromClaim`` and ``cdiDevicesAsList``).

A pod claim (``spec.resourceClaims[]``) names its claim directly (``resourceClaimName``) or
through a template (``resourceClaimTemplateName``): the generated claim's name is then in
``status.resourceClaimStatuses`` (written by the resourceclaim controller; an entry without a
name means no claim is needed), and the claim must be controlled by the pod. Error texts are the
kubelet's, so events read as on a real node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_kube.objects import PodView

__all__ = [
    "ClaimError",
    "ContainerClaim",
    "PodClaim",
    "PreparedDevice",
    "base_request",
    "claim_drivers",
    "container_claims",
    "devices_for_request",
    "pod_claims",
]


class ClaimError(Exception):
    """A pod's claims cannot be used; ``str()`` is the kubelet's text."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One ``spec.resourceClaims[]`` entry of a pod and the claim it stands for."""

    name: str
    """The pod's name for it (what containers list in ``resources.claims``)."""
    claim: str
    """The ResourceClaim object's name."""
    must_check_owner: bool
    """Generated from a template: the pod must be its controller."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One ``Device`` of a NodePrepareResources answer, with the driver that gave it."""

    driver: str
    pool: str
    device: str
    request_names: tuple[str, ...] = ()
    cdi_ids: tuple[str, ...] = ()
    share_id: str | None = None

    @property
    def resource_id(self) -> str:
        """``<driver>/<pool>/<device>`` (the kubelet's ResourceID for a device without CDI)."""
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """One ``resources.claims[]`` entry of a container, resolved to its claim."""

    container: str
    pod_claim: str
    claim: str
    request: str = ""

    @property
    def resource(self) -> str:
        """``claim:<pod claim>[/<request>]``: the kubelet's resource name for it (container
        status ``allocatedResourcesStatus``), and the stand-in's key in its allocation record."""
        suffix = f"/{self.request}" if self.request else ""
        return f"claim:{self.pod_claim}{suffix}"


def _entries(value: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, Mapping))


def _claim_name(pod: PodView, entry: Mapping[str, Any]) -> tuple[str | None, bool]:
    name = str(entry.get("name") or "")
    direct = entry.get("resourceClaimName")
    if direct:
        return str(direct), False
    if entry.get("resourceClaimTemplateName"):
        for status in _entries(pod.status.get("resourceClaimStatuses")):
            if status.get("name") == name:
                generated = status.get("resourceClaimName")
                return (str(generated), True) if generated else (None, False)
        raise ClaimError(f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet')
    raise ClaimError(
        f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{name}": '
        "unknown pod resource claim entry (API server too new?)"
    )


def pod_claims(pod: PodView) -> tuple[PodClaim, ...]:
    """The claims ``pod`` needs, in ``spec.resourceClaims`` order (template entries whose status
    says no claim is needed are left out); :class:`ClaimError` when one is not created yet."""
    out = []
    for entry in _entries(pod.spec.get("resourceClaims")):
        claim, must_check_owner = _claim_name(pod, entry)
        if claim is not None:
            out.append(PodClaim(str(entry.get("name") or ""), claim, must_check_owner))
    return tuple(out)


def _controlled_by(claim: Mapping[str, Any], pod: PodView) -> bool:
    owners = _entries((claim.get("metadata") or {}).get("ownerReferences"))
    return any(o.get("controller") is True and o.get("uid") == pod.uid for o in owners)


def claim_drivers(pod: PodView, ref: PodClaim, claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The drivers of ``claim``'s allocation, once each in result order, after the kubelet's
    checks: owned by the pod (template claims), reserved for it, allocated."""
    meta = claim.get("metadata") or {}
    namespace, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
    if ref.must_check_owner and (namespace != pod.namespace or not _controlled_by(claim, pod)):
        raise ClaimError(
            f"ResourceClaim {namespace}/{ref.claim} was not created for pod "
            f"{pod.namespace}/{pod.name} (pod is not owner)"
        )
    status = claim.get("status") or {}
    if not any(r.get("uid") == pod.uid for r in _entries(status.get("reservedFor"))):
        raise ClaimError(
            f"pod {pod.name} ({pod.uid}) is not allowed to use ResourceClaim {ref.claim} ({uid})"
        )
    allocation = status.get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"ResourceClaim {ref.claim}: not allocated")
    results = _entries((allocation.get("devices") or {}).get("results"))
    return tuple(dict.fromkeys(str(r.get("driver") or "") for r in results))


def base_request(name: str) -> str:
    """``<request>`` of ``<request>/<subrequest>`` (``resourceclaim.BaseRequestRef``)."""
    return name.split("/", 1)[0]


def devices_for_request(
    devices: Iterable[PreparedDevice], request: str
) -> tuple[PreparedDevice, ...]:
    """The devices a container naming ``request`` of the claim gets: all of them for no
    request; else those listing it (subrequests count for their request) or listing none."""
    return tuple(
        d
        for d in devices
        if not request
        or not d.request_names
        or any(base_request(n) == request for n in d.request_names)
    )


def container_claims(pod: PodView, claims: Sequence[PodClaim]) -> tuple[ContainerClaim, ...]:
    """Every ``resources.claims`` entry of the pod's containers (init containers first) that
    names one of ``claims``, in order. Entries naming a pod claim that needs no claim object
    are left out, as the kubelet skips them."""
    by_name = {c.name: c for c in claims}
    out = []
    for container in pod.all_containers():
        for entry in _entries(container.resources.get("claims")):
            ref = by_name.get(str(entry.get("name") or ""))
            if ref is not None:
                request = str(entry.get("request") or "")
                out.append(ContainerClaim(container.name, ref.name, ref.claim, request))
    return tuple(out)
