"""Invariants over a cluster snapshot: what must hold whatever faults happened on the way.

Each check is a pure function ``ClusterState -> list[Violation]``:

* ``devices``: no registered device is over-committed — memory, cores and task slots summed over
  the pods holding it (from their ``hami.io/vgpu-devices-allocated``) stay within what the node's
  ``hami.io/node-nvidia-register`` declares; a pod holding every core of a device holds it alone;
  no pod holds a device its node does not register; a bound pod sits on the node it was placed on.
* ``replicas``: no two containers hold the same kubelet device (replica) ID on a node, per the
  kubelet stand-in's allocation records of the node's active pods (a container may reuse the
  devices of an init container of its own pod that has finished, as the kubelet does).
* ``env``: every Running pod's containers got, per the kubelet stand-in's allocation record,
  exactly what its allocated annotation says (``NVIDIA_VISIBLE_DEVICES``,
  ``CUDA_DEVICE_MEMORY_LIMIT_<i>``, ``CUDA_DEVICE_SM_LIMIT``), and the GPUs the env names are
  exactly the GPUs of the replica IDs the kubelet allocated to that container; containers
  without devices got none, and a pod the scheduler did not place (no allocated annotation) got
  no GPU from the device plugin at all.
* ``locks``: a bind refused because of a node lock (``node <n> has been locked ...`` or
  ``node <n> is locked ...``) is legitimate only while the lock's owner still waits for its
  Allocate on that node (bound there, not terminal, ``bind-phase`` neither success nor failed),
  or has not been bound yet and the lock is within its timeout; a refusal by a lock whose owner
  had finished, was gone, terminal or bound elsewhere (or by an unreadable lock) is a violation.
  With a :class:`~hami_kubesim.stack.state.Timeline` each refusal is judged by the owner's state
  around the refusal (events are stamped to the second: any moment from 2 s before the stamped
  second to its end may be the one); without one, only a lock still held at the snapshot can be
  judged: a refusal after its expiry is a violation unless its owner still waits. Expired lock
  annotations may stay until the next bind on the node takes them over (:func:`stale_locks`).
* ``mig``: MIG reservations never share a slice of a GPU, name only GPUs registered in MIG
  mode, and no MIG instance is two containers' (:mod:`hami_kubesim.stack.checks.mig`); the
  ``env`` check holds a MIG container to the MIG UUIDs of its reservations and no HAMi-core
  limits.
* ``vendors``: the other vendors' devices are never over-committed and every Running
  container got exactly the devices its vendor's allocated list names
  (:mod:`hami_kubesim.stack.checks.vendors`).
* ``outcomes``: every pod is Running, Succeeded, Failed with a reason, or Pending unassigned with
  a FailedScheduling reason — none lost in between.

:data:`CHECKS` lists them by name; :func:`check_all` runs them all. New device kinds (RDMA NICs
and topology) add their own check function to :data:`CHECKS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from hami_kube.objects import NodeView, PodView
from hami_kube.timefmt import parse_time
from hami_kubesim.stack.checks.mig import (
    container_reservations_of,
    mig_env_problems,
    mig_problems,
)
from hami_kubesim.stack.checks.vendors import vendor_problems
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
    Timeline,
    allocated_devices,
    allocation_record,
    container_devices,
    device_loads,
    expected_env,
    node_devices,
    outcome,
    pod_key,
    record_containers,
    record_device_ids,
    record_envs,
    replica_gpu,
)
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.lock import NodeLock, OwnerState, decode_node_lock, owner_state
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
    "check_mig",
    "check_outcomes",
    "check_replicas",
    "check_vendors",
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


def _kubelet_gpus(
    container: Mapping[str, Any], resource: str, uuids: frozenset[str]
) -> list[str] | None:
    """The GPUs of the replica IDs the kubelet gave the container (None: it gave none)."""
    ids = record_device_ids(container, resource)
    if ids is None:
        return None
    return [replica_gpu(replica, uuids) or f"unknown replica {replica}" for replica in ids]


def _registered_uuids(state: ClusterState, node: str) -> frozenset[str]:
    found = state.node(node)
    return frozenset(d.id for d in (node_devices(found) or ())) if found else frozenset()


def _undecided_gpus(pod: Mapping[str, Any], resource: str) -> list[Violation]:
    """A Running pod with no allocated annotation: the plugin must have refused it."""
    given = [
        name
        for name, container in record_containers(allocation_record(pod)).items()
        if record_envs(container, resource) is not None
    ]
    if not given:
        return []
    return [
        Violation(
            "env",
            pod_key(pod),
            f"containers {given} got {resource} from the device plugin but the pod has no "
            "device decision (not placed by the scheduler)",
        )
    ]


def check_env(state: ClusterState, *, resource: str = GPU_RESOURCE) -> list[Violation]:
    found: list[Violation] = []
    for pod in state.pods:
        if PodView(pod).phase != "Running":
            continue
        if allocated_devices(pod) is None:
            found.extend(_undecided_gpus(pod, resource))
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
        uuids = _registered_uuids(state, node)
        instances = container_reservations_of(pod)
        for index, (name, devices) in enumerate(per_container):
            container = containers.get(name) or {}
            given = record_envs(container, resource)
            subject = f"{key}/{name}"
            if not devices:
                if given is not None:
                    found.append(Violation("env", subject, f"got {resource} without an allocation"))
                continue
            if given is None:
                found.append(Violation("env", subject, f"allocated but given no {resource}"))
                continue
            mig = instances.get(index)
            if mig:
                found.extend(Violation("env", subject, p) for p in mig_env_problems(mig, given))
            for variable, wanted in () if mig else expected_env(devices).items():
                if given.get(variable) != wanted:
                    found.append(
                        Violation(
                            "env",
                            subject,
                            f"{variable}={given.get(variable)!r}, allocation says {wanted!r}",
                        )
                    )
            kubelet = sorted(_kubelet_gpus(container, resource, uuids) or ())
            if kubelet != sorted(d.uuid for d in devices):
                named = given.get(envs.NVIDIA_VISIBLE_DEVICES)
                found.append(
                    Violation(
                        "env",
                        subject,
                        f"the kubelet allocated replicas of {kubelet} but the env names "
                        f"{named!r} (allocation: {[d.uuid for d in devices]})",
                    )
                )
    return found


def _holdings(state: ClusterState) -> Iterator[tuple[str, str, str, str, str, str]]:
    """``(node, resource, replica, pod key, container, kind)`` for every device ID the kubelet
    gave a container of an active pod."""
    for pod in state.pods:
        view = PodView(pod)
        record = allocation_record(pod)
        if not view.node_name or view.terminal or record is None:
            continue
        for name, container in record_containers(record).items():
            kind = str(container.get("kind") or "app")
            for entry in container.get("resources") or ():
                if not isinstance(entry, Mapping):
                    continue
                resource = str(entry.get("resource"))
                for replica in record_device_ids(container, resource) or ():
                    yield view.node_name, resource, replica, pod_key(pod), name, kind


def check_replicas(state: ClusterState) -> list[Violation]:
    found: list[Violation] = []
    holders: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for node, resource, replica, key, container, kind in _holdings(state):
        holders.setdefault((node, resource, replica), []).append((key, container, kind))
    for (node, resource, replica), held in sorted(holders.items()):
        apps = [(key, container) for key, container, kind in held if kind != "init"]
        pods = {key for key, _, _ in held}
        if len(pods) > 1 or len(apps) > 1:
            names = ", ".join(f"{key}/{container}" for key, container, _ in held)
            found.append(Violation("replicas", f"{node}/{replica}", f"{resource} held by {names}"))
    return found


def _locks(state: ClusterState) -> list[tuple[str, NodeLock | None, str]]:
    """``(node, lock or None when unreadable, raw value)`` for every node holding a lock."""
    found: list[tuple[str, NodeLock | None, str]] = []
    for node in state.nodes:
        view = NodeView(node)
        value = view.annotations.get(keys.NODE_LOCK)
        if value:
            found.append((view.name, _decode(value), value))
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


_REFUSAL: Final = re.compile(
    r"\bnode (?P<node>[^\s,;:\"']+) (?:has been locked|is locked)"
    r"(?: by (?P<owner>[^\s,;:\"']+/[^\s,;:\"']+))?"
)
_BEFORE: Final = timedelta(seconds=2)
"""How long before a refusal's stamped second the lock may have been judged (cache lag)."""


