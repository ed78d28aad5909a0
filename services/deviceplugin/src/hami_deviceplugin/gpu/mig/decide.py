"""Pure: every MIG decision — what an Allocate creates, adopts or clears, what the plugin does at
start, what the reconciler destroys — over frozen data.

An instance is *referenced* by a reservation when it sits on the reservation's GPU with the same
profile at exactly the same placement (runtime ids are not compared: keeping an instance a live
pod could be using is always the safe side).  The rules that keep one pod's instance from ever
reaching another pod, or being destroyed under it:

* a reservation whose placement overlaps another pod's live reservation on the same GPU is
  refused (even at exactly the same placement: pods never share an instance);
* an existing instance is adopted only at exactly the reserved profile and placement, and only
  when the pod's own reservations already name it (its MIG UUID, recorded by an earlier
  Allocate of this pod): an instance at that placement that no reservation names is a leftover
  — a force-deleted pod's container may still run in it — and is cleared and made anew, never
  handed over (clearing an instance with processes fails, and the Allocate with it);
* an instance overlapping a reservation differently is cleared only when no live reservation
  references it and the pods are known for sure (the pod watch has synced); else refused;
* the reconciler and the start-up pass destroy only instances no live reservation references,
  and nothing on a GPU any unreadable reservation annotation might name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hami_deviceplugin.allocation.entries import AllocatingPod
from hami_deviceplugin.errors import invalid
from hami_deviceplugin.gpu.mig.model import (
    MigCapability,
    MigInstance,
    MigProfileSpec,
    MigState,
    overlaps,
)
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import NVIDIA_MIG_ALLOCATIONS
from hami_protocol.pod.mig import MigReservation, decode_mig_reservations

__all__ = [
    "Adopt",
    "Clear",
    "Create",
    "LiveReservations",
    "StartupPlan",
    "Step",
    "live_reservations",
    "reconcile_destroys",
    "references",
    "reservation_steps",
    "startup_plan",
]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

InstanceKey = tuple[str, int]
"""``(GPU UUID, GPU instance id)``."""


@dataclass(frozen=True, slots=True)
class Adopt:
    reservation: MigReservation
    instance: MigInstance


@dataclass(frozen=True, slots=True)
class Create:
    reservation: MigReservation
    profile: MigProfileSpec


@dataclass(frozen=True, slots=True)
class Clear:
    """Destroy an unreferenced instance in the way of a reservation."""

    instance: MigInstance


Step = Adopt | Create | Clear


@dataclass(frozen=True, slots=True)
class LiveReservations:
    """The reservations of the node's non-terminated pods, by pod UID, and the GPUs on which
    nothing may be destroyed because some pod's annotation could not be read."""

    by_pod: Mapping[str, tuple[MigReservation, ...]]
    doubtful: frozenset[str] = frozenset()

    def all(self) -> tuple[MigReservation, ...]:
        return tuple(r for reservations in self.by_pod.values() for r in reservations)


def references(reservation: MigReservation, instance: MigInstance) -> bool:
    return (
        reservation.gpu_uuid == instance.gpu_uuid
        and reservation.profile == instance.profile
        and reservation.placement == instance.placement
    )


def live_reservations(pods: Iterable[AllocatingPod], gpu_uuids: Iterable[str]) -> LiveReservations:
    """What the node's pods reserve.  A pod whose annotation does not decode makes every GPU whose
    UUID appears in any of its annotations doubtful, or every GPU when none does."""
    gpus = tuple(gpu_uuids)
    by_pod: dict[str, tuple[MigReservation, ...]] = {}
    doubtful: set[str] = set()
    for pod in pods:
        if pod.phase in TERMINAL_PHASES:
            continue
        value = pod.annotations.get(NVIDIA_MIG_ALLOCATIONS)
        if value is None:
            continue
        try:
            by_pod[pod.uid] = decode_mig_reservations(value)
        except ProtocolError:
            text = " ".join(pod.annotations.values())
            named = {uuid for uuid in gpus if uuid in text}
            doubtful.update(named or gpus)
    return LiveReservations(by_pod=by_pod, doubtful=frozenset(doubtful))


