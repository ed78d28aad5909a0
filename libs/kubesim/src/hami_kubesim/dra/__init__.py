"""kube-scheduler's DRA allocation (structured parameters, consumable capacity), pure.

Plain API dicts in (ResourceSlices, DeviceClasses, the pod's ResourceClaims, other claims'
allocations), ``status.allocation`` dicts or a reason out; no I/O.  :mod:`.allocator` is the
entry point; :mod:`.pools`, :mod:`.claims`, :mod:`.capacity`, :mod:`.cel` and :mod:`.results`
are its parts (see /work/shared/contracts/dra.md §2–§3 for the rules they follow).
"""

from hami_kubesim.dra.allocator import (
    CANNOT_ALLOCATE,
    Allocated,
    AllocatorError,
    ClaimAllocation,
    Unfit,
    allocate,
    missing_class_reason,
)
from hami_kubesim.dra.claims import AllocatedState, allocated_state

__all__ = [
    "CANNOT_ALLOCATE",
    "Allocated",
    "AllocatedState",
    "AllocatorError",
    "ClaimAllocation",
    "Unfit",
    "allocate",
    "allocated_state",
    "missing_class_reason",
]
