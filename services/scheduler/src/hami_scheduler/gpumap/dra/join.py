"""Pure: this driver's slices and allocated claims joined into per-node cards with their holders.

* Devices: per pool only the slices of the highest ``pool.generation`` count (as the allocator
  reads them; an older generation is being replaced); a device name repeated in a pool is shown
  once.  A card's node is its slice's ``spec.nodeName``.
* Holders: one per claim and card, however many of the claim's results name that card (its
  requests listed), so every allocated result is in exactly one holder.  Charged
  (docs/dra.md, contract §2.3): a result with a ``shareID`` its ``consumedCapacity`` (a capacity
  it does not list: 0); one without holds the **whole** device (exclusive); ``adminAccess`` is
  shown and charged nothing.  The claim's pods are its ``status.reservedFor``.
* A result naming a device no current slice publishes (the GPU went unhealthy, the agent
  stopped) is not dropped: its card is shown ``published: false`` with zero capacity, on the
  node the allocation's ``nodeSelector`` names (else the pool's name, which is the node's for this
  driver).
* Free: nothing on a card held whole; else capacity minus the charged shares (never below 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hami_scheduler.gpumap.dra.read import (
    ClaimFacts,
    PodRef,
    PublishedDevice,
    ResultFacts,
    SliceFacts,
)

__all__ = ["UNWATCHED", "DraCard", "DraHolder", "DraNode", "DraView", "join"]


@dataclass(frozen=True, slots=True)
class DraHolder:
    """One claim holding (part of) one card."""

    namespace: str
    claim: str
    uid: str
    pods: tuple[PodRef, ...]
    requests: tuple[str, ...]
    """The claim's requests allocated on this card (one result each)."""
    memory: int
    cores: int
    whole: bool
    """Holds the device whole (a result without ``shareID``)."""
    admin: bool
    """Only ``adminAccess`` results: shown, charged nothing."""


@dataclass(frozen=True, slots=True)
class DraCard:
    pool: str
    device: PublishedDevice
    published: bool
    holders: tuple[DraHolder, ...]
    generation: int | None = None
    """The pool's current ``pool.generation`` (None: no current slice publishes the device)."""

    @property
    def allocated_memory(self) -> int:
        return sum(h.memory for h in self.holders)

    @property
    def allocated_cores(self) -> int:
        return sum(h.cores for h in self.holders)

    @property
    def whole(self) -> bool:
        return any(h.whole for h in self.holders)

    @property
    def free_memory(self) -> int:
        return 0 if self.whole else max(self.device.memory - self.allocated_memory, 0)

    @property
    def free_cores(self) -> int:
        return 0 if self.whole else max(self.device.cores - self.allocated_cores, 0)


@dataclass(frozen=True, slots=True)
class DraNode:
    name: str
    cards: tuple[DraCard, ...]


@dataclass(frozen=True, slots=True)
class DraView:
    """What the map shows of DRA: the joined nodes, or why they are not watched."""

    watched: bool
    reason: str | None = None
    """Why not watched (the API or RBAC refused; not listed yet); None when watched."""
    nodes: Mapping[str, DraNode] | None = None

    @property
    def by_node(self) -> Mapping[str, DraNode]:
        return self.nodes or {}


UNWATCHED = DraView(False, "DRA GPUs are not watched (--gpumap-dra=false)")

_Key = tuple[str, str]
"""(pool, device name)."""


def _published(
    slices: Iterable[SliceFacts],
) -> tuple[dict[_Key, tuple[str, PublishedDevice]], dict[str, int]]:
    """The current devices with their nodes, and each pool's current generation."""
    current: dict[str, int] = {}
    ordered = sorted(slices, key=lambda s: s.name)
    for facts in ordered:
        current[facts.pool] = max(current.get(facts.pool, 0), facts.generation)
    devices: dict[_Key, tuple[str, PublishedDevice]] = {}
    for facts in ordered:
        if facts.generation != current[facts.pool]:
            continue
        for device in facts.devices:
            devices.setdefault((facts.pool, device.name), (facts.node or facts.pool, device))
    return devices, current


def _charge(result: ResultFacts, device: PublishedDevice) -> tuple[int, int]:
    if result.admin:
        return 0, 0
    if result.share_id is None:
        return device.memory, device.cores
    return result.memory or 0, result.cores or 0


def _holder(claim: ClaimFacts, device: PublishedDevice, results: list[ResultFacts]) -> DraHolder:
    charged = [_charge(result, device) for result in results]
    return DraHolder(
        namespace=claim.namespace,
        claim=claim.name,
        uid=claim.uid,
        pods=claim.pods,
        requests=tuple(result.request for result in results),
        memory=sum(memory for memory, _ in charged),
        cores=sum(cores for _, cores in charged),
        whole=any(not r.admin and r.share_id is None for r in results),
        admin=all(r.admin for r in results),
    )


def _unpublished(name: str) -> PublishedDevice:
    return PublishedDevice(name, "", "", None, None, 0, 0, shared=False)


def _order(card: DraCard) -> tuple[int, str]:
    index = card.device.index
    return (index if index is not None else 1 << 30, f"{card.pool}/{card.device.name}")


def join(slices: Iterable[SliceFacts], claims: Iterable[ClaimFacts]) -> dict[str, DraNode]:
    """Node name → its DRA cards (see the module doc), cards by index, holders by claim."""
    devices, current = _published(slices)
    placed: dict[_Key, tuple[str, PublishedDevice]] = dict(devices)
    held: dict[_Key, dict[str, tuple[ClaimFacts, list[ResultFacts]]]] = {}
    for claim in claims:
        for result in claim.results:
            key = (result.pool, result.device)
            if key not in placed:
                placed[key] = (claim.node or result.pool, _unpublished(result.device))
            mine = claim.uid or f"{claim.namespace}/{claim.name}"
            held.setdefault(key, {}).setdefault(mine, (claim, []))[1].append(result)
    by_node: dict[str, list[DraCard]] = {}
    for key, (node, device) in placed.items():
        holders = [_holder(claim, device, results) for claim, results in held.get(key, {}).values()]
        holders.sort(key=lambda h: (h.namespace, h.claim, h.uid))
        published = key in devices
        generation = current.get(key[0]) if published else None
        card = DraCard(key[0], device, published, tuple(holders), generation)
        by_node.setdefault(node, []).append(card)
    return {
        node: DraNode(node, tuple(sorted(cards, key=_order))) for node, cards in by_node.items()
    }
