"""A snapshot of the cluster and the pure readings the report and the invariant checker share.

:class:`ClusterState` holds plain JSON objects (pods, nodes, events), the moment they were read
and which pods the scheduling loop still holds for another try. The functions below read what
the services wrote — through :mod:`hami_kube.objects` views — the device register of a node, the
devices allocated to a pod, the kubelet stand-in's allocation record (device IDs, which GPU a
replica ID is of, env), the env a container's allocation calls for, the scheduler's
FailedScheduling messages, and the per-device usage summed over the pods holding each device.
A :class:`Timeline` (node locks and pod states over time) may come with a snapshot.
Nothing here does I/O or raises on malformed input: unreadable values read as absent and are
reported by the invariant checker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from hami_kube.objects import NodeView, PodView, key_for
from hami_kubesim.scheduler.preemption.record import PreemptionRecord
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.registry import DeviceInfo, decode_node_devices
from hami_protocol.pod import envs
from hami_protocol.pod.devices import (
    ContainerDevice,
    DeviceUsageSummary,
    PodSingleDevice,
    collapse_device_usage,
    decode_pod_devices_canonical,
)

__all__ = [
    "ALLOCATIONS_ANNOTATION",
    "CdiFile",
    "ClusterState",
    "DeviceLoad",
    "LockMoment",
    "Outcome",
    "PodMoment",
    "Timeline",
    "allocated_devices",
    "allocation_record",
    "container_devices",
    "container_names",
    "device_loads",
    "expected_env",
    "failed_scheduling",
    "holding_pods",
    "node_devices",
    "outcome",
    "pod_key",
    "record_containers",
    "record_device_ids",
    "record_envs",
    "replica_gpu",
    "stage",
]

ALLOCATIONS_ANNOTATION = "kubesim.hami.io/container-allocations"
"""Where the kubelet stand-in records what each container was given (see ``kubelet.py``)."""


@dataclass(frozen=True, slots=True)
class PodMoment:
    """What the node lock rule reads of a pod, from ``at`` on (``exists=False``: gone)."""

    at: datetime
    key: str
    exists: bool
    node: str = ""
    phase: str = ""
    bind_phase: str = ""
    deleting: bool = False
    priority: int = 0
    nominated: str = ""
    """``status.nominatedNodeName``."""


@dataclass(frozen=True, slots=True)
class LockMoment:
    """A node's lock annotation from ``at`` on (``None``: no lock)."""

    at: datetime
    node: str
    value: str | None


@dataclass(frozen=True, slots=True)
class Timeline:
    """Node locks and pod states as they changed since ``since`` (UTC), in order; the state at
    ``since`` comes first. Recorded in-process as the API server committed the changes."""

    since: datetime
    locks: tuple[LockMoment, ...] = ()
    pods: tuple[PodMoment, ...] = ()

    def lock_at(self, node: str, when: datetime) -> str | None:
        """The node's lock annotation at ``when`` (``None`` before anything is known)."""
        value = None
        for moment in self.locks:
            if moment.at > when:
                break
            if moment.node == node:
                value = moment.value
        return value

    def pod_at(self, key: str, when: datetime) -> PodMoment | None:
        """The pod's last recorded state at ``when`` (``None``: never seen by then)."""
        found = None
        for moment in self.pods:
            if moment.at > when:
                break
            if moment.key == key:
                found = moment
        return found

    def changes(self, start: datetime, end: datetime) -> list[datetime]:
        """Every moment in ``[start, end]`` at which a lock or a pod changed."""
        times = [m.at for m in self.locks] + [m.at for m in self.pods]
        return sorted(t for t in times if start <= t <= end)


