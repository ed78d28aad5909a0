"""The DynamicResources plugin's pod-level decisions, pure (contract §3.6).

:func:`pod_claims` is PreFilter: every claim the pod references must exist and not be deleting;
a template's claim is named by ``status.resourceClaimStatuses`` (none yet: ``ResourceClaim not
created yet``) and must be controlled by the pod; a claim whose allocation another pod has in
flight must wait.  Claims already allocated are only checked against the node
(:func:`allocated_fits`: their ``allocation.nodeSelector``) and gain the pod in ``reservedFor``;
the others go to the allocator.  :func:`in_use` is what every other claim holds, written or in
flight, for the allocator's :class:`~.claims.AllocatedState`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami_kube.objects import NodeView, PodView
from hami_kubesim.dra.claims import AllocatedState, allocated_state, claim_key
from hami_kubesim.scheduler.predicates import node_selector_matches

__all__ = [
    "MAX_RESERVED_FOR",
    "NOT_AVAILABLE_ON_NODE",
    "ClaimsNotReady",
    "PodClaims",
    "allocated_fits",
    "in_use",
    "is_reserved_for",
    "pod_claims",
    "pod_reference",
]

NOT_AVAILABLE_ON_NODE: Final = "resourceclaim not available on the node"
MAX_RESERVED_FOR: Final = 256


class ClaimsNotReady(Exception):  # noqa: N818 - a scheduling verdict, not a fault
    """PreFilter's UnschedulableAndUnresolvable verdict for the whole pod."""


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The pod's claims (stored objects), in ``spec.resourceClaims`` order."""

    to_allocate: tuple[Mapping[str, Any], ...]
    allocated: tuple[Mapping[str, Any], ...]

    @property
    def all(self) -> tuple[Mapping[str, Any], ...]:
        return (*self.to_allocate, *self.allocated)


def pod_claims(
    pod: PodView,
    get_claim: Callable[[str], Mapping[str, Any] | None],
    *,
    in_flight: Iterable[str] = (),
) -> PodClaims | None:
    """The pod's claims split for the allocator; ``None`` when it references none.

    ``get_claim`` looks a claim up by ``namespace/name``; ``in_flight`` are the keys of claims
    whose allocation another pod holds in memory.  Raises :class:`ClaimsNotReady`."""
    references = [r for r in pod.spec.get("resourceClaims") or () if isinstance(r, Mapping)]
    if not references:
        return None
    namespace = pod.namespace or "default"
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in pod.status.get("resourceClaimStatuses") or ()
        if isinstance(s, Mapping)
    }
    busy = set(in_flight)
    to_allocate: list[Mapping[str, Any]] = []
    allocated: list[Mapping[str, Any]] = []
    for reference in references:
        name, owned = _claim_name(pod, reference, statuses)
        if name is None:
            continue  # the controller decided this pod claim needs no claim
        claim = get_claim(f"{namespace}/{name}")
        if claim is None:
            raise ClaimsNotReady(f'resourceclaim.resource.k8s.io "{name}" not found')
        meta = claim.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            raise ClaimsNotReady(f'resourceclaim "{name}" is being deleted')
        if owned and not _controlled_by(meta, pod):
            raise ClaimsNotReady(
                f"ResourceClaim {namespace}/{name} was not created for Pod "
                f"{namespace}/{pod.name} (Pod is not owner)"
            )
        status = claim.get("status") or {}
        if status.get("allocation"):
            if not is_reserved_for(claim, pod) and (
                len(status.get("reservedFor") or ()) >= MAX_RESERVED_FOR
            ):
                raise ClaimsNotReady(f"resource claim {namespace}/{name} is in use")
            allocated.append(claim)
        elif claim_key(claim) in busy:
            raise ClaimsNotReady(
                f"resource claim {namespace}/{name} is in the process of being allocated"
            )
        else:
            to_allocate.append(claim)
    return PodClaims(tuple(to_allocate), tuple(allocated))


def allocated_fits(claims: PodClaims, node: NodeView) -> bool:
    """Filter for the already-allocated claims: their devices are reachable from ``node``."""
    return all(
        node_selector_matches(
            (c.get("status") or {}).get("allocation", {}).get("nodeSelector"), node
        )
        for c in claims.allocated
    )


def in_use(
    claims: Iterable[Mapping[str, Any]],
    in_flight: Mapping[str, Mapping[str, Any]],
    *,
    exclude: Iterable[str] = (),
) -> AllocatedState:
    """What every claim but ``exclude`` holds: its stored allocation, else the one in flight
    (a written allocation the watch has not delivered yet is still in flight, so it is never
    counted twice nor missed)."""
    skip = set(exclude)
    stored = {claim_key(c): (c.get("status") or {}).get("allocation") for c in claims}
    allocations = [a for key, a in stored.items() if a and key not in skip]
    allocations.extend(a for key, a in in_flight.items() if key not in skip and not stored.get(key))
    return allocated_state(allocations)


def pod_reference(pod: PodView) -> dict[str, Any]:
    """The ``status.reservedFor`` entry for ``pod``."""
    return {"resource": "pods", "name": pod.name, "uid": pod.meta.get("uid")}


def is_reserved_for(claim: Mapping[str, Any], pod: PodView) -> bool:
    uid = pod.meta.get("uid")
    return any(
        isinstance(r, Mapping) and r.get("uid") == uid
        for r in (claim.get("status") or {}).get("reservedFor") or ()
    )


def _claim_name(
    pod: PodView, reference: Mapping[str, Any], statuses: Mapping[object, object]
) -> tuple[str | None, bool]:
    if reference.get("resourceClaimName"):
        return str(reference["resourceClaimName"]), False
    if reference.get("resourceClaimTemplateName"):
        if reference.get("name") not in statuses:
            raise ClaimsNotReady(
                f'pod "{pod.namespace or "default"}/{pod.name}": ResourceClaim not created yet'
            )
        name = statuses[reference.get("name")]
        return (str(name) if name else None), True
    raise ClaimsNotReady(
        f'pod "{pod.namespace or "default"}/{pod.name}", spec.resourceClaim '
        f'"{reference.get("name")}": none of the supported fields are set'
    )


def _controlled_by(meta: Mapping[str, Any], pod: PodView) -> bool:
    uid = pod.meta.get("uid")
    return any(
        isinstance(o, Mapping) and o.get("controller") is True and o.get("uid") == uid
        for o in meta.get("ownerReferences") or ()
    )
