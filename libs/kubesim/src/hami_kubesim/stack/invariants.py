"""Invariants over a cluster snapshot: what must hold whatever faults happened on the way.

Each check is a pure function ``ClusterState -> list[Violation]``:

* ``devices``: no registered device is over-committed — memory, cores and task slots summed over
  the pods holding it (from their ``hami.io/vgpu-devices-allocated``) stay within what the node's
  ``hami.io/node-nvidia-register`` declares; a pod holding every core of a device holds it alone;
  no pod holds a device its node does not register; a bound pod sits on the node it was placed on.
* ``env``: every Running pod's containers got, per the kubelet stand-in's allocation record,
  exactly what its allocated annotation says (``NVIDIA_VISIBLE_DEVICES``,
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>``, ``CUDA_DEVICE_SM_LIMIT``), and containers without devices
  got none.
* ``locks``: no node lock (``hami.io/mutex.lock``) outlives its expiry: no bind is refused
  because of a lock that had expired by then. (Expired lock annotations may stay until the next
  bind on the node takes them over; :func:`stale_locks` lists them.)
* ``outcomes``: every pod is Running, Succeeded, Failed with a reason, or Pending unassigned with
  a FailedScheduling reason — none lost in between.

:data:`CHECKS` lists them by name; :func:`check_all` runs them all. New device kinds (RDMA NICs
and topology) add their own check function to :data:`CHECKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from hami_kube.objects import NodeView, PodView
from hami_kube.timefmt import parse_time
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
    allocated_devices,
    allocation_record,
    container_devices,
    device_loads,
    outcome,
    pod_key,
    record_containers,
    record_envs,
)
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.lock import NodeLock, decode_node_lock
from hami_protocol.pod import envs

__all__ = [
    "CHECKS",
    "DEFAULT_LOCK_TIMEOUT",
    "GPU_RESOURCE",
    "Violation",
    "check_all",
    "check_devices",
    "check_env",
    "check_locks",
    "check_outcomes",
    "stale_locks",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"
DEFAULT_LOCK_TIMEOUT: Final = timedelta(minutes=5)
_SLACK: Final = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Violation:
    check: str
    subject: str
    """The node, device or pod concerned."""
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.subject}: {self.message}"


def check_devices(state: ClusterState) -> list[Violation]:
    found: list[Violation] = []
    for node, loads in device_loads(state).items():
        for uuid, load in loads.items():
            subject = f"{node}/{uuid}"
            device = load.device
            holders = ", ".join(key for key, _, _ in load.holders)
            if not load.holders:
                continue
            if device.count == 0 and device.devmem == 0:
                found.append(Violation("devices", subject, f"held by {holders} but not registered"))
                continue
            for what, used, limit in (
                ("memory (MiB)", load.memory, device.devmem),
                ("cores (%)", load.cores, device.devcore),
                ("task slots", load.slots, device.count),
            ):
                if used > limit:
                    found.append(
                        Violation(
                            "devices",
                            subject,
                            f"{what} over-committed: {used} > {limit} (held by {holders})",
                        )
                    )
            if load.exclusive_holders and len(load.holders) > 1:
                found.append(
                    Violation(
                        "devices",
                        subject,
                        f"{load.exclusive_holders[0]} holds every core but shares with {holders}",
                    )
                )
    for pod in state.pods:
        view = PodView(pod)
        placed = view.annotations.get(keys.VGPU_NODE)
        bound = view.node_name
        if placed and bound and placed != bound:
            found.append(
                Violation("devices", pod_key(pod), f"placed on {placed} but bound to {bound}")
            )
    return found


def _expected_env(devices: tuple[Any, ...]) -> dict[str, str]:
    uuids = list(dict.fromkeys(d.uuid for d in devices))
    expected = {envs.NVIDIA_VISIBLE_DEVICES: ",".join(uuids)}
    for index, device in enumerate(devices):
        expected[envs.cuda_device_memory_limit(index)] = f"{device.usedmem}m"
    expected[envs.CUDA_DEVICE_SM_LIMIT] = str(devices[0].usedcores)
    return expected


def check_env(state: ClusterState, *, resource: str = GPU_RESOURCE) -> list[Violation]:
    found: list[Violation] = []
    for pod in state.pods:
        if PodView(pod).phase != "Running" or allocated_devices(pod) is None:
            continue
        key = pod_key(pod)
        record = allocation_record(pod)
        per_container = container_devices(pod)
        if record is None:
            if any(devices for _, devices in per_container):
                found.append(Violation("env", key, "Running with devices but no allocation record"))
            continue
        node = PodView(pod).node_name
        if record.get("node") != node:
            found.append(
                Violation("env", key, f"allocated on {record.get('node')}, runs on {node}")
            )
        containers = record_containers(record)
        for name, devices in per_container:
            given = record_envs(containers.get(name) or {}, resource)
            if not devices:
                if given is not None:
                    found.append(
                        Violation("env", f"{key}/{name}", f"got {resource} without an allocation")
                    )
                continue
            if given is None:
                found.append(
                    Violation("env", f"{key}/{name}", f"allocated but given no {resource}")
                )
                continue
            for variable, wanted in _expected_env(devices).items():
                if given.get(variable) != wanted:
                    found.append(
                        Violation(
                            "env",
                            f"{key}/{name}",
                            f"{variable}={given.get(variable)!r}, allocation says {wanted!r}",
                        )
                    )
    return found


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    text = event.get("lastTimestamp") or event.get("eventTime")
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _locks(state: ClusterState) -> list[tuple[str, NodeLock | None, str]]:
    """``(node, lock or None when unreadable, raw value)`` for every node holding a lock."""
    found: list[tuple[str, NodeLock | None, str]] = []
    for node in state.nodes:
        view = NodeView(node)
        value = view.annotations.get(keys.NODE_LOCK)
        if not value:
            continue
        try:
            lock: NodeLock | None = decode_node_lock(value)
        except ProtocolError:
            lock = None
        found.append((view.name, lock, value))
    return found


def stale_locks(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> list[str]:
    """Nodes whose lock annotation is past its expiry (left until the next bind takes it
    over)."""
    return [
        name
        for name, lock, _ in _locks(state)
        if lock is not None and state.taken_at - lock.acquired > lock_timeout
    ]


def check_locks(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> list[Violation]:
    """A lock must stop counting at its expiry: no bind may be refused because of a lock that
    had expired by then (events are stamped to the second, hence the second of slack). A lock
    annotation may stay past its expiry — the next bind on the node takes it over — see
    :func:`stale_locks`."""
    found: list[Violation] = []
    for name, lock, value in _locks(state):
        if lock is None:
            found.append(Violation("locks", name, f"unreadable node lock {value!r}"))
            continue
        expiry = lock.acquired + lock_timeout
        if state.taken_at <= expiry:
            continue
        refused = f"node {name} has been locked within"
        for event in state.events:
            when = _event_time(event)
            if refused in str(event.get("message") or "") and when and when > expiry + _SLACK:
                owner = f"{lock.namespace}/{lock.pod}" if lock.pod else "an unnamed owner"
                found.append(
                    Violation(
                        "locks",
                        name,
                        f"lock of {owner} expired at {expiry:%H:%M:%S} but refused a bind at "
                        f"{when:%H:%M:%S}",
                    )
                )
                break
    return found


def check_outcomes(state: ClusterState) -> list[Violation]:
    found: list[Violation] = []
    for pod in state.pods:
        result = outcome(state, pod)
        if result is Outcome.IN_FLIGHT:
            view = PodView(pod)
            where = f"bound to {view.node_name}" if view.node_name else "unassigned"
            found.append(
                Violation(
                    "outcomes",
                    pod_key(pod),
                    f"lost: {view.phase or 'Pending'}, {where}, no FailedScheduling reason",
                )
            )
        elif result is Outcome.FAILED:
            status = PodView(pod).status
            if not (status.get("reason") or status.get("message")):
                found.append(Violation("outcomes", pod_key(pod), "Failed without a reason"))
    return found


Check = Callable[[ClusterState, timedelta], list[Violation]]

CHECKS: Final[tuple[tuple[str, Check], ...]] = (
    ("devices", lambda state, _: check_devices(state)),
    ("env", lambda state, _: check_env(state)),
    ("locks", lambda state, timeout: check_locks(state, lock_timeout=timeout)),
    ("outcomes", lambda state, _: check_outcomes(state)),
)
"""Every invariant by name; each takes the snapshot and the node-lock timeout."""


def check_all(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> tuple[Violation, ...]:
    """Every violation of every invariant in :data:`CHECKS`."""
    return tuple(v for _, check in CHECKS for v in check(state, lock_timeout))
