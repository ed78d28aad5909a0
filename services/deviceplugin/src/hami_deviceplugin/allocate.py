"""Pure: from a pod's annotations and the kubelet's request to the container's answer.

The kubelet names no pod and no container in ``Allocate``; it only sends device IDs, one call per
container that asks for the resource, init containers first.  So the container is the next entry
of the pod's ``hami.io/vgpu-devices-to-allocate`` list that still holds devices (the list has one
entry per container, init containers first), and that entry is what the container gets.

The answer is HAMi-core's contract (HAMi ``plugin/server.go``):

* env ``NVIDIA_VISIBLE_DEVICES`` (the entry's GPU UUIDs), ``CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m``
  per device, ``CUDA_DEVICE_SM_LIMIT`` (cores of the first device),
  ``CUDA_DEVICE_MEMORY_SHARED_CACHE=<hook>/vgpu/<uuid4>.cache``, ``CUDA_OVERSUBSCRIBE=true`` when
  memory scaling > 1, ``LIBCUDA_LOG_LEVEL`` when configured, ``GPU_CORE_UTILIZATION_POLICY=disable``
  when core limits are off;
* mounts ``<hook>/vgpu/libvgpu.so`` (ro), the container's own cache directory
  ``<hook>/vgpu/containers/<pod uid>_<container>`` at ``<hook>/vgpu`` (rw), ``/tmp/vgpulock``
  (rw), ``/etc/ld.so.preload`` ← ``<hook>/vgpu/ld.so.preload`` (ro) unless the container sets
  ``CUDA_DISABLE_CONTROL=true``, and the licence files when the host has them.

The consumed entry becomes an empty segment (the canonical decode keeps the list from growing);
when no entry of any vendor is left the pod is done (bind-phase ``success``, node lock released).
Every way the inputs can be wrong raises :class:`AllocateError` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from hami_deviceplugin.pending import others_pending
from hami_protocol import envs
from hami_protocol.devices import (
    ContainerDevice,
    ContainerDevices,
    PodSingleDevice,
    decode_pod_devices_canonical,
    encode_pod_devices,
    has_pending,
    next_pending,
    pop_next_pending,
)
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import (
    BIND_PHASE,
    BIND_PHASE_FAILED,
    NVIDIA_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
)

__all__ = [
    "VGPU_LOCK_DIR",
    "AllocateError",
    "AllocateOptions",
    "AllocationPlan",
    "ContainerGrant",
    "ContainerView",
    "FailureKind",
    "HookLayout",
    "MountSpec",
    "PodView",
    "check_pod",
    "container_grant",
    "next_entry_uuids",
    "plan_allocation",
    "pod_view",
    "preferred_replicas",
]

VGPU_LOCK_DIR: Final = "/tmp/vgpulock"
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})


class FailureKind(StrEnum):
    """Why an allocation failed; the gRPC layer maps it to a status code."""

    NO_POD = "no_pod"  # no pod could be identified
    INVALID = "invalid"  # annotations or request do not fit together
    API = "api"  # the API server could not be read or written
    HOST = "host"  # host directories could not be prepared
    TIMEOUT = "timeout"  # the allocation deadline passed
    INTERNAL = "internal"


class AllocateError(Exception):
    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


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
    use_kubelet_devices: bool = False
    """``enablegetpreferredallocation``: the kubelet's chosen replicas name the GPUs."""


@dataclass(frozen=True, slots=True)
class ContainerView:
    name: str
    disable_control: bool = False
    limits: tuple[tuple[str, str], ...] = ()
    """Resource limits (requests where no limit is given), as written, sorted by name."""

    def limit(self, resource: str) -> str | None:
        return next((value for name, value in self.limits if name == resource), None)


