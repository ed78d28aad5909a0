"""Why a device or a node was refused: HAMi's reason words and their report format.

A fit counts one reason per refused device and reports them as ``"<count>/<cards> <Reason>"``
joined with ``", "`` (``"1/2 CardInsufficientMemory, 1/2 CardTypeMismatch"``), where ``cards`` is
the number of devices of the requested vendor on the node.  HAMi emits the parts in Go map order
(random); we sort them by reason word so the same situation always reads the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = [
    "ALLOCATED_CARDS_INSUFFICIENT_REQUEST",
    "CARD_APP_CLASS_MISMATCH",
    "CARD_COMPUTE_UNITS_EXHAUSTED",
    "CARD_CORDONED",
    "CARD_INSUFFICIENT_CORE",
    "CARD_INSUFFICIENT_MEMORY",
    "CARD_MIG_TOPOLOGY_INFEASIBLE",
    "CARD_NOT_FOUND_CUSTOM_FILTER_RULE",
    "CARD_NOT_HEALTH",
    "CARD_QOS_POLICY_MISMATCH",
    "CARD_TIME_SLICING_EXHAUSTED",
    "CARD_TYPE_MISMATCH",
    "CARD_UNHEALTHY",
    "CARD_UUID_MISMATCH",
    "EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT",
    "MODE_NOT_FIT",
    "NODE_INSUFFICIENT_DEVICE",
    "NODE_UNREGISTERED",
    "NUMA_NOT_FIT",
    "RESOURCE_QUOTA_NOT_FIT",
    "format_reasons",
    "reason_words",
]

CARD_NOT_HEALTH: Final = "CardNotHealth"
CARD_CORDONED: Final = "CardCordoned"
CARD_TYPE_MISMATCH: Final = "CardTypeMismatch"
NUMA_NOT_FIT: Final = "NumaNotFit"
CARD_UUID_MISMATCH: Final = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED: Final = "CardTimeSlicingExhausted"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: Final = "ExclusiveDeviceAllocateConflict"
RESOURCE_QUOTA_NOT_FIT: Final = "ResourceQuotaNotFit"
CARD_INSUFFICIENT_MEMORY: Final = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE: Final = "CardInsufficientCore"
CARD_COMPUTE_UNITS_EXHAUSTED: Final = "CardComputeUnitsExhausted"
CARD_MIG_TOPOLOGY_INFEASIBLE: Final = "CardMigTopologyInfeasible"
"""No MIG profile large enough has a free placement on the GPU; the fit appends which GPU and
which slices are free (:meth:`~hami_scheduler.core.mig.MigRefusal.describe`)."""
ALLOCATED_CARDS_INSUFFICIENT_REQUEST: Final = "AllocatedCardsInsufficientRequest"
NODE_INSUFFICIENT_DEVICE: Final = "NodeInsufficientDevice"
"""Reported bare (no counts) when a request names more devices than the node has."""
NODE_UNREGISTERED: Final = "node unregistered"
"""A candidate node the scheduler has no devices for (HAMi's FailedNodes text)."""


# Words only vendor fits use (core.vendors).
MODE_NOT_FIT: Final = "ModeNotFit"
"""Ascend: the pod's vNPU mode is not the node's; Enflame DRS: no profile serves the request."""
CARD_NOT_FOUND_CUSTOM_FILTER_RULE: Final = "CardNotFoundCustomFilterRule"
"""MetaX GPU, Moore Threads: the device is not the one the pod's earlier containers hold."""
CARD_UNHEALTHY: Final = "CardUnhealthy"
"""MetaX sGPU's own word for an unhealthy device."""
CARD_QOS_POLICY_MISMATCH: Final = "CardQosPolicyMismatch"
"""MetaX sGPU: the device's QoS policy is not the pod's."""
CARD_APP_CLASS_MISMATCH: Final = "CardAppClassMismatch"
"""MetaX sGPU: the device serves another app class than the pod's."""


def format_reasons(counts: Mapping[str, int], cards: int) -> str:
    """``"<n>/<cards> <Reason>"`` for every counted reason, sorted by reason, joined by ``", "``."""
    return ", ".join(f"{counts[word]}/{cards} {word}" for word in sorted(counts) if counts[word])


def reason_words(reason: str) -> list[str]:
    """The reason words of a ``FailedNodes`` text: ``"1/2 A, 1/2 B"`` → ``["A", "B"]``.

    What follows ``" — "`` (a MIG refusal's free slices, say) is detail, not a word."""
    words = []
    for part in reason.partition(" — ")[0].split(", "):
        head, _, rest = part.partition(" ")
        words.append(rest if rest and "/" in head else part)
    return words
