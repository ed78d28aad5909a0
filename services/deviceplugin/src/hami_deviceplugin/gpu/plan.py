"""Pure: the GPU plugin's Allocate decision, from the pod's ``hami.io/vgpu-devices-to-allocate``
and the kubelet's request to each container's answer.

Which entry serves which request, and what makes the pod done, is
:func:`~hami_deviceplugin.allocation.entries.consume_entries` (shared with the RDMA plugin).
What the identity rule needs from this plugin is :func:`gpu_device_list`: the kubelet's replica
ids name GPUs (``<UUID>-<i>``), and an entry serves a request only when it names the same GPUs
(:func:`kubelet_mismatch`); :func:`preferred_replicas` steers the kubelet's choice to them in
``GetPreferredAllocation``.  The answer is HAMi-core's contract (HAMi ``plugin/server.go``):

* env ``NVIDIA_VISIBLE_DEVICES`` (the entry's GPU UUIDs), ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m``
  per device, ``CUDA_DEVICE_SM_LIMIT`` (cores of the first device),
  ``CUDA_DEVICE_MEMORY_SHARED_CACHE=<hook>/vgpu/<uuid4>.cache``, ``CUDA_OVERSUBSCRIBE=true`` when
  memory scaling > 1, ``LIBCUDA_LOG_LEVEL`` when configured, ``GPU_CORE_UTILIZATION_POLICY=disable``
  when core limits are off;
* mounts ``<hook>/vgpu/libvgpu.so`` (ro), the container's own cache directory
  ``<hook>/vgpu/containers/<pod uid>_<container>`` at ``<hook>/vgpu`` (rw), ``/tmp/vgpulock``
  (rw), ``/etc/ld.so.preload`` ← ``<hook>/vgpu/ld.so.preload`` (ro) unless the container sets
  ``CUDA_DISABLE_CONTROL=true``, and the licence files when the host has them.

Every way the inputs can be wrong raises :class:`~hami_deviceplugin.errors.AllocateError` with
the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from hami_deviceplugin.allocation.entries import (
    AllocatingContainer,
    AllocatingPod,
    ContainerTurn,
    ListPlan,
    check_pod,
    consume_entries,
    decode_entries,
)
from hami_deviceplugin.allocation.identity import DeviceList, Mismatch
from hami_deviceplugin.errors import AllocateError, invalid
from hami_protocol.keys import NVIDIA_DEVICES_TO_ALLOCATE
from hami_protocol.pod import envs
from hami_protocol.pod.devices import (
    ContainerDevices,
    PodSingleDevice,
    next_pending,
)

__all__ = [
    "VGPU_LOCK_DIR",
    "AllocateOptions",
    "AllocationPlan",
    "ContainerGrant",
    "HookLayout",
    "MountSpec",
    "container_grant",
    "decoded_entries",
    "gpu_device_list",
    "kubelet_mismatch",
    "next_entry_uuids",
    "plan_allocation",
    "preferred_replicas",
]

VGPU_LOCK_DIR: Final = "/tmp/vgpulock"


@dataclass(frozen=True, slots=True)
class MountSpec:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class HookLayout:
    """Where HAMi-core lives on the host (``HOOK_PATH``) and what the host offers."""

    hook_path: str = "/usr/local"
    libvgpu_host_path: str = ""
    """The host file mounted as libvgpu.so ("" = ``<hook>/vgpu/libvgpu.so``)."""
    license: bool = False
    """``<hook>/vgpu/license`` exists on the host."""

    @property
    def vgpu_dir(self) -> str:
        return f"{self.hook_path.rstrip('/')}/vgpu"


@dataclass(frozen=True, slots=True)
class AllocateOptions:
    node_name: str
    memory_scaling: float = 1.0
    disable_core_limit: bool = False
    lib_cuda_log_level: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerGrant:
    """One container's answer and the host directories it needs."""

    container_index: int
    container_name: str
    devices: ContainerDevices
    envs: Mapping[str, str]
    mounts: tuple[MountSpec, ...]
    fresh_dirs: tuple[str, ...]
    """Host directories recreated empty (mode 0777)."""
    shared_dirs: tuple[str, ...]
    """Host directories created when missing (mode 0777)."""


AllocationPlan: TypeAlias = ListPlan[ContainerGrant]
"""The GPU plugin's decision for one Allocate call."""


# --- reading the pod ----------------------------------------------------------------------------


def decoded_entries(pod: AllocatingPod) -> PodSingleDevice:
    """The pod's ``hami.io/vgpu-devices-to-allocate`` without placeholder devices."""
    entries = decode_entries(pod, NVIDIA_DEVICES_TO_ALLOCATE)
    # Some HAMi versions wrote ",,0,0:" placeholders for containers without devices.
    return tuple(tuple(device for device in entry if device.uuid) for entry in entries)


def next_entry_uuids(pod: AllocatingPod) -> tuple[str, ...]:
    """GPU UUIDs of the next container waiting for devices; () when none or unreadable."""
    try:
        found = next_pending(decoded_entries(pod))
    except AllocateError:
        return ()
    return () if found is None else tuple(device.uuid for device in found[1])


# --- deciding -----------------------------------------------------------------------------------


def kubelet_mismatch(
    entry: ContainerDevices,
    device_ids: Sequence[str],
    reused: frozenset[str],
    *,
    owners: Mapping[str, str],
) -> Mismatch | None:
    """Whether the kubelet's replicas name the entry's GPUs (as a multiset; a replica in
    ``reused`` stands for any GPU).  A count that differs, or an entry naming a GPU this node
    does not have, is the plan's to report."""
    known = frozenset(owners.values())
    if len(device_ids) != len(entry) or any(device.uuid not in known for device in entry):
        return None
    given = Counter(device.uuid for device in entry)
    chosen = Counter(owners.get(r, r) for r in device_ids if r not in reused)
    if chosen <= given:
        return None
    return Mismatch(
        chosen=tuple(owners.get(replica, replica) for replica in device_ids),
        given=tuple(device.uuid for device in entry),
    )


