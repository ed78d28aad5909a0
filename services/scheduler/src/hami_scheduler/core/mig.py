"""Dynamic MIG: which slices of a GPU are taken, and which profile and placement a request gets.

A MIG GPU registers the profiles it may be cut into (:class:`~hami_protocol.node.registry.
MigProfile`: memory, cores, slice count and the placements NVML allows).  Pods hold
reservations (:class:`~hami_protocol.pod.mig.MigReservation`), each occupying the slices
``[start, start + size)`` of one GPU.

* :func:`mig_occupancy` rebuilds every GPU's :class:`GpuOccupancy` from all pods' reservations.
  Two reservations whose slices overlap are both kept and reported by
  :meth:`GpuOccupancy.conflicts` — a merged view would hide that the hardware cannot hold both.
* :func:`choose_instance` is HAMi's choice for one device: profiles sorted by memory, then slice
  count; the first whose memory covers the request and that has a free placement wins.  Profiles
  ``1g.*`` and ``3g.*`` take the highest free start, others the lowest (small instances pack at
  the top so the low slices stay whole for large ones).  The usage charged is the profile's
  memory and cores, not the request's.
* :func:`choose_instances` takes N instances over GPUs in the given order, revisiting a GPU until
  it has nothing more to give, so one container may get several instances of one GPU.

When nothing fits, a :class:`MigRefusal` says why in data: no profile is large enough, or the
smallest large-enough profile has no placement inside the free slice runs (fragmentation).
:meth:`MigRefusal.describe` renders it after HAMi's word ``CardMigTopologyInfeasible``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from hami_protocol.node.registry import DeviceInfo, MigPlacement, MigProfile
from hami_protocol.pod.mig import MigReservation
from hami_protocol.request.containers import PERCENTAGE_UNSET, ContainerDeviceRequest
from hami_scheduler.core.reasons import CARD_MIG_TOPOLOGY_INFEASIBLE

__all__ = [
    "CARD_MIG_TOPOLOGY_INFEASIBLE",
    "GpuOccupancy",
    "HeldSlices",
    "MigChoice",
    "MigConflict",
    "MigGpu",
    "MigHold",
    "MigPick",
    "MigRefusal",
    "choose_instance",
    "choose_instances",
    "format_slices",
    "mig_holds",
    "mig_memory",
    "mig_occupancy",
    "overlaps",
    "placement_order",
    "profile_order",
]


_HIGH_START_PREFIXES: Final = ("1g.", "3g.")


def overlaps(a: MigPlacement, b: MigPlacement) -> bool:
    """Whether the slice runs ``[start, start + size)`` of ``a`` and ``b`` share a slice."""
    return a.start < b.start + b.size and b.start < a.start + a.size


def format_slices(placement: MigPlacement) -> str:
    """``[start,end)``."""
    return f"[{placement.start},{placement.start + placement.size})"


# --- occupancy ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeldSlices:
    """One reservation's slices on a GPU; ``owner`` says whose, for messages."""

    owner: str
    profile: str
    placement: MigPlacement

    def describe(self) -> str:
        return f"{self.owner} ({self.profile} {format_slices(self.placement)})"


@dataclass(frozen=True, slots=True)
class MigConflict:
    """Two reservations on one GPU that claim the same slice."""

    gpu_uuid: str
    first: HeldSlices
    second: HeldSlices

    def describe(self) -> str:
        return f"{self.gpu_uuid}: {self.first.describe()} overlaps {self.second.describe()}"


