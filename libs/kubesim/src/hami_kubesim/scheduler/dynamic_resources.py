"""kube-scheduler's DynamicResources plugin in the scheduling loop (contract §3.1, §3.6).

For a pod with ``spec.resourceClaims``:

- **PreFilter** (:meth:`DynamicResources.pre_filter`): the claims must exist, be the pod's own
  when made from a template, and not be allocated by another pod right now
  (:func:`~hami_kubesim.dra.podclaims.pod_claims`); what every other claim holds, written or in
  flight, is summed once per attempt;
- **Filter** (:meth:`DynamicResources.filter`) per node: allocated claims must be reachable from
  the node (``resourceclaim not available on the node``); the others go through the allocator
  (:func:`hami_kubesim.dra.allocate`: ``cannot allocate all claims`` when they do not fit); an
  allocator error (a CEL error, ...) ends the attempt as an Error;
- **Reserve**: the chosen node's allocations are *in flight*: they count for every other pod at
  once;
- **PreBind** (:meth:`DynamicResources.pre_bind`), before the Binding: per claim, the finalizer
  ``resource.kubernetes.io/delete-protection`` (a normal update), then one status update setting
  ``allocation`` and adding the pod to ``reservedFor`` (an allocated claim only gains the pod);
  conflicts are retried on a fresh read, and a claim someone else allocated meanwhile fails the
  pod (``claim ... got allocated elsewhere in the meantime``).
- **Unreserve** after a failed PreBind or binding: the in-flight allocations are dropped.

An in-flight allocation stays counted until the claims watch delivers the written allocation
(the store's copy then counts instead), so a claim is never counted twice nor missed.  Not
modelled: PostFilter's deallocation of claims reserved only for an unschedulable pod, removing
the pod from ``reservedFor`` after a failed binding (the resourceclaim controller's job here),
Score for ``firstAvailable``, DRA-aware preemption, extended resources backed by DRA.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from hami_kube.errors import ConflictError
from hami_kube.objects import NodeView, PodView
from hami_kube.resources import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from hami_kube.rest import KubeClient
from hami_kube.store import Store
from hami_kubesim.dra import Allocated, AllocatedState, allocate
from hami_kubesim.dra.claims import claim_key
from hami_kubesim.dra.podclaims import (
    NOT_AVAILABLE_ON_NODE,
    PodClaims,
    allocated_fits,
    in_use,
    is_reserved_for,
    pod_claims,
    pod_reference,
)
from hami_kubesim.scheduler.statuses import NodeStatus, unresolvable

__all__ = [
    "DEVICE_CLASSES",
    "RESOURCE_CLAIMS",
    "RESOURCE_SLICES",
    "ClaimWriteError",
    "DraAttempt",
    "DynamicResources",
]

log = structlog.get_logger(__name__)

DELETE_PROTECTION: Final = "resource.kubernetes.io/delete-protection"
_WRITE_ATTEMPTS: Final = 5


class ClaimWriteError(Exception):
    """PreBind could not write a claim (allocated elsewhere, gone, retries spent)."""


@dataclass(slots=True)
class DraAttempt:
    """One scheduling attempt's DRA state: the pod's claims, what others hold, and the
    allocation found per feasible node."""

    pod: PodView
    claims: PodClaims
    held: AllocatedState
    slices: tuple[Mapping[str, Any], ...]
    classes: Mapping[str, Mapping[str, Any]]
    found: dict[str, Allocated] = field(default_factory=dict)


class DynamicResources:
    """The plugin over the loop's caches of slices, classes and claims (see the module doc)."""

    def __init__(self, client: KubeClient, *, slices: Store, classes: Store, claims: Store) -> None:
        self._client = client
        self._slices = slices
        self._classes = classes
        self._claims = claims
        self._in_flight: dict[str, Mapping[str, Any]] = {}  # claim key -> allocation
        self._reserved: dict[str, tuple[str, ...]] = {}  # pod key -> claim keys it put in flight

    def pre_filter(self, pod: PodView) -> DraAttempt | None:
        """``None`` for a pod without claims; raises
        :class:`~hami_kubesim.dra.podclaims.ClaimsNotReady` when the pod must wait."""
        self._forget_delivered()
        mine = set(self._reserved.get(pod.key, ()))
        claims = pod_claims(
            pod, self._claims.get, in_flight=(k for k in self._in_flight if k not in mine)
        )
        if claims is None:
            return None
        classes = {str(c["metadata"]["name"]): c for c in self._classes.objects()}
        pending = {claim_key(c) for c in claims.to_allocate}
        return DraAttempt(
            pod,
            claims,
            in_use(self._claims.objects(), self._in_flight, exclude=pending),
            tuple(self._slices.objects()),
            classes,
        )

    def filter(self, attempt: DraAttempt, node: NodeView) -> NodeStatus | None:
        """Whether the pod's claims fit ``node``; raises
        :class:`~hami_kubesim.dra.AllocatorError` for what aborts the attempt."""
        if not allocated_fits(attempt.claims, node):
            return unresolvable(NOT_AVAILABLE_ON_NODE)
        if not attempt.claims.to_allocate:
            return None
        outcome = allocate(
            attempt.claims.to_allocate,
            node=node,
            slices=attempt.slices,
            classes=attempt.classes,
            allocated=attempt.held,
        )
        if not isinstance(outcome, Allocated):
            return unresolvable(outcome.reason)
        attempt.found[node.name] = outcome
        return None

    def reserve(self, attempt: DraAttempt, node: str) -> None:
        found = attempt.found.get(node)
        if found is None:
            return
        for claim in found.claims:
            self._in_flight[claim.claim] = claim.allocation
        self._reserved[attempt.pod.key] = tuple(c.claim for c in found.claims)

    def unreserve(self, pod_key: str) -> None:
        for key in self._reserved.pop(pod_key, ()):
            self._in_flight.pop(key, None)

    def bound(self, pod_key: str) -> None:
        """The pod is bound: its allocations stay in flight until the watch delivers them."""
        self._reserved.pop(pod_key, None)

    async def pre_bind(self, attempt: DraAttempt, node: str) -> None:
        """Write every claim of the pod (see the module doc); raises :class:`ClaimWriteError`
        or :class:`~hami_kube.errors.KubeError`."""
        found = attempt.found.get(node)
        allocations = {c.claim: c.allocation for c in found.claims} if found else {}
        for claim in attempt.claims.all:
            key = claim_key(claim)
            await self._write(key, allocations.get(key), attempt.pod)

    async def _write(self, key: str, allocation: Mapping[str, Any] | None, pod: PodView) -> None:
        namespace, name = key.split("/", 1)
        for _ in range(_WRITE_ATTEMPTS):
            current = await self._client.get(RESOURCE_CLAIMS, name, namespace=namespace)
            status = dict(current.get("status") or {})
            if allocation is not None and status.get("allocation") not in (None, allocation):
                raise ClaimWriteError(f"claim {key} got allocated elsewhere in the meantime")
            try:
                if allocation is not None and DELETE_PROTECTION not in _finalizers(current):
                    meta = current["metadata"]
                    meta["finalizers"] = [*_finalizers(current), DELETE_PROTECTION]
                    current = await self._client.replace(RESOURCE_CLAIMS, current)
                if allocation is not None:
                    status["allocation"] = dict(allocation)
                if not is_reserved_for(current, pod):
                    reserved = list(status.get("reservedFor") or ())
                    status["reservedFor"] = [*reserved, pod_reference(pod)]
                elif allocation is None:
                    return
                await self._client.replace(
                    RESOURCE_CLAIMS, {**current, "status": status}, subresource="status"
                )
                return
            except ConflictError:
                log.debug("claim changed while writing; retrying", claim=key)
                await asyncio.sleep(0)
        raise ClaimWriteError(f"claim {key}: still conflicting after {_WRITE_ATTEMPTS} attempts")

    def _forget_delivered(self) -> None:
        """Drop in-flight allocations of bound pods once the store has them (or the claim)."""
        reserved = {k for keys in self._reserved.values() for k in keys}
        for key in [k for k in self._in_flight if k not in reserved]:
            stored = self._claims.get(key)
            if stored is None or (stored.get("status") or {}).get("allocation"):
                del self._in_flight[key]


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    return [str(f) for f in (obj.get("metadata") or {}).get("finalizers") or ()]
