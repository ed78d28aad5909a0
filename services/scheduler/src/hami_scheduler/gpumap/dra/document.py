"""Pure: the JSON of DRA cards in the ``GpuMap`` document (docs/gpumap.md, "DRA GPUs").

A DRA card has the fields of any card (``mode: "dra"``, ``schedulable: false``: kube-scheduler's
allocator places claims on it, never this extender, so the fit probe and the extender's free
figures leave it out) plus a ``dra`` block (driver, pool, device, shared, published).  Its
holders are claims: ``claim`` and ``pods`` (``status.reservedFor``) beside the usual fields,
``pod`` the first of those pods (so the vGPU monitors' usage, reported per pod, finds it).

The figures of DRA cards are summed apart (:func:`dra_summary`): the node's and the cluster's
``dra`` blocks, never their HAMi ``memory``/``cores``/``free``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from hami_protocol.dra_driver import DRIVER
from hami_scheduler.gpumap.dra.join import DraCard, DraHolder, DraNode, DraView
from hami_scheduler.gpumap.summary import Summary, add

__all__ = ["MODE", "VENDOR", "dra_card", "dra_pools", "dra_state", "dra_summary", "wanted_cards"]

MODE: Final = "dra"
VENDOR: Final = "NVIDIA"
"""The vendor of this driver's GPUs (the NVIDIA node agent publishes them)."""


def _wants(card: DraCard, vendor: str) -> bool:
    if not vendor:
        return True
    words = (VENDOR, card.device.model, DRIVER, MODE)
    return any(vendor in word.lower() for word in words)


def wanted_cards(node: DraNode | None, vendor: str) -> list[DraCard]:
    """The node's cards the vendor filter (lower-case substring; empty: all) selects: it
    matches the vendor word, the model, the driver name or ``dra``."""
    return [] if node is None else [card for card in node.cards if _wants(card, vendor)]


def dra_summary(cards: Iterable[DraCard]) -> Summary:
    """The cards' figures as one :class:`Summary` (largest pieces: most free on one card)."""
    return add(
        Summary(
            1,
            card.device.memory,
            card.allocated_memory,
            card.free_memory,
            card.free_memory,
            card.device.cores,
            card.allocated_cores,
            card.free_cores,
            card.free_cores,
            card.device.memory,
        )
        for card in cards
    )


def dra_pools(cards: Iterable[DraCard]) -> list[dict[str, Any]]:
    """The pools (ResourceSlices) the cards are published in, with their current generation."""
    pools = {card.pool: card.generation for card in cards if card.published}
    return [{"pool": pool, "generation": pools[pool]} for pool in sorted(pools)]


def dra_state(view: DraView) -> dict[str, Any]:
    """The document's ``dra`` block: whether DRA GPUs are watched, and why not."""
    return {"driver": DRIVER, "watched": view.watched, "reason": view.reason}


def dra_card(card: DraCard) -> dict[str, Any]:
    device = card.device
    return {
        "id": device.uuid or f"{card.pool}/{device.name}",
        "index": device.index,
        "vendor": VENDOR,
        "type": device.model,
        "mode": MODE,
        "health": True,
        "cordoned": False,
        "schedulable": False,
        "numa": device.numa,
        "memory": {
            "total": device.memory,
            "allocated": card.allocated_memory,
            "free": card.free_memory,
        },
        "cores": {
            "total": device.cores,
            "allocated": card.allocated_cores,
            "free": card.free_cores,
        },
        "shares": {"total": None, "used": len(card.holders)},
        "holders": [_holder(holder) for holder in card.holders],
        "usage": None,
        "dra": {
            "driver": DRIVER,
            "pool": card.pool,
            "device": device.name,
            "shared": device.shared,
            "published": card.published,
            "generation": card.generation,
            "placedBy": "kube-scheduler",
        },
    }


def _holder(holder: DraHolder) -> dict[str, Any]:
    pods = [{"name": pod.name, "uid": pod.uid} for pod in holder.pods]
    return {
        "namespace": holder.namespace,
        "pod": pods[0]["name"] if pods else None,
        "container": "",
        "uid": holder.uid,
        "memory": holder.memory,
        "cores": holder.cores,
        "priority": None,
        "assumed": False,
        "usage": None,
        "claim": holder.claim,
        "pods": pods,
        "requests": list(holder.requests),
        "exclusive": holder.whole,
        "adminAccess": holder.admin,
    }
