"""Pure: what preparing one claim on this node means: the answer for the kubelet, the CDI spec
and the HAMi-core grants whose host directories must exist (:func:`plan_claim`).

Per claim request one CDI device (:mod:`.cdi`) whose edits are
:func:`~hami_deviceplugin.gpu.plan.container_grant`'s answer for the request's GPUs, in result
order, each limited to what the allocation charged: ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` =
consumed memory in MiB (the whole published memory of a device held without a charge),
``CUDA_DEVICE_SM_LIMIT`` = consumed cores of the first device (0, "no limit", when not charged).
The grant is built for the container :func:`~.claims.claim_user` picks, so its cache directory
is ``<hook>/vgpu/containers/<podUID>_<container>`` as on the device-plugin path.

Refused (a per-claim error; the kubelet retries): a device that is not a healthy GPU of this node
(it vanished or turned unhealthy since allocation), and a device another prepared claim holds when
either holds it exclusively (no ``shareID``), as the kubelet helper asks of drivers.  Results with
``adminAccess`` are not checked against other claims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_deviceplugin.allocation.entries import AllocatingContainer, allocating_pod
from hami_deviceplugin.dra.cdi import container_edits, device_id, spec_file_name, spec_of
from hami_deviceplugin.dra.cdi import device_name as cdi_device_name
from hami_deviceplugin.dra.checkpoint import PreparedClaim, PreparedDevice
from hami_deviceplugin.dra.claims import (
    AllocatedDevice,
    ClaimError,
    ClaimRef,
    allocated_devices,
    claim_user,
    consumed_mib,
)
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.plan import AllocateOptions, ContainerGrant, HookLayout, container_grant
from hami_protocol.dra_driver import device_index
from hami_protocol.pod.devices import ContainerDevice

__all__ = ["ClaimPlan", "PlanInputs", "plan_claim"]

_DEVICE_TYPE = "NVIDIA"


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What the node contributes to every claim's plan."""

    node_name: str
    gpus: tuple[Gpu, ...]
    options: AllocateOptions
    layout: HookLayout
    memory_scaling: float = 1.0


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    prepared: PreparedClaim
    grants: tuple[ContainerGrant, ...]


def _gpu_of(device: AllocatedDevice, gpus: Mapping[int, Gpu], ref: ClaimRef) -> Gpu:
    index = device_index(device.device)
    gpu = None if index is None else gpus.get(index)
    if gpu is None or not gpu.healthy:
        raise ClaimError(
            f"claim {ref.key}: device {device.device} is not a healthy GPU of this node "
            "(it vanished or turned unhealthy after allocation)"
        )
    return gpu


def _check_exclusive(
    devices: Iterable[AllocatedDevice], ref: ClaimRef, others: Mapping[str, PreparedClaim]
) -> None:
    for device in devices:
        if device.admin_access:
            continue
        for other in others.values():
            if other.uid == ref.uid:
                continue
            for held in other.devices:
                if held.device != device.device:
                    continue
                if device.share_id is None or held.share_id is None:
                    raise ClaimError(
                        f"claim {ref.key}: device {device.device} is already prepared for claim "
                        f"{other.namespace}/{other.name}, and one of them holds it exclusively"
                    )


def _container(pod: Mapping[str, Any] | None, name: str) -> tuple[int, AllocatingContainer]:
    if pod is not None:
        for index, container in enumerate(allocating_pod(pod).containers):
            if container.name == name:
                return index, container
    return 0, AllocatingContainer(name)


def plan_claim(
    ref: ClaimRef,
    claim: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    *,
    pod_uid: str,
    node: PlanInputs,
    prepared: Mapping[str, PreparedClaim],
    cache_name: Callable[[], str],
) -> ClaimPlan:
    """The plan for ``claim`` (read back for ``ref``) used by ``pod`` (``pod_uid``; None when
    it could not be read); ``prepared`` are the claims already prepared here.  Raises
    :class:`~.claims.ClaimError`."""
    devices = allocated_devices(claim, ref, pool=node.node_name)
    by_index = {gpu.index: gpu for gpu in node.gpus}
    gpus = [_gpu_of(device, by_index, ref) for device in devices]
    _check_exclusive(devices, ref, prepared)
    requests: dict[str, list[tuple[AllocatedDevice, Gpu]]] = {}
    for device, gpu in zip(devices, gpus, strict=True):
        requests.setdefault(device.request, []).append((device, gpu))
    grants: list[ContainerGrant] = []
    edits: dict[str, dict[str, Any]] = {}
    for request, members in requests.items():
        index, container = _container(pod, claim_user(pod or {}, ref.name, request))
        granted = tuple(
            ContainerDevice(
                gpu.uuid,
                _DEVICE_TYPE,
                consumed_mib(device, int(gpu.memory_mib * node.memory_scaling)),
                device.cores or 0,
            )
            for device, gpu in members
        )
        grant = container_grant(
            index=index,
            container=container,
            devices=granted,
            pod_uid=pod_uid,
            options=node.options,
            layout=node.layout,
            cache_name=cache_name(),
        )
        grants.append(grant)
        edits[cdi_device_name(ref.uid, request)] = container_edits(grant)
    answer = tuple(
        PreparedDevice(
            request_names=(device.request,),
            pool=device.pool,
            device=device.device,
            cdi_ids=(device_id(cdi_device_name(ref.uid, device.request)),),
            share_id=device.share_id,
        )
        for device in devices
    )
    return ClaimPlan(
        prepared=PreparedClaim(
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            devices=answer,
            spec_file=spec_file_name(ref.uid) if edits else "",
            spec=spec_of(edits) if edits else {},
        ),
        grants=tuple(grants),
    )
