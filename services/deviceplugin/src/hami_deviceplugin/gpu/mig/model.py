"""Pure: MIG as the hardware describes it, in frozen data.

A MIG-capable GPU offers GPU-instance profiles (:class:`MigProfileSpec`: slice count, memory,
streaming multiprocessors, where instances may start); an enabled GPU holds instances
(:class:`MigInstance`: one GPU instance with the one compute instance we create inside it, of the
same slice count and the shared engine profile).  What a pod's reservation names is a profile
*name* and a placement; :func:`registered_profiles` turns the hardware's profiles into the
``migProfiles`` of ``hami.io/node-nvidia-register``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from hami_protocol.node.registry import MigPlacement, MigProfile

__all__ = [
    "MigCapability",
    "MigInstance",
    "MigMode",
    "MigProfileSpec",
    "MigState",
    "overlaps",
    "profile_core",
    "registered_profiles",
]

MigMode = Literal["enabled", "disabled", "pending"]
"""``pending``: enabling was asked for but takes effect only after a GPU reset."""


@dataclass(frozen=True, slots=True)
class MigProfileSpec:
    """One GPU-instance profile of a GPU model."""

    name: str
    """``1g.5gb``: NVML's profile name without its ``MIG `` prefix."""
    profile_id: int
    """NVML's ``NVML_GPU_INSTANCE_PROFILE_*`` value."""
    slice_count: int
    memory_mb: int
    sm_count: int
    instance_count: int
    """How many instances of this profile fit on the empty GPU."""
    placements: tuple[MigPlacement, ...]


@dataclass(frozen=True, slots=True)
class MigCapability:
    """What a MIG-capable GPU offers: its profiles and the SMs of the whole GPU."""

    full_sms: int
    profiles: tuple[MigProfileSpec, ...]

    def profile(self, name: str) -> MigProfileSpec | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A GPU instance (``gi_id``) with its compute instance (``ci_id``) and MIG device UUID."""

    gpu_uuid: str
    profile: str
    placement: MigPlacement
    gi_id: int
    ci_id: int
    mig_uuid: str


@dataclass(frozen=True, slots=True)
class MigState:
    """One GPU's MIG mode and instances as read from the hardware just now."""

    mode: MigMode
    instances: tuple[MigInstance, ...] = ()


def overlaps(a: MigPlacement, b: MigPlacement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def profile_core(spec: MigProfileSpec, full_sms: int) -> int:
    """The profile's share of the GPU's SMs in percent, rounded up (``⌈sms×100/full⌉``)."""
    if full_sms <= 0:
        return 0
    return -(-spec.sm_count * 100 // full_sms)


def registered_profiles(
    capability: MigCapability, allowed: Iterable[str]
) -> tuple[MigProfile, ...]:
    """The allowed profiles the GPU offers, in the allow-list's order, as registered."""
    result: list[MigProfile] = []
    for name in allowed:
        spec = capability.profile(name)
        if spec is None:
            continue
        result.append(
            MigProfile(
                name=spec.name,
                memory_mb=spec.memory_mb,
                core=profile_core(spec, capability.full_sms),
                slice_count=spec.slice_count,
                placements=spec.placements,
            )
        )
    return tuple(result)