def gpu_device_list(resource: str, owners: Mapping[str, str]) -> DeviceList:
    """The GPU plugin's list for :mod:`~hami_deviceplugin.allocation.identity`."""

    def match(
        entry: ContainerDevices, ids: Sequence[str], reused: frozenset[str]
    ) -> Mismatch | None:
        return kubelet_mismatch(entry, ids, reused, owners=owners)

    return DeviceList(
        resource=resource,
        key=NVIDIA_DEVICES_TO_ALLOCATE,
        noun="GPUs",
        decode=decoded_entries,
        match=match,
    )


def container_grant(
    *,
    index: int,
    container: AllocatingContainer,
    devices: ContainerDevices,
    pod_uid: str,
    options: AllocateOptions,
    layout: HookLayout,
    cache_name: str,
) -> ContainerGrant:
    """The env and mounts HAMi-core needs for one container's devices."""
    vgpu = layout.vgpu_dir
    uuids = list(dict.fromkeys(device.uuid for device in devices))
    env: dict[str, str] = {envs.NVIDIA_VISIBLE_DEVICES: ",".join(uuids)}
    for number, device in enumerate(devices):
        env[envs.cuda_device_memory_limit(number)] = f"{device.usedmem}m"
    env[envs.CUDA_DEVICE_SM_LIMIT] = str(devices[0].usedcores)
    env[envs.CUDA_DEVICE_MEMORY_SHARED_CACHE] = f"{vgpu}/{cache_name}.cache"
    if options.memory_scaling > 1:
        env[envs.CUDA_OVERSUBSCRIBE] = "true"
    if options.lib_cuda_log_level:
        env[envs.LIBCUDA_LOG_LEVEL] = options.lib_cuda_log_level
    if options.disable_core_limit:
        env[envs.GPU_CORE_UTILIZATION_POLICY] = "disable"
    cache_dir = f"{vgpu}/containers/{pod_uid}_{container.name}"
    mounts = [
        MountSpec(f"{vgpu}/libvgpu.so", layout.libvgpu_host_path or f"{vgpu}/libvgpu.so", True),
        MountSpec(vgpu, cache_dir, False),
        MountSpec(VGPU_LOCK_DIR, VGPU_LOCK_DIR, False),
    ]
    if not container.disable_control:
        mounts.append(MountSpec("/etc/ld.so.preload", f"{vgpu}/ld.so.preload", True))
    if layout.license:
        mounts.append(MountSpec("/tmp/license", f"{vgpu}/license", True))
        mounts.append(MountSpec("/usr/bin/vgpuvalidator", f"{vgpu}/vgpuvalidator", True))
    return ContainerGrant(
        container_index=index,
        container_name=container.name,
        devices=devices,
        envs=env,
        mounts=tuple(mounts),
        fresh_dirs=(cache_dir,),
        shared_dirs=(VGPU_LOCK_DIR,),
    )


def plan_allocation(
    pod: AllocatingPod,
    requests: Sequence[Sequence[str]],
    *,
    gpus: frozenset[str],
    options: AllocateOptions,
    layout: HookLayout,
    cache_names: Sequence[str],
) -> AllocationPlan:
    """Serve ``requests`` (one list of replica IDs per container) from ``pod``'s annotations.

    ``gpus`` are this node's GPU UUIDs, ``cache_names`` gives one fresh name per request for the
    shared-cache file.  That the pod is the right one and its entries name the kubelet's GPUs is
    :mod:`~hami_deviceplugin.allocation.identity`'s to establish first.
    """
    if len(cache_names) < len(requests):
        raise ValueError("one cache name per container request is needed")
    check_pod(pod, options.node_name)

    def grant(turn: ContainerTurn) -> ContainerGrant:
        devices = turn.devices
        if len(devices) != len(turn.requested):
            raise invalid(
                f"device number not matched: kubelet asked for {len(turn.requested)} devices, "
                f"container {turn.container.name!r} was given {len(devices)}"
            )
        for device in devices:
            if device.uuid not in gpus:
                raise invalid(f"device {device.uuid!r} is not a GPU of node {options.node_name}")
        return container_grant(
            index=turn.index,
            container=turn.container,
            devices=devices,
            pod_uid=pod.uid,
            options=options,
            layout=layout,
            cache_name=cache_names[turn.number],
        )

    return consume_entries(
        pod,
        requests,
        key=NVIDIA_DEVICES_TO_ALLOCATE,
        entries=decoded_entries(pod),
        waiting_for="devices",
        grant=grant,
    )


def preferred_replicas(
    entry_uuids: Sequence[str],
    *,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    owners: Mapping[str, str],
) -> tuple[str, ...]:
    """Replicas of the entry's GPUs first, each GPU as often as the entry names it (the
    kubelet's must-include replicas count towards their GPU), then the kubelet's order."""
    chosen = list(dict.fromkeys(must_include))[:size]
    wanted = Counter(entry_uuids)
    wanted.subtract(owners.get(replica, replica) for replica in chosen)
    for uuid in dict.fromkeys(entry_uuids):
        spare = (r for r in available if owners.get(r) == uuid and r not in chosen)
        while wanted[uuid] > 0 and len(chosen) < size:
            pick = next(spare, None)
            if pick is None:
                break
            chosen.append(pick)
            wanted[uuid] -= 1
    for replica in available:
        if len(chosen) >= size:
            break
        if replica not in chosen:
            chosen.append(replica)
    return tuple(chosen)
