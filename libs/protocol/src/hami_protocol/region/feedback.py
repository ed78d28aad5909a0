"""HAMi's priority feedback as a pure decision: which ``recentKernel`` / ``utilizationSwitch``
values the monitor writes into the regions of one node at each round.

HAMi-core sets ``recentKernel`` to 2 at each kernel launch and waits while it reads -1; it
throttles to its core limit only while ``utilizationSwitch`` is 1.  Each round the monitor ages
``recentKernel``, counts the tasks still active per GPU and priority (0 is the highest), blocks
the tasks a higher-priority task shares a GPU with, unblocks them when it is gone, and switches
the limit on where tasks contend (HAMi ``cmd/vGPUmonitor/feedback.go``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from hami_protocol.region.layout import RegionLayout

__all__ = [
    "FeedbackField",
    "FeedbackInput",
    "FeedbackWrite",
    "decide_feedback",
    "field_offset",
]


class FeedbackField(StrEnum):
    RECENT_KERNEL = "recent_kernel"
    UTILIZATION_SWITCH = "utilization_switch"


def field_offset(layout: RegionLayout, field: FeedbackField) -> int:
    """Where ``field`` (an int32) sits in a region of ``layout``."""
    if field is FeedbackField.RECENT_KERNEL:
        return layout.recent_kernel
    return layout.utilization_switch


@dataclass(frozen=True, slots=True)
class FeedbackInput:
    """One region as the decision needs it; ``key`` names it in the writes."""

    key: str
    uuids: tuple[str, ...]
    """The region's valid device UUIDs."""
    priority: int
    recent_kernel: int
    utilization_switch: int


@dataclass(frozen=True, slots=True)
class FeedbackWrite:
    key: str
    field: FeedbackField
    value: int


def decide_feedback(regions: Sequence[FeedbackInput]) -> tuple[FeedbackWrite, ...]:
    """The writes of one feedback round over all regions of a node (keys must be unique).

    1. Each region with ``recent_kernel > 0`` gets it decremented; if still positive and its
       priority is not negative, it counts as one active task at its priority on each of its
       GPUs.
    2. With the decremented values: a region is *blocking* (blocked) when one of its GPUs has an
       active task at a numerically lower priority; blocked with ``recent_kernel >= 0`` → -1,
       not blocked with ``recent_kernel < 0`` → 0.  *Contention* (blocked, or a GPU of its with
       more than one active task at its own priority) → ``utilization_switch`` 1, else 0,
       written only when it changes.

    At most one write per region and field, in input order, ``recent_kernel`` first; a field
    both steps change gets the final value.

    Where this differs from HAMi: HAMi's blocking check stops at the first of the region's GPUs
    that has any active task in its table and ignores the others; here every GPU of the region
    is looked at, so a multi-GPU task sharing its second GPU with a higher priority is blocked
    too.  HAMi counts into a fixed two-entry array per GPU (priorities 0 and 1) and fails on a
    larger priority; here any non-negative priority counts.  A GPU listed twice by one region
    counts once.
    """
    keys = Counter(region.key for region in regions)
    repeated = sorted(key for key, count in keys.items() if count > 1)
    if repeated:
        raise ValueError(f"regions named more than once: {', '.join(repeated)}")

    active: Counter[tuple[str, int]] = Counter()
    by_gpu: dict[str, set[int]] = {}
    aged: list[int] = []
    for region in regions:
        recent = region.recent_kernel
        if recent > 0:
            recent -= 1
            if recent > 0 and region.priority >= 0:
                for uuid in set(region.uuids):
                    active[uuid, region.priority] += 1
                    by_gpu.setdefault(uuid, set()).add(region.priority)
        aged.append(recent)

    writes: list[FeedbackWrite] = []
    for region, recent in zip(regions, aged, strict=True):
        gpus = set(region.uuids)
        blocked = any(p < region.priority for uuid in gpus for p in by_gpu.get(uuid, ()))
        final = recent
        if blocked and recent >= 0:
            final = -1
        elif not blocked and recent < 0:
            final = 0
        if final != region.recent_kernel:
            writes.append(FeedbackWrite(region.key, FeedbackField.RECENT_KERNEL, final))
        crowded = any(active[uuid, region.priority] > 1 for uuid in gpus)
        switch = 1 if blocked or crowded else 0
        if switch != region.utilization_switch:
            writes.append(FeedbackWrite(region.key, FeedbackField.UTILIZATION_SWITCH, switch))
    return tuple(writes)