@dataclass(frozen=True, slots=True)
class CdiFile:
    """One CDI spec file a DRA driver wrote for a claim on a node."""

    node: str
    claim_uid: str
    name: str
    """The file's name (``k8s.gpu.hami.io-claim_<claim UID>.json``)."""


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Pods, nodes and events as the API server held them at ``taken_at`` (UTC)."""

    pods: tuple[Mapping[str, Any], ...]
    nodes: tuple[Mapping[str, Any], ...]
    events: tuple[Mapping[str, Any], ...]
    taken_at: datetime
    retrying: frozenset[str] = frozenset()
    """Pods (``namespace/name``) the scheduling loop will try again on its own: queued, backing
    off, being tried, or possibly woken by a cluster event it has not yet seen.  A pod here is in
    flight even while its ``PodScheduled`` condition still says ``Unschedulable``."""
    timeline: Timeline | None = None
    """How node locks and pods changed before the snapshot, when it was recorded (the fault
    scenarios record one); the node-lock invariant judges each refusal by it."""
    preemptions: tuple[PreemptionRecord, ...] = ()
    """The preemptions the scheduling loop carried out (the fault scenarios keep their own),
    oldest first; the preemption invariants judge each."""
    claims: tuple[Mapping[str, Any], ...] = ()
    """ResourceClaims (DRA), with their status."""
    slices: tuple[Mapping[str, Any], ...] = ()
    """ResourceSlices (DRA): the devices each node's driver publishes."""
    cdi_files: tuple[CdiFile, ...] = ()
    """The per-claim CDI spec files on the DRA nodes (read from their CDI dirs)."""
    unpreparing: frozenset[str] = frozenset()
    """UIDs of claims a kubelet still holds for no pod: NodeUnprepareResources is due or being
    retried, so their CDI spec files may still be there."""

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return next((p for p in self.pods if pod_key(p) == f"{namespace}/{name}"), None)

    def node(self, name: str) -> Mapping[str, Any] | None:
        return next((n for n in self.nodes if NodeView(n).name == name), None)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name``; a pod written without a namespace is created in ``default``."""
    view = PodView(pod)
    return key_for(view.namespace or "default", view.name)


def container_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Init containers first, then app containers: the order of HAMi's device lists."""
    return tuple(c.name for c in PodView(pod).all_containers())


def allocated_devices(
    pod: Mapping[str, Any], key: str = keys.NVIDIA_DEVICES_ALLOCATED
) -> PodSingleDevice | None:
    """The per-container device lists the scheduler allocated (None when absent/unreadable)."""
    value = PodView(pod).annotations.get(key)
    if value is None:
        return None
    try:
        return decode_pod_devices_canonical(value, key=key)
    except (ProtocolError, ValueError, RecursionError):
        return None


def node_devices(
    node: Mapping[str, Any], key: str = keys.NVIDIA_REGISTER
) -> tuple[DeviceInfo, ...] | None:
    """The devices a node's register annotation declares (None when absent/unreadable)."""
    value = NodeView(node).annotations.get(key)
    if value is None:
        return None
    try:
        return decode_node_devices(value, key=key)
    except (ProtocolError, ValueError, RecursionError):
        return None