@dataclass(frozen=True, slots=True)
class GpuOccupancy:
    """The slices of one GPU that reservations hold, sorted by start, size and owner."""

    gpu_uuid: str
    held: tuple[HeldSlices, ...] = ()

    def __post_init__(self) -> None:
        ordered = sorted(self.held, key=lambda h: (h.placement.start, h.placement.size, h.owner))
        object.__setattr__(self, "held", tuple(ordered))

    def is_free(self, placement: MigPlacement) -> bool:
        """Whether no held reservation touches ``placement``."""
        return not any(overlaps(placement, h.placement) for h in self.held)

    def with_held(self, slices: HeldSlices) -> GpuOccupancy:
        return GpuOccupancy(self.gpu_uuid, (*self.held, slices))

    def conflicts(self) -> tuple[MigConflict, ...]:
        """Every pair of held reservations that overlap (each pair once)."""
        found: list[MigConflict] = []
        for position, first in enumerate(self.held):
            for second in self.held[position + 1 :]:
                if second.placement.start >= first.placement.start + first.placement.size:
                    break  # sorted by start: nothing later can reach back into ``first``
                found.append(MigConflict(self.gpu_uuid, first, second))
        return tuple(found)

    def free_runs(self, span: int) -> tuple[MigPlacement, ...]:
        """The maximal runs of free slices within ``[0, span)``."""
        taken = [False] * span
        for h in self.held:
            for slice_index in range(
                h.placement.start, min(h.placement.start + h.placement.size, span)
            ):
                taken[slice_index] = True
        runs: list[MigPlacement] = []
        start: int | None = None
        for slice_index, busy in enumerate([*taken, True]):
            if not busy and start is None:
                start = slice_index
            elif busy and start is not None:
                runs.append(MigPlacement(start, slice_index - start))
                start = None
        return tuple(runs)


MigHold = tuple[str, HeldSlices]
"""``(GPU UUID, the slices held there)``: one reservation as a node's occupancy counts it."""


def mig_holds(pod: str, reservations: Iterable[MigReservation]) -> tuple[MigHold, ...]:
    """The holds of one pod's reservations; ``pod`` (``namespace/name``) names their owner, so
    equal holds belong to the same reservation and removing one removes exactly it."""
    return tuple(
        (
            r.gpu_uuid,
            HeldSlices(
                f"{pod} container {r.container_index} device {r.device_index}",
                r.profile,
                r.placement,
            ),
        )
        for r in reservations
    )


def mig_occupancy(
    pods: Iterable[tuple[str, Iterable[MigReservation]]],
) -> dict[str, GpuOccupancy]:
    """GPU UUID → occupancy, from ``(pod name, that pod's reservations)`` of every pod."""
    held: dict[str, list[HeldSlices]] = {}
    for pod, reservations in pods:
        for uuid, slices in mig_holds(pod, reservations):
            held.setdefault(uuid, []).append(slices)
    return {uuid: GpuOccupancy(uuid, tuple(slices)) for uuid, slices in held.items()}


# --- the GPU and the request ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigGpu:
    """What the choice needs of a MIG GPU: its UUID, total memory and registered profiles."""

    uuid: str
    totalmem: int
    profiles: tuple[MigProfile, ...]

    @classmethod
    def from_info(cls, info: DeviceInfo) -> MigGpu:
        return cls(info.id, info.devmem, info.mig_profiles)

    @property
    def span(self) -> int:
        """Number of slices: the end of the furthest placement any profile offers."""
        return max(
            (p.start + p.size for profile in self.profiles for p in profile.placements), default=0
        )


