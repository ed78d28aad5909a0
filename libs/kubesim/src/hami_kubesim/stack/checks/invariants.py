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
* ``locks``: a bind refused because of a node lock is legitimate only while the lock's owner may
  still need it (:mod:`hami_kubesim.stack.checks.locks`, which also finds the expired lock
  annotations a snapshot may still carry).
* ``mig``: MIG reservations never share a slice of a GPU, name only GPUs registered in MIG
  mode, and no MIG instance is two containers' (:mod:`hami_kubesim.stack.checks.mig`); the
  ``env`` check holds a MIG container to the MIG UUIDs of its reservations and no HAMi-core
  limits.
* ``vendors``: the other vendors' devices are never over-committed and every Running
  container got exactly the devices its vendor's allocated list names
  (:mod:`hami_kubesim.stack.checks.vendors`).
* ``preemption-priority``, ``preemption-needed``, ``preemption-hold``: every victim of a
  preemption the scheduling loop carried out had a lower priority than its preemptor and was
  needed, and no lower-priority pod took what a nominated preemptor waited for
  (:mod:`hami_kubesim.stack.checks.preemption`, which says what each judges and skips).
* ``dra-capacity``, ``dra-env``, ``dra-cdi``: DRA claims never consume more of a device than
  its ResourceSlice publishes, every Running container using a claim got that claim's devices
  and HAMi-core limits, and no CDI spec file outlives its claim
  (:mod:`hami_kubesim.stack.checks.dra`); trivially true without DRA objects.
* ``outcomes``: every pod is Running, Succeeded, Failed with a reason, or Pending unassigned with
  a FailedScheduling reason — none lost in between.

:data:`CHECKS` lists them by name; :func:`check_all` runs them all. New device kinds (RDMA NICs
and topology) add their own check function to :data:`CHECKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kubesim.stack.checks.dra import (
    CLAIM_RESOURCE_PREFIX,
    capacity_problems,
    cdi_problems,
    env_problems,
)
from hami_kubesim.stack.checks.locks import DEFAULT_LOCK_TIMEOUT, lock_problems
from hami_kubesim.stack.checks.mig import (
    container_reservations_of,
    mig_env_problems,
    mig_problems,
)
from hami_kubesim.stack.checks.preemption import (
    hold_problems,
    needless_victims,
    priority_problems,
)
from hami_kubesim.stack.checks.vendors import vendor_problems
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
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
from hami_protocol.pod import envs

__all__ = [
    "CHECKS",
    "GPU_RESOURCE",
    "Violation",
    "check_all",
    "check_devices",
    "check_dra",
    "check_env",
    "check_locks",
    "check_mig",
    "check_outcomes",
    "check_preemption_hold",
    "check_preemption_needed",
    "check_preemption_priority",
    "check_replicas",
    "check_vendors",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"


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
                if resource.startswith(CLAIM_RESOURCE_PREFIX):
                    continue  # a claim's devices are shared by design: dra-capacity judges them
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


def check_locks(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> list[Violation]:
    """A lock refuses a bind only while its owner may still need it (see :mod:`.locks`)."""
    return [
        Violation("locks", subject, message)
        for subject, message in lock_problems(state, lock_timeout=lock_timeout)
    ]


def check_mig(state: ClusterState) -> list[Violation]:
    return [Violation("mig", subject, message) for subject, message in mig_problems(state)]


def check_vendors(state: ClusterState) -> list[Violation]:
    return [Violation("vendors", subject, message) for subject, message in vendor_problems(state)]


def check_preemption_priority(state: ClusterState) -> list[Violation]:
    return [Violation("preemption-priority", s, m) for s, m in priority_problems(state)]


def check_preemption_needed(state: ClusterState) -> list[Violation]:
    return [Violation("preemption-needed", s, m) for s, m in needless_victims(state)]


def check_preemption_hold(state: ClusterState) -> list[Violation]:
    return [Violation("preemption-hold", s, m) for s, m in hold_problems(state)]


def check_dra(state: ClusterState) -> list[Violation]:
    """The three DRA invariants (see :mod:`hami_kubesim.stack.checks.dra`)."""
    return [
        Violation(name, subject, message)
        for name, problems in (
            ("dra-capacity", capacity_problems),
            ("dra-env", env_problems),
            ("dra-cdi", cdi_problems),
        )
        for subject, message in problems(state)
    ]


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
    ("preemption-priority", lambda state, _: check_preemption_priority(state)),
    ("preemption-needed", lambda state, _: check_preemption_needed(state)),
    ("preemption-hold", lambda state, _: check_preemption_hold(state)),
    ("dra", lambda state, _: check_dra(state)),
)
"""Every invariant by name; each takes the snapshot and the node-lock timeout."""


def check_all(
    state: ClusterState, *, lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
) -> tuple[Violation, ...]:
    """Every violation of every invariant in :data:`CHECKS`."""
    return tuple(v for _, check in CHECKS for v in check(state, lock_timeout))