def _check_against_others(
    reservation: MigReservation, pod_uid: str, live: LiveReservations
) -> None:
    for owner, reservations in live.by_pod.items():
        for other in reservations:
            if other.gpu_uuid != reservation.gpu_uuid:
                continue
            if not overlaps(other.placement, reservation.placement):
                continue
            same_pod_same_instance = owner == pod_uid and (
                other.profile == reservation.profile and other.placement == reservation.placement
            )
            if owner == pod_uid and other.key == reservation.key:
                continue
            if not same_pod_same_instance:
                whose = "another container of this pod" if owner == pod_uid else f"pod {owner}"
                raise invalid(
                    f"MIG reservation {reservation.profile} at slices "
                    f"{reservation.placement.start}+{reservation.placement.size} on "
                    f"{reservation.gpu_uuid} overlaps {whose}'s reservation {other.profile} at "
                    f"{other.placement.start}+{other.placement.size}"
                )


def _is_this(candidate: MigReservation, reservation: MigReservation) -> bool:
    """The same reservation, whether or not runtime ids were recorded on either copy."""
    return candidate.key == reservation.key and candidate.placement == reservation.placement


def reservation_steps(
    reservations: Sequence[MigReservation],
    *,
    pod_uid: str,
    capabilities: Mapping[str, MigCapability],
    states: Mapping[str, MigState],
    live: LiveReservations,
    pods_known: bool,
) -> tuple[Step, ...]:
    """What realising ``reservations`` (one pod's, for the containers being allocated) takes:
    per reservation an :class:`Adopt` or a :class:`Create`, preceded by the :class:`Clear` of
    stale instances in its way.  ``capabilities`` holds this node's MIG GPUs with their
    registered profiles; ``live`` every live pod's reservations (``pod_uid``'s included).
    Raises :class:`~hami_deviceplugin.errors.AllocateError` (invalid) with the reason."""
    steps: list[Step] = []
    everyone = live.all()
    own = {
        r.runtime.mig_uuid
        for r in (*live.by_pod.get(pod_uid, ()), *reservations)
        if r.runtime is not None
    }
    taken: dict[str, list[MigReservation]] = {}
    for reservation in reservations:
        gpu = reservation.gpu_uuid
        capability = capabilities.get(gpu)
        state = states.get(gpu)
        if capability is None or state is None:
            raise invalid(f"MIG reservation names GPU {gpu}, which is not a MIG GPU of this node")
        if state.mode != "enabled":
            raise invalid(f"MIG mode is {state.mode} on GPU {gpu}")
        spec = capability.profile(reservation.profile)
        if spec is None:
            offered = ", ".join(p.name for p in capability.profiles)
            raise invalid(
                f"unknown MIG profile {reservation.profile!r} on GPU {gpu} (offered: {offered})"
            )
        if reservation.placement not in spec.placements:
            raise invalid(
                f"GPU {gpu} offers no {spec.name} instance at slices "
                f"{reservation.placement.start}+{reservation.placement.size}"
            )
        for earlier in taken.get(gpu, ()):
            # Two containers of one pod may hold one instance, but then they are allocated in
            # separate calls (the second adopts it); within one call every device is its own.
            if overlaps(earlier.placement, reservation.placement):
                raise invalid(
                    f"MIG reservations {earlier.key} and {reservation.key} overlap on GPU {gpu}"
                )
        taken.setdefault(gpu, []).append(reservation)
        _check_against_others(reservation, pod_uid, live)
        exact = next(
            (i for i in state.instances if references(reservation, i)),
            None,
        )
        if exact is not None:
            if gpu in live.doubtful:
                raise invalid(
                    f"GPU {gpu}: instance {exact.gi_id} sits at the reserved placement, but a "
                    "pod's MIG reservations on this GPU cannot be read: it may be that pod's"
                )
            if exact.mig_uuid in own:
                steps.append(Adopt(reservation, exact))
                continue
        for instance in state.instances:
            if not overlaps(instance.placement, reservation.placement):
                continue
            if Clear(instance) in steps:
                continue
            # This pod's reservation at exactly that placement does not make a leftover its own.
            in_use = any(
                references(r, instance)
                for r in everyone
                if not (instance is exact and r.gpu_uuid == gpu and _is_this(r, reservation))
            )
            if in_use or not pods_known or gpu in live.doubtful:
                raise invalid(
                    f"GPU {gpu}: instance {instance.gi_id} ({instance.profile} at slices "
                    f"{instance.placement.start}+{instance.placement.size}) is in the way of "
                    f"{reservation.profile} at {reservation.placement.start}+"
                    f"{reservation.placement.size}"
                    + (" and a live pod reserves it" if in_use else " and cannot be cleared now")
                )
            steps.append(Clear(instance))
        steps.append(Create(reservation, spec))
    return tuple(steps)