def mig_memory(request: ContainerDeviceRequest, totalmem: int) -> int:
    """MiB a request needs of a GPU: its own MiB, else its percentage of ``totalmem``."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentagereq != PERCENTAGE_UNSET:
        return totalmem * request.mem_percentagereq // 100
    return 0


def profile_order(profiles: Iterable[MigProfile]) -> tuple[MigProfile, ...]:
    """Smallest first: by memory, then slice count; ties keep registration order."""
    return tuple(sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)))


def placement_order(profile: MigProfile) -> tuple[MigPlacement, ...]:
    """The order placements are tried: highest start first for ``1g.*``/``3g.*``, else lowest."""
    descending = profile.name.startswith(_HIGH_START_PREFIXES)
    return tuple(sorted(profile.placements, key=lambda p: p.start, reverse=descending))


# --- the choice -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigChoice:
    """An instance to create: ``profile`` at ``placement`` on GPU ``gpu_uuid``."""

    gpu_uuid: str
    profile: MigProfile
    placement: MigPlacement

    @property
    def usedmem(self) -> int:
        """MiB to charge: the whole profile, whatever the request asked."""
        return self.profile.memory_mb

    @property
    def usedcores(self) -> int:
        return self.profile.core

    def reservation(self, container_index: int, device_index: int) -> MigReservation:
        return MigReservation(
            container_index, device_index, self.gpu_uuid, self.profile.name, self.placement
        )


@dataclass(frozen=True, slots=True)
class MigRefusal:
    """Why GPU ``gpu_uuid`` cannot give ``memreq`` MiB as a MIG instance.

    ``profile`` is the smallest registered profile large enough, ``None`` when there is none
    (then ``largest`` is the biggest there is, if any).  ``free`` are the free slice runs.
    """

    gpu_uuid: str
    memreq: int
    profile: MigProfile | None
    largest: MigProfile | None
    free: tuple[MigPlacement, ...]

    reason: str = CARD_MIG_TOPOLOGY_INFEASIBLE

    @property
    def fragmented(self) -> bool:
        """A profile is large enough and enough slices are free, just not in one usable run."""
        if self.profile is None:
            return False
        return sum(run.size for run in self.free) >= self.profile.slice_count

    def describe(self) -> str:
        return f"{self.reason}: {self.detail()}"

    def detail(self) -> str:
        """Which GPU, and why it has no placement, without the reason word."""
        head = self.gpu_uuid
        if self.profile is None:
            if self.largest is None:
                return f"{head} registers no MIG profile"
            return (
                f"{head} has no MIG profile of {self.memreq} MiB "
                f"(largest {self.largest.name}, {self.largest.memory_mb} MiB)"
            )
        runs = " ".join(format_slices(run) for run in self.free) or "(none)"
        starts = ",".join(
            str(p.start) for p in sorted(self.profile.placements, key=lambda p: p.start)
        )
        return (
            f"{head} {self.profile.name} fits {self.memreq} MiB but free slices {runs} offer no "
            f"placement of it (placements start at {starts or 'nowhere'})"
        )


def choose_instance(gpu: MigGpu, occupancy: GpuOccupancy, memreq: int) -> MigChoice | MigRefusal:
    """HAMi's choice of profile and placement for ``memreq`` MiB on ``gpu``."""
    ordered = profile_order(gpu.profiles)
    first_large: MigProfile | None = None
    for profile in ordered:
        if profile.memory_mb < memreq:
            continue
        first_large = first_large or profile
        for placement in placement_order(profile):
            if occupancy.is_free(placement):
                return MigChoice(gpu.uuid, profile, placement)
    return MigRefusal(
        gpu_uuid=gpu.uuid,
        memreq=memreq,
        profile=first_large,
        largest=ordered[-1] if ordered else None,
        free=occupancy.free_runs(max(gpu.span, _held_end(occupancy))),
    )


def _held_end(occupancy: GpuOccupancy) -> int:
    return max((h.placement.start + h.placement.size for h in occupancy.held), default=0)


@dataclass(frozen=True, slots=True)
class MigPick:
    """The outcome of :func:`choose_instances`.

    ``choices`` in the order taken; ``occupancy`` is the input occupancy plus the choices (every
    GPU visited, keyed by UUID); ``refusals`` holds, for each GPU the walk left because it had
    nothing more to give, why.
    """

    wanted: int
    choices: tuple[MigChoice, ...]
    occupancy: Mapping[str, GpuOccupancy] = field(hash=False)
    refusals: tuple[MigRefusal, ...] = ()

    @property
    def ok(self) -> bool:
        return len(self.choices) >= self.wanted


def choose_instances(
    gpus: Sequence[MigGpu],
    occupancy: Mapping[str, GpuOccupancy],
    request: ContainerDeviceRequest,
    count: int,
    *,
    owner: str = "",
) -> MigPick:
    """Take ``count`` instances of ``request``'s memory, GPU by GPU in the order given.

    A GPU is asked again after each instance it gives, so several instances may land on one GPU
    before the walk moves on.  New instances are recorded as held by ``owner``.
    """
    current = dict(occupancy)
    choices: list[MigChoice] = []
    refusals: list[MigRefusal] = []
    for gpu in gpus:
        if len(choices) >= count:
            break
        memreq = mig_memory(request, gpu.totalmem)
        taken_here = current.get(gpu.uuid, GpuOccupancy(gpu.uuid))
        while len(choices) < count:
            outcome = choose_instance(gpu, taken_here, memreq)
            if isinstance(outcome, MigRefusal):
                refusals.append(outcome)
                break
            choices.append(outcome)
            taken_here = taken_here.with_held(
                HeldSlices(owner, outcome.profile.name, outcome.placement)
            )
        current[gpu.uuid] = taken_here
    return MigPick(count, tuple(choices), current, tuple(refusals))