def allocation_record(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The kubelet stand-in's record of what each container got (None when absent)."""
    value = PodView(pod).annotations.get(ALLOCATIONS_ANNOTATION)
    if value is None:
        return None
    try:
        decoded = json.loads(value)
    except ValueError:
        return None
    return decoded if isinstance(decoded, Mapping) else None


def _involves(event: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    involved = _mapping(event.get("involvedObject"))
    if involved.get("kind") not in (None, "Pod"):
        return False
    view = PodView(pod)
    uid = involved.get("uid")
    if uid and view.uid:
        return bool(uid == view.uid)
    return involved.get("name") == view.name and involved.get("namespace") == view.namespace


def failed_scheduling(state: ClusterState, pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Messages of the pod's FailedScheduling events, most recent last."""
    found = [e for e in state.events if e.get("reason") == "FailedScheduling" and _involves(e, pod)]
    found.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return tuple(str(e.get("message") or "") for e in found)


class Outcome(StrEnum):
    """Where a pod stands, for the report and for deciding that the cluster has settled."""

    RUNNING = "Running"
    FAILED = "Failed"
    SUCCEEDED = "Succeeded"
    UNSCHEDULABLE = "Unschedulable"
    """Pending, unassigned, no node fits (``PodScheduled=False``, reason ``Unschedulable``) and
    a FailedScheduling event says why, and the scheduling loop holds it parked until a cluster
    event (it is not in :attr:`ClusterState.retrying`). Pods that failed for another reason (an
    extender or binding error), and unschedulable pods woken by a node or pod change, are retried
    with backoff, so they are still in flight."""
    IN_FLIGHT = "InFlight"
    """Anything else: being admitted, scheduled, bound, allocated or deleted."""


def outcome(state: ClusterState, pod: Mapping[str, Any]) -> Outcome:
    view = PodView(pod)
    if view.deleting:
        return Outcome.IN_FLIGHT
    phase = view.phase
    if phase == "Running":
        return Outcome.RUNNING
    if phase == "Succeeded":
        return Outcome.SUCCEEDED
    if phase == "Failed":
        return Outcome.FAILED
    if (
        not view.node_name
        and _unschedulable(view)
        and pod_key(pod) not in state.retrying
        and failed_scheduling(state, pod)
    ):
        return Outcome.UNSCHEDULABLE
    return Outcome.IN_FLIGHT


def stage(state: ClusterState, pod: Mapping[str, Any]) -> str:
    """A word for where a pod is: its outcome, or the step it waits in while in flight."""
    result = outcome(state, pod)
    if result is not Outcome.IN_FLIGHT:
        return result.value
    view = PodView(pod)
    if view.deleting:
        return "deleting"
    if view.node_name:
        return "starting (Allocate)"
    if view.annotations.get(keys.VGPU_NODE):
        return "binding"
    return "retrying" if failed_scheduling(state, pod) else "scheduling"


def _unschedulable(pod: PodView) -> bool:
    for condition in pod.status.get("conditions") or ():
        c = _mapping(condition)
        if c.get("type") == "PodScheduled":
            return c.get("status") == "False" and c.get("reason") == "Unschedulable"
    return False


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    """One registered device and what the pods placed on it hold."""

    node: str
    device: DeviceInfo
    memory: int = 0
    cores: int = 0
    slots: int = 0
    holders: tuple[tuple[str, int, int], ...] = field(default=())
    """``(pod key, MiB, cores)`` per holding pod."""
    exclusive_holders: tuple[str, ...] = ()
    """Pods holding every core of the device (nobody else may share it)."""


def _sidecars(pod: PodView) -> frozenset[int]:
    return frozenset(i for i, c in enumerate(pod.init_containers) if c.restart_policy == "Always")


def _init_finished(pod: PodView) -> bool:
    count = len(pod.init_containers)
    statuses = pod.status.get("initContainerStatuses") or ()
    if count == 0 or len(statuses) < count:
        return False
    return all(
        _mapping(_mapping(_mapping(s).get("state")).get("terminated")).get("exitCode") == 0
        for s in statuses
    )


def holding_pods(state: ClusterState) -> dict[str, list[Mapping[str, Any]]]:
    """Per node, the pods that hold devices there: bound to it (``spec.nodeName``) and not
    ended.

    A pod that is not bound holds nothing on any device, whatever its annotations say: an
    extender only writes them at filter time, and a pod whose bind failed keeps them until its
    next filter overwrites them (the scheduler stops counting such an allocation at once). A
    bound pod's annotations are the ones its bind committed.
    """
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in state.pods:
        view = PodView(pod)
        if not view.node_name or view.terminal:
            continue
        by_node.setdefault(view.node_name, []).append(pod)
    return by_node


def device_loads(
    state: ClusterState,
    *,
    allocated_key: str = keys.NVIDIA_DEVICES_ALLOCATED,
    inventory: Callable[[Mapping[str, Any]], Iterable[DeviceInfo] | None] = node_devices,
) -> dict[str, dict[str, DeviceLoad]]:
    """Per node and device UUID, the registered device and the usage placed on it by the pods
    of :func:`holding_pods` (NVIDIA's by default; a vendor's with its ``allocated_key`` and its
    ``inventory`` of a node).

    A pod counts as the scheduler counts it: init containers by their peak against the sum of
    the app containers (only the app containers once every init container has finished).
    Devices a pod holds that the register does not list appear with an empty ``DeviceInfo``
    (``devmem`` 0), so the checker flags them.
    """
    loads: dict[str, dict[str, DeviceLoad]] = {}
    for node in state.nodes:
        name = NodeView(node).name
        loads[name] = {d.id: DeviceLoad(name, d) for d in inventory(node) or ()}
    for node_name, pods in holding_pods(state).items():
        per_device = loads.setdefault(node_name, {})
        for pod in pods:
            devices = allocated_devices(pod, allocated_key)
            if devices is None:
                continue
            view = PodView(pod)
            usage = collapse_device_usage(
                devices,
                init_count=len(view.init_containers),
                sidecars=_sidecars(view),
                init_finished=_init_finished(view),
            )
            for used in usage:
                load = per_device.get(used.uuid) or DeviceLoad(node_name, _unregistered(used))
                key = pod_key(pod)
                exclusive = load.exclusive_holders
                if load.device.devcore and used.usedcores >= load.device.devcore:
                    exclusive = (*exclusive, key)
                per_device[used.uuid] = DeviceLoad(
                    node_name,
                    load.device,
                    memory=load.memory + used.usedmem,
                    cores=load.cores + used.usedcores,
                    slots=load.slots + used.slots,
                    holders=(*load.holders, (key, used.usedmem, used.usedcores)),
                    exclusive_holders=exclusive,
                )
    return loads


def _unregistered(used: DeviceUsageSummary) -> DeviceInfo:
    return DeviceInfo(
        id=used.uuid, index=-1, count=0, devmem=0, devcore=0, type=used.type, numa=0, health=False
    )


def container_devices(pod: Mapping[str, Any]) -> list[tuple[str, tuple[ContainerDevice, ...]]]:
    """``(container name, devices)`` for each container, init containers first."""
    devices = allocated_devices(pod) or ()
    names = container_names(pod)
    return [
        (names[i] if i < len(names) else f"#{i}", tuple(devices[i]) if i < len(devices) else ())
        for i in range(max(len(names), len(devices)))
    ]


def record_containers(record: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """The allocation record's containers by name."""
    containers: Sequence[Any] = (record or {}).get("containers") or ()
    return {str(_mapping(c).get("name")): _mapping(c) for c in containers if isinstance(c, Mapping)}


def record_device_ids(container: Mapping[str, Any], resource: str) -> tuple[str, ...] | None:
    """The device IDs the kubelet gave one container of one resource (None: not given)."""
    for entry in container.get("resources") or ():
        if _mapping(entry).get("resource") == resource:
            ids = _mapping(entry).get("deviceIDs")
            return tuple(str(i) for i in ids) if isinstance(ids, list) else ()
    return None


def replica_gpu(replica: str, uuids: Iterable[str]) -> str | None:
    """The GPU a device-plugin replica ID (``<GPU UUID>-<n>``) belongs to, among ``uuids``."""
    owners = [u for u in uuids if replica == u or replica.startswith(u + "-")]
    return max(owners, key=len) if owners else None


def expected_env(devices: Sequence[ContainerDevice]) -> dict[str, str]:
    """The GPU env a container with ``devices`` (its allocated annotation entry) must get:
    ``NVIDIA_VISIBLE_DEVICES`` (its GPUs in order), ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` per device,
    ``CUDA_DEVICE_SM_LIMIT`` of the first. Empty for no devices."""
    if not devices:
        return {}
    uuids = list(dict.fromkeys(d.uuid for d in devices))
    expected = {envs.NVIDIA_VISIBLE_DEVICES: ",".join(uuids)}
    for index, device in enumerate(devices):
        expected[envs.cuda_device_memory_limit(index)] = f"{device.usedmem}m"
    expected[envs.CUDA_DEVICE_SM_LIMIT] = str(devices[0].usedcores)
    return expected


def record_envs(container: Mapping[str, Any], resource: str) -> Mapping[str, str] | None:
    """The env one resource gave one container in an allocation record (None: not given)."""
    for entry in container.get("resources") or ():
        if _mapping(entry).get("resource") == resource:
            envs = _mapping(_mapping(entry).get("envs"))
            return {str(k): str(v) for k, v in envs.items()}
    return None