@dataclass(frozen=True, slots=True)
class _Refusal:
    node: str
    owner: str
    """``namespace/pod`` the message names (empty when it names none)."""
    when: datetime
    pod: str


def _refusals(state: ClusterState) -> Iterator[_Refusal]:
    """Every bind refused because of a node lock, once per time an event was stamped."""
    for event in state.events:
        match = _REFUSAL.search(str(event.get("message") or ""))
        if match is None:
            continue
        involved = event.get("involvedObject")
        who = involved if isinstance(involved, Mapping) else {}
        pod = f"{who.get('namespace', '')}/{who.get('name', '')}"
        stamps = {event.get("firstTimestamp"), event.get("lastTimestamp"), event.get("eventTime")}
        for stamp in stamps:
            when = _parse(stamp)
            if when is not None:
                yield _Refusal(match["node"], match["owner"] or "", when, pod)


def _parse(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _holds_legitimately(
    timeline: Timeline, refusal: _Refusal, at: datetime, timeout: timedelta
) -> bool:
    """Whether, at ``at``, the node's lock (or the owner the refusal names) could refuse."""
    value = timeline.lock_at(refusal.node, at)
    lock = None if value is None else _decode(value)
    owner = refusal.owner or (f"{lock.namespace}/{lock.pod}" if lock and not lock.legacy else "")
    within = lock is not None and at - lock.acquired <= timeout + _SLACK
    if not owner:
        return lock is not None and lock.legacy and within
    moment = timeline.pod_at(owner, at)
    state = owner_state(
        exists=moment is not None and moment.exists,
        node=refusal.node,
        bound_to=moment.node if moment else "",
        phase=moment.phase if moment else "",
        bind_phase=moment.bind_phase if moment else "",
        deleting=moment.deleting if moment else False,
    )
    if state is OwnerState.WAITING:
        return True
    named = lock is not None and not lock.legacy and f"{lock.namespace}/{lock.pod}" == owner
    return state is OwnerState.BINDING and named and within


def _decode(value: str) -> NodeLock | None:
    try:
        return decode_node_lock(value)
    except ProtocolError:
        return None


def _judge_by_timeline(
    state: ClusterState, timeline: Timeline, timeout: timedelta
) -> list[Violation]:
    found: list[Violation] = []
    for refusal in _refusals(state):
        if refusal.when < timeline.since:
            continue  # before the recording: nothing to judge it by
        start, end = refusal.when - _BEFORE, refusal.when + _SLACK
        moments = [start, *timeline.changes(start, end)]
        if any(_holds_legitimately(timeline, refusal, at, timeout) for at in moments):
            continue
        value = timeline.lock_at(refusal.node, refusal.when)
        found.append(
            Violation(
                "locks",
                refusal.node,
                f"refused the bind of {refusal.pod} at {refusal.when:%H:%M:%S} although the lock "
                f"({value or 'none'}) had no owner waiting for its Allocate on the node",
            )
        )
    return found


def _judge_by_snapshot(state: ClusterState, timeout: timedelta) -> list[Violation]:
    found: list[Violation] = []
    for name, lock, _ in _locks(state):
        if lock is None:
            continue
        expiry = lock.acquired + timeout
        owner = f"{lock.namespace}/{lock.pod}" if lock.pod else ""
        if owner and _owner_waits_now(state, owner, name):
            continue
        for refusal in _refusals(state):
            if refusal.node != name or (refusal.owner and refusal.owner != owner):
                continue
            if refusal.when > expiry + _SLACK:
                shown = owner or "an unnamed owner"
                found.append(
                    Violation(
                        "locks",
                        name,
                        f"lock of {shown} expired at {expiry:%H:%M:%S} and its owner does not "
                        f"wait for an Allocate here, but it refused a bind at "
                        f"{refusal.when:%H:%M:%S}",
                    )
                )
                break
    return found


def _owner_waits_now(state: ClusterState, owner: str, node: str) -> bool:
    namespace, _, name = owner.partition("/")
    pod = state.pod(namespace, name)
    if pod is None:
        return False
    view = PodView(pod)
    return (
        owner_state(
            exists=True,
            node=node,
            bound_to=view.node_name,
            phase=view.phase,
            bind_phase=view.annotations.get(keys.BIND_PHASE, ""),
            deleting=view.deleting,
        )
        is OwnerState.WAITING
    )


def check_locks(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> list[Violation]:
    """A lock refuses a bind only while its owner may still need it (see the module doc)."""
    found = [
        Violation("locks", name, f"unreadable node lock {value!r}")
        for name, lock, value in _locks(state)
        if lock is None
    ]
    if state.timeline is not None:
        return found + _judge_by_timeline(state, state.timeline, lock_timeout)
    return found + _judge_by_snapshot(state, lock_timeout)


def check_mig(state: ClusterState) -> list[Violation]:
    return [Violation("mig", subject, message) for subject, message in mig_problems(state)]


def check_vendors(state: ClusterState) -> list[Violation]:
    return [Violation("vendors", subject, message) for subject, message in vendor_problems(state)]


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
    ("replicas", lambda state, _: check_replicas(state)),
    ("env", lambda state, _: check_env(state)),
    ("locks", lambda state, timeout: check_locks(state, lock_timeout=timeout)),
    ("outcomes", lambda state, _: check_outcomes(state)),
    ("mig", lambda state, _: check_mig(state)),
    ("vendors", lambda state, _: check_vendors(state)),
)
"""Every invariant by name; each takes the snapshot and the node-lock timeout."""


def check_all(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> tuple[Violation, ...]:
    """Every violation of every invariant in :data:`CHECKS`."""
    return tuple(v for _, check in CHECKS for v in check(state, lock_timeout))