def reconcile_destroys(
    states: Mapping[str, MigState],
    *,
    owned: frozenset[str],
    managed: frozenset[InstanceKey],
    live: LiveReservations,
) -> tuple[MigInstance, ...]:
    """Instances no live reservation references, on GPUs not in doubt: any such instance on an
    ``owned`` GPU (one the plugin cleared at start: whatever is on it came through the plugin),
    only ``managed`` ones (created or adopted by the plugin) elsewhere."""
    everyone = live.all()
    return tuple(
        instance
        for gpu, state in sorted(states.items())
        if gpu not in live.doubtful
        for instance in state.instances
        if (gpu in owned or (gpu, instance.gi_id) in managed)
        and not any(references(r, instance) for r in everyone)
    )


@dataclass(frozen=True, slots=True)
class StartupPlan:
    busy: frozenset[str]
    enable: tuple[str, ...]
    """Idle GPUs whose MIG mode is off."""
    pending: tuple[str, ...]
    """Idle GPUs waiting for a reset to enter MIG mode: reported unhealthy."""
    destroy: tuple[MigInstance, ...]
    """Every instance on an idle GPU (no live pod names an idle GPU)."""
    adopt: frozenset[InstanceKey]
    """Instances on busy GPUs that live reservations reference: managed from now on."""

    idle_enabled: tuple[str, ...] = ()
    """Idle GPUs already in MIG mode."""

    @property
    def owned(self) -> frozenset[str]:
        """The idle GPUs: cleared now, so every later instance on them is the plugin's."""
        return frozenset(set(self.enable) | set(self.idle_enabled))


def startup_plan(
    states: Mapping[str, MigState],
    *,
    live: LiveReservations | None,
    processes: frozenset[str],
) -> StartupPlan:
    """What the plugin does to its MIG GPUs at start.  ``live`` None (the pods could not be
    listed) makes every GPU busy: nothing is changed, nothing adopted."""
    if live is None:
        return StartupPlan(frozenset(states), (), (), (), frozenset())
    everyone = live.all()
    busy = frozenset(
        {r.gpu_uuid for r in everyone} | (processes & set(states)) | (live.doubtful & set(states))
    )
    idle = sorted(set(states) - busy)
    return StartupPlan(
        busy=busy,
        enable=tuple(gpu for gpu in idle if states[gpu].mode == "disabled"),
        pending=tuple(gpu for gpu in idle if states[gpu].mode == "pending"),
        destroy=tuple(i for gpu in idle for i in states[gpu].instances),
        idle_enabled=tuple(gpu for gpu in idle if states[gpu].mode == "enabled"),
        adopt=frozenset(
            (gpu, instance.gi_id)
            for gpu in sorted(busy)
            for instance in states[gpu].instances
            if any(references(r, instance) for r in everyone)
        ),
    )