@dataclass(frozen=True, slots=True)
class PodView:
    """What Allocate reads from a pod: identity, containers (init first), annotations."""

    namespace: str
    name: str
    uid: str
    containers: tuple[ContainerView, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    grants: tuple[ContainerGrant, ...]
    remaining: str
    """The new ``-devices-to-allocate`` value."""
    done: bool
    """No container of any vendor waits any more: bind-phase success, release the lock."""


# --- reading the pod ----------------------------------------------------------------------------


def _disable_control(container: Mapping[str, Any]) -> bool:
    for variable in container.get("env") or ():
        if isinstance(variable, Mapping) and variable.get("name") == envs.CUDA_DISABLE_CONTROL:
            value = variable.get("value")
            if isinstance(value, str) and value in _GO_TRUE:
                return True
    return False


def _limits(container: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return ()
    merged: dict[str, str] = {}
    for part in ("requests", "limits"):
        values = resources.get(part)
        if isinstance(values, Mapping):
            merged.update((str(k), str(v)) for k, v in values.items())
    return tuple(sorted(merged.items()))


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """The parts of a pod object Allocate needs (tolerates missing fields)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    raw_annotations = meta.get("annotations") or {}
    annotations = {
        str(k): v for k, v in raw_annotations.items() if isinstance(v, str)
    }  # a non-string value cannot come from a real API server; drop it
    containers = [
        ContainerView(str(c.get("name", "")), _disable_control(c), _limits(c))
        for group in (spec.get("initContainers") or [], spec.get("containers") or [])
        for c in group
        if isinstance(c, Mapping)
    ]
    return PodView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        containers=tuple(containers),
        annotations=annotations,
    )


def _invalid(message: str) -> AllocateError:
    return AllocateError(FailureKind.INVALID, message)


def _decoded(pod: PodView) -> PodSingleDevice:
    value = pod.annotations.get(NVIDIA_DEVICES_TO_ALLOCATE)
    if value is None:
        raise _invalid(f"pod has no {NVIDIA_DEVICES_TO_ALLOCATE} annotation")
    try:
        entries = decode_pod_devices_canonical(value, key=NVIDIA_DEVICES_TO_ALLOCATE)
    except ProtocolError as exc:
        raise _invalid(str(exc)) from None
    # Some HAMi versions wrote ",,0,0:" placeholders for containers without devices.
    return tuple(tuple(device for device in entry if device.uuid) for entry in entries)


def next_entry_uuids(pod: PodView) -> tuple[str, ...]:
    """GPU UUIDs of the next container waiting for devices; () when none or unreadable."""
    try:
        found = next_pending(_decoded(pod))
    except AllocateError:
        return ()
    return () if found is None else tuple(device.uuid for device in found[1])


# --- deciding -----------------------------------------------------------------------------------


def check_pod(pod: PodView, node_name: str) -> None:
    """Refuse a pod placed on another node or whose allocation already failed."""
    placed = pod.annotations.get(VGPU_NODE)
    if placed is not None and placed != node_name:
        raise _invalid(f"pod was scheduled to node {placed!r}, not {node_name!r}")
    if pod.annotations.get(BIND_PHASE) == BIND_PHASE_FAILED:
        raise _invalid("the pod's device allocation has already failed (bind-phase failed)")


def _kubelet_choice(
    devices: ContainerDevices, device_ids: Sequence[str], owners: Mapping[str, str]
) -> ContainerDevices:
    chosen: list[ContainerDevice] = []
    for device, replica in zip(devices, device_ids, strict=True):
        uuid = owners.get(replica)
        if uuid is None:
            raise _invalid(f"kubelet asked for unknown device {replica!r}")
        chosen.append(ContainerDevice(uuid, device.type, device.usedmem, device.usedcores))
    return tuple(chosen)


def container_grant(
    *,
    index: int,
    container: ContainerView,
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
    pod: PodView,
    requests: Sequence[Sequence[str]],
    *,
    gpus: frozenset[str],
    owners: Mapping[str, str],
    options: AllocateOptions,
    layout: HookLayout,
    cache_names: Sequence[str],
) -> AllocationPlan:
    """Serve ``requests`` (one list of replica IDs per container) from ``pod``'s annotations.

    ``gpus`` are this node's GPU UUIDs, ``owners`` maps advertised replica IDs to them,
    ``cache_names`` gives one fresh name per request for the shared-cache file.
    """
    if len(cache_names) < len(requests):
        raise ValueError("one cache name per container request is needed")
    check_pod(pod, options.node_name)
    current = _decoded(pod)
    grants: list[ContainerGrant] = []
    for number, device_ids in enumerate(requests):
        popped = pop_next_pending(current)
        if popped is None:
            raise _invalid(
                f"no container of pod {pod.namespace}/{pod.name} is waiting for devices "
                f"({NVIDIA_DEVICES_TO_ALLOCATE} has nothing left)"
            )
        index, devices, current = popped
        if index >= len(pod.containers):
            raise _invalid(
                f"{NVIDIA_DEVICES_TO_ALLOCATE} entry {index} has no container "
                f"(the pod has {len(pod.containers)})"
            )
        container = pod.containers[index]
        if len(devices) != len(device_ids):
            raise _invalid(
                f"device number not matched: kubelet asked for {len(device_ids)} devices, "
                f"container {container.name!r} was given {len(devices)}"
            )
        if options.use_kubelet_devices:
            devices = _kubelet_choice(devices, device_ids, owners)
        for device in devices:
            if device.uuid not in gpus:
                raise _invalid(f"device {device.uuid!r} is not a GPU of node {options.node_name}")
        grants.append(
            container_grant(
                index=index,
                container=container,
                devices=devices,
                pod_uid=pod.uid,
                options=options,
                layout=layout,
                cache_name=cache_names[number],
            )
        )
    try:
        remaining = encode_pod_devices(current)
    except ProtocolError as exc:
        raise _invalid(str(exc)) from None
    done = not has_pending(current) and not others_pending(
        pod.annotations, own_key=NVIDIA_DEVICES_TO_ALLOCATE
    )
    return AllocationPlan(grants=tuple(grants), remaining=remaining, done=done)


def preferred_replicas(
    entry_uuids: Sequence[str],
    *,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    owners: Mapping[str, str],
) -> tuple[str, ...]:
    """Replicas of the annotated GPUs first (one per GPU), then the kubelet's order."""
    chosen = list(dict.fromkeys(must_include))[:size]
    taken_gpus = {owners.get(replica) for replica in chosen}
    for uuid in entry_uuids:
        if len(chosen) >= size:
            break
        if uuid in taken_gpus:
            continue
        pick = next((r for r in available if owners.get(r) == uuid and r not in chosen), None)
        if pick is not None:
            chosen.append(pick)
            taken_gpus.add(uuid)
    for replica in available:
        if len(chosen) >= size:
            break
        if replica not in chosen:
            chosen.append(replica)
    return tuple(chosen)
