"""Invariants over dynamic MIG reservations (``hami.io/vgpu-mig-allocations``).

* ``mig``: on every GPU, the reservations of the pods that still hold it (bound or placed
  there, not terminal) never share a slice; each names a GPU its node registers in MIG mode;
  no two reservations carry the same MIG UUID (one instance is one container's).
* what a Running MIG container must have been given (used by the ``env`` check):
  ``NVIDIA_VISIBLE_DEVICES`` = the MIG UUIDs of its reservations in device order, and none of
  HAMi-core's limits (:func:`mig_env_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kubesim.stack.state import ClusterState, node_devices, pod_key
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.pod import envs
from hami_protocol.pod.mig import MigReservation, decode_mig_reservations

__all__ = ["container_reservations_of", "mig_env_problems", "mig_problems", "reservations_of"]

_HAMI_CORE_PREFIXES: Final = ("CUDA_DEVICE_MEMORY_LIMIT", envs.CUDA_DEVICE_SM_LIMIT)


def reservations_of(pod: Mapping[str, Any]) -> tuple[MigReservation, ...] | None:
    """The pod's reservations; ``()`` without any, ``None`` when the value does not decode."""
    raw = PodView(pod).annotations.get(keys.NVIDIA_MIG_ALLOCATIONS)
    if not raw:
        return ()
    try:
        return tuple(decode_mig_reservations(raw))
    except (ProtocolError, ValueError):
        return None


def container_reservations_of(
    pod: Mapping[str, Any],
) -> dict[int, tuple[MigReservation, ...]]:
    """Container index (init containers first) → its reservations, by device index."""
    grouped: dict[int, list[MigReservation]] = {}
    for reservation in reservations_of(pod) or ():
        grouped.setdefault(reservation.container_index, []).append(reservation)
    return {
        index: tuple(sorted(found, key=lambda r: r.device_index))
        for index, found in grouped.items()
    }


def mig_env_problems(reservations: Sequence[MigReservation], given: Mapping[str, str]) -> list[str]:
    """What is wrong with the env a MIG container was given (empty: nothing)."""
    problems: list[str] = []
    if any(r.runtime is None for r in reservations):
        problems.append("Running before the device plugin recorded its MIG instances")
    else:
        wanted = ",".join(r.runtime.mig_uuid for r in reservations if r.runtime is not None)
        named = given.get(envs.NVIDIA_VISIBLE_DEVICES)
        if named != wanted:
            problems.append(f"{envs.NVIDIA_VISIBLE_DEVICES}={named!r}, reservations say {wanted!r}")
    extra = sorted(name for name in given if name.startswith(_HAMI_CORE_PREFIXES))
    if extra:
        problems.append(f"a MIG container got HAMi-core limits {extra}")
    return problems


def _holds(pod: Mapping[str, Any]) -> str:
    """The node whose slices the pod holds ("" when none)."""
    view = PodView(pod)
    if view.terminal:
        return ""
    return view.node_name or view.annotations.get(keys.VGPU_NODE, "")


def mig_problems(state: ClusterState) -> list[tuple[str, str]]:
    """``(subject, what is wrong)`` for the ``mig`` invariant (see the module doc)."""
    found: list[tuple[str, str]] = []
    per_gpu: dict[tuple[str, str], list[tuple[str, MigReservation]]] = {}
    seen_uuids: dict[str, str] = {}
    for pod in state.pods:
        node = _holds(pod)
        reservations = reservations_of(pod)
        if not node or not reservations:
            continue
        key = pod_key(pod)
        for reservation in reservations:
            per_gpu.setdefault((node, reservation.gpu_uuid), []).append((key, reservation))
            runtime = reservation.runtime
            if runtime is None:
                continue
            other = seen_uuids.setdefault(runtime.mig_uuid, key)
            if other != key:
                found.append((key, f"{runtime.mig_uuid} is also {other}'s instance"))
    for (node, uuid), held in per_gpu.items():
        registered = state.node(node)
        mode = (
            next((d.mode for d in (node_devices(registered) or ()) if d.id == uuid), None)
            if registered
            else None
        )
        if mode != "mig":
            owners = sorted({owner for owner, _ in held})
            found.append((f"{node}/{uuid}", f"reserved by {owners} but registered as {mode}"))
        ordered = sorted(held, key=lambda item: item[1].placement.start)
        for position, (owner, first) in enumerate(ordered):
            end = first.placement.start + first.placement.size
            for other, second in ordered[position + 1 :]:
                if second.placement.start >= end:
                    break
                found.append(
                    (
                        f"{node}/{uuid}",
                        f"{owner} {first.profile}@{first.placement.start} overlaps "
                        f"{other} {second.profile}@{second.placement.start}",
                    )
                )
    return found
