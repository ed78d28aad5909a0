"""What every plugin's Allocate reads, and the lookup of the pod a call is for.

:class:`AllocationSources`: the node's pods as the pod watch has them
(:class:`~hami_deviceplugin.allocation.node_pods.NodePods`), the node (its lock) from the node
watch, and a listing of the kubelet's pods and their devices (the kubelet's pod-resources API:
:class:`~hami_deviceplugin.kubelet.podresources.PodResourcesClient`).

:func:`find_pod` gathers the evidence the identity rule reads (the pure
:mod:`hami_deviceplugin.allocation.identity`) and does what the rule asks for: a listed pod the
watch lacks costs one GET, the rule without a listing one LIST.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from hami_deviceplugin.allocation.entries import allocating_pod
from hami_deviceplugin.allocation.identity import (
    DeviceList,
    Evidence,
    Fetch,
    Identified,
    ListedPod,
    Refusal,
    Relist,
    find,
)
from hami_deviceplugin.allocation.node_pods import NodePods
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_kube.resources import JsonObject

__all__ = ["AllocationSources", "PodListing", "find_pod"]

_LOOKUPS = 3
"""Rounds of the identity rule in one lookup (each may GET pods or LIST them once)."""


class PodListing(Protocol):
    """The kubelet's pods and their devices (its pod-resources ``List``)."""

    async def list(self) -> tuple[ListedPod, ...] | None:
        """None when the listing cannot be had (the identity rule then does without it)."""
        ...


@dataclass(frozen=True, slots=True)
class AllocationSources:
    """What every plugin's Allocate reads: the node's pods, the node (its lock) from the node
    watch, and the kubelet's pod-resources API."""

    pods: NodePods
    node: Callable[[], JsonObject | None]
    """The node as the node watch has it; None before the watch delivered it."""
    pod_resources: PodListing


async def find_pod(
    sources: AllocationSources,
    *,
    node_name: str,
    devices: DeviceList,
    requests: tuple[tuple[str, ...], ...],
    answered: Mapping[str, frozenset[str]],
    reads: bool = True,
) -> tuple[Identified | Refusal, Mapping[str, JsonObject]]:
    """The pod the kubelet is admitting, and the pods it was found among.  ``reads``: a miss in
    the watch cache may cost a GET and a LIST (Allocate); otherwise the watch cache is taken as
    it is.  ``answered``: the device ids answered so far, by pod uid."""
    listing = await sources.pod_resources.list()
    pods = sources.pods.snapshot()
    fresh = not reads
    gone: set[str] = set()
    for _ in range(_LOOKUPS):
        evidence = Evidence(
            node_name=node_name,
            requests=requests,
            pods={key: allocating_pod(raw) for key, raw in pods.items()},
            fresh=fresh,
            listing=listing,
            gone=frozenset(gone),
            answered=answered,
        )
        outcome = find(evidence, devices)
        if isinstance(outcome, Fetch):
            for key in outcome.keys:
                found = await sources.pods.fetch(key)
                if found is None:
                    gone.add(key)
                else:
                    pods[key] = found
            continue
        if isinstance(outcome, Relist):
            pods = await sources.pods.relist()
            fresh = True
            gone.update(p.key for p in listing or () if p.key not in pods)
            continue
        return outcome, pods
    raise AllocateError(FailureKind.INTERNAL, "the pod could not be identified")
