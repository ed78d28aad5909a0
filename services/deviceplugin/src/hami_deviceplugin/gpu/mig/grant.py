"""Pure: the MIG half of the GPU plugin's Allocate decision.

A MIG container's entry in ``hami.io/vgpu-devices-to-allocate`` holds one device per MIG
instance (``GPU-uuid,NVIDIA,<profile MiB>,<profile core>``, the same GPU as often as it has
instances there); its reservations in ``hami.io/vgpu-mig-allocations`` say which profile at which
placement each device is.  :func:`plan_mig_turns` pairs them (refusing a count or GPU that does
not match) and consumes the entries as the hami-core path does; once the instances exist
:func:`mig_grant` answers the container with ``NVIDIA_VISIBLE_DEVICES`` = the MIG UUIDs in device
order and nothing of HAMi-core (no limits, no shared cache, no libvgpu.so or ld.so.preload):
the hardware isolates the instance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_deviceplugin.allocation.entries import (
    AllocatingPod,
    ContainerTurn,
    ListPlan,
    check_pod,
    consume_entries,
)
from hami_deviceplugin.errors import invalid
from hami_deviceplugin.gpu.plan import ContainerGrant, decoded_entries
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import NVIDIA_DEVICES_TO_ALLOCATE, NVIDIA_MIG_ALLOCATIONS
from hami_protocol.pod import envs
from hami_protocol.pod.devices import ContainerDevices
from hami_protocol.pod.mig import (
    MigReservation,
    MigRuntimeIds,
    ReservationKey,
    container_reservations,
    decode_mig_reservations,
)

__all__ = ["MigTurn", "mig_grant", "plan_mig_turns", "pod_reservations"]


@dataclass(frozen=True, slots=True)
class MigTurn:
    """One container being allocated, with its devices and their reservations (device order)."""

    container_index: int
    container_name: str
    devices: ContainerDevices
    reservations: tuple[MigReservation, ...]


def pod_reservations(pod: AllocatingPod) -> tuple[MigReservation, ...]:
    """The pod's ``hami.io/vgpu-mig-allocations`` (refused when missing or unreadable)."""
    value = pod.annotations.get(NVIDIA_MIG_ALLOCATIONS)
    if value is None:
        raise invalid(f"pod has no {NVIDIA_MIG_ALLOCATIONS} annotation (this is a MIG node)")
    try:
        return decode_mig_reservations(value)
    except ProtocolError as exc:
        raise invalid(str(exc)) from None


def plan_mig_turns(
    pod: AllocatingPod,
    requests: Sequence[Sequence[str]],
    *,
    gpus: frozenset[str],
    node_name: str,
) -> ListPlan[MigTurn]:
    """Which container each request serves, with its reservations, and the list left."""
    check_pod(pod, node_name)
    reservations = pod_reservations(pod)

    def turn(turn: ContainerTurn) -> MigTurn:
        devices = turn.devices
        name = turn.container.name
        if len(devices) != len(turn.requested):
            raise invalid(
                f"device number not matched: kubelet asked for {len(turn.requested)} devices, "
                f"container {name!r} was given {len(devices)}"
            )
        own = container_reservations(reservations, turn.index)
        if len(own) != len(devices):
            raise invalid(
                f"container {name!r} has {len(devices)} MIG devices but {len(own)} reservations"
            )
        for position, (device, reservation) in enumerate(zip(devices, own, strict=True)):
            if device.uuid not in gpus:
                raise invalid(f"device {device.uuid!r} is not a GPU of node {node_name}")
            if reservation.device_index != position or reservation.gpu_uuid != device.uuid:
                raise invalid(
                    f"container {name!r} device {position} is {device.uuid} but its "
                    f"reservation is device {reservation.device_index} on {reservation.gpu_uuid}"
                )
        return MigTurn(turn.index, name, devices, own)

    return consume_entries(
        pod,
        requests,
        key=NVIDIA_DEVICES_TO_ALLOCATE,
        entries=decoded_entries(pod),
        waiting_for="devices",
        grant=turn,
    )


def mig_grant(turn: MigTurn, runtime: Mapping[ReservationKey, MigRuntimeIds]) -> ContainerGrant:
    """The container's answer once its instances exist."""
    uuids = [runtime[r.key].mig_uuid for r in turn.reservations]
    return ContainerGrant(
        container_index=turn.container_index,
        container_name=turn.container_name,
        devices=turn.devices,
        envs={envs.NVIDIA_VISIBLE_DEVICES: ",".join(uuids)},
        mounts=(),
        fresh_dirs=(),
        shared_dirs=(),
    )
