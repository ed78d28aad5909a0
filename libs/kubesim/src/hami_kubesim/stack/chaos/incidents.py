"""Incidents of the bind path (issue 14) that fault scenarios add, each on one node.

Pure: each :class:`~.scenarios.Incident` turns ``(rng, seed, start, node, config)`` into steps.
Pods of an incident are named ``s<seed>-<incident>-<role>`` and target the node with a
``kubernetes.io/hostname`` node selector (or ``nodeName``, for a pod no scheduler places).

* ``lock-expiry`` — HAMi #3096: the node's kubelet is paused; pod A (1 GPU, 1000 MiB) is bound
  there; once the node lock is past its timeout pod B (1 GPU, 3000 MiB) asks for the same node;
  then the kubelet resumes and admits A first. A must get A's GPU and limits, B B's (or a clear
  refusal).
* ``admission-order`` — pod B is created first but held by a scheduling gate; A is created
  after it and bound; past the lock timeout B's gate is removed; when the kubelet resumes it
  admits the pods it has by creation time, so B (bound second) may be admitted first.
* ``slow-binding`` — the Binding of pod A (created first) takes longer than the lock timeout
  (API latency); meanwhile pod B asks for the node, takes over A's lock (its owner not bound
  yet, past the timeout) and is bound first; A's Binding lands after. With the kubelet paused
  both wait for their Allocate on the node at once, and the kubelet admits A (created first)
  while the lock names B: only the kubelet's own evidence (pod-resources, the device IDs it
  chose) tells the device plugin which pod an Allocate is for.
* ``plugin-restart`` — a pod is bound while the kubelet is paused; the node's device plugin
  is killed or stopped and started again before the kubelet resumes and asks it to Allocate.
* ``default-scheduler`` — a pod the webhook skips (``hami.io/webhook: ignore``) with
  ``schedulerName: default-scheduler`` and ``nodeName`` set by hand asks for ``nvidia.com/gpu``
  on the node, created just before a pod our scheduler places there; the paused kubelet then
  admits the stray pod first. It must be refused (HAMi's ``no binding pod found``), and must
  never take the placed pod's allocation.
* ``preexisting`` / ``preexisting-before-start`` — pods placed by an HAMi release older than
  2.5 (allocation annotations, ``bind-phase: success``, no ``hami.io/vgpu-node`` label) run on
  the node, restored straight into the store at the scenario's start (the second stops the
  extender first and starts it again after); then pods asking for 60 % of a GPU's memory
  target the node. Ignoring the old pods would over-commit their GPUs.
  :func:`preexisting_pod` writes such a pod once the player has chosen a free GPU.
* ``copied-manifest`` — a pod is placed on the node; then a pod created from a running pod's
  manifest asks for the node, carrying that pod's decision (:func:`copied_annotations`: device
  lists, a MIG reservation, an RDMA list, another vendor's list). It must run on its own
  allocation, and nothing of the copied one may stay on it (its Binding blanks every list its
  decision does not write; the ``mig`` invariant sees a reservation left on a non-MIG GPU).

The preemption incidents (``preempt-grace``, ``preempt-deleted``, ``preempt-race``,
``preempt-extender-restart``) are :mod:`.preemption`'s, the DRA incidents (``dra-plugin-restart``,
``dra-device-vanished``, ``dra-claim-deleted``) :mod:`.dra`'s; :data:`INCIDENTS` lists them too.

Kubelet creation times are stamped to the second, so pods whose creation order matters are
created :data:`CREATION_GAP` seconds apart.
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from hami_kubesim.stack.chaos.dra import DRA_INCIDENTS
from hami_kubesim.stack.chaos.preemption import PREEMPTION_INCIDENTS
from hami_kubesim.stack.chaos.scenarios import (
    HAMI_SCHEDULER,
    AwaitBound,
    ClearLatency,
    CreatePod,
    Incident,
    InjectLatency,
    PauseKubelet,
    RestoreRunningPods,
    ResumeKubelet,
    ScenarioConfig,
    StartService,
    Step,
    StopService,
    Ungate,
    pod_manifest,
    targeted_pod,
)
from hami_kubesim.stack.state import ALLOCATIONS_ANNOTATION, expected_env
from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo, MigPlacement
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices
from hami_protocol.pod.mig import MigReservation, encode_mig_reservations

__all__ = [
    "CREATION_GAP",
    "GATE",
    "INCIDENTS",
    "copied_annotations",
    "incident_named",
    "preexisting_pod",
]

CREATION_GAP: Final = 1.2
GATE: Final = "kubesim.hami.io/hold"
"""The scheduling gate that holds a pod until an :class:`~.scenarios.Ungate` step."""
_GPU: Final = "nvidia.com/gpu"
_WEBHOOK_IGNORE: Final = {"hami.io/webhook": "ignore"}


def _slice(memory_mib: int, cores: int = 10) -> dict[str, str]:
    return {_GPU: "1", "nvidia.com/gpumem": str(memory_mib), "nvidia.com/gpucores": str(cores)}


def _past_timeout(rng: random.Random, config: ScenarioConfig) -> float:
    return config.lock_timeout + rng.uniform(0.5, 1.5)


def _lock_expiry(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    first, second = f"s{seed}-lock-a", f"s{seed}-lock-b"
    later = start + max(CREATION_GAP, _past_timeout(rng, config))
    return [
        PauseKubelet(start, node),
        CreatePod(start, targeted_pod(first, config, node, _slice(1000))),
        AwaitBound(start, first),
        CreatePod(later, targeted_pod(second, config, node, _slice(3000))),
        ResumeKubelet(later + rng.uniform(0.5, 2.0), node),
    ]


def _admission_order(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    held, bound = f"s{seed}-order-b", f"s{seed}-order-a"
    gates = [{"name": GATE}]
    created = start + CREATION_GAP
    ungated = created + _past_timeout(rng, config)
    return [
        PauseKubelet(start, node),
        CreatePod(start, targeted_pod(held, config, node, _slice(2000), schedulingGates=gates)),
        CreatePod(created, targeted_pod(bound, config, node, _slice(1000))),
        AwaitBound(created, bound),
        Ungate(ungated, held),
        ResumeKubelet(ungated + rng.uniform(0.5, 2.0), node),
    ]


def _slow_binding(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    first, second = f"s{seed}-slow-a", f"s{seed}-slow-b"
    delay = config.lock_timeout + 2.0
    later = start + max(CREATION_GAP, config.lock_timeout + 0.6)
    return [
        PauseKubelet(start, node),
        InjectLatency(start, delay, "create", "pods/binding"),
        CreatePod(start, targeted_pod(first, config, node, _slice(1000))),
        ClearLatency(start + 1.0),
        CreatePod(later, targeted_pod(second, config, node, _slice(3000))),
        AwaitBound(later, second),
        AwaitBound(later, first),
        ResumeKubelet(start + delay + rng.uniform(1.5, 2.5), node),
    ]


def _plugin_restart(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    pod = f"s{seed}-restart-a"
    service = f"deviceplugin-{node}"
    steps: list[Step] = [
        PauseKubelet(start, node),
        CreatePod(start, targeted_pod(pod, config, node, _slice(2000, cores=20))),
        AwaitBound(start, pod),
    ]
    if service in config.services:
        restart = start + 0.1
        steps += [
            StopService(restart, service, crash=rng.random() < 0.5),
            StartService(restart, service),
        ]
    steps.append(ResumeKubelet(start + rng.uniform(0.3, 3.0), node))
    return steps


def _default_scheduler(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    stray, placed = f"s{seed}-default-d", f"s{seed}-default-a"
    stray_pod = pod_manifest(
        stray,
        config.namespace,
        {_GPU: "1"},
        scheduler_name="default-scheduler",
        labels=_WEBHOOK_IGNORE,
        nodeName=node,
    )
    created = start + CREATION_GAP
    return [
        PauseKubelet(start, node),
        CreatePod(start, stray_pod),
        CreatePod(created, targeted_pod(placed, config, node, _slice(1500))),
        AwaitBound(created, placed),
        ResumeKubelet(created + rng.uniform(0.3, 1.5), node),
    ]


def _preexisting(
    rng: random.Random,
    seed: int,
    start: float,
    node: str,
    config: ScenarioConfig,
    *,
    while_stopped: str = "",
) -> list[Step]:
    # At the scenario's start, whatever ``start`` says: the previous scenario has settled and
    # been cleared, so no bind is in flight that could have chosen the GPUs taken here.
    start = 0.0
    old = tuple(f"s{seed}-old-{index}" for index in range(rng.randint(1, 2)))
    newcomers = [f"s{seed}-new-{index}" for index in range(rng.randint(2, 4))]
    share = {_GPU: "1", "nvidia.com/gpumem-percentage": "60"}
    steps: list[Step] = [
        RestoreRunningPods(start, node, old, whole=rng.random() < 0.6, while_stopped=while_stopped)
    ]
    steps += [
        CreatePod(start + 0.1 * (index + 1), targeted_pod(name, config, node, share))
        for index, name in enumerate(newcomers)
    ]
    return steps


def copied_annotations(node: str) -> dict[str, str]:
    """What a pod created from a running pod's manifest carries (``kubectl get -o yaml``,
    renamed, applied): that pod's decision — NVIDIA lists, a MIG reservation, an RDMA list and
    another vendor's list, on ``node`` — none of it this pod's."""
    gpu = f"GPU-{node}-copied"
    devices = encode_pod_devices(((ContainerDevice(gpu, "NVIDIA", 30000, 50),),))
    reservation = MigReservation(0, 0, gpu, "1g.5gb", MigPlacement(6, 1))
    return {
        keys.VGPU_NODE: node,
        keys.BIND_PHASE: "success",
        keys.NVIDIA_DEVICES_TO_ALLOCATE: devices,
        keys.NVIDIA_DEVICES_ALLOCATED: devices,
        keys.NVIDIA_MIG_ALLOCATIONS: encode_mig_reservations([reservation]),
        keys.RDMA_DEVICES_ALLOCATED: "0000_1a_00.1,RDMA,1,0:;",
        "hami.io/dcu-devices-allocated": "DCU-copied,DCU,1024,10:;",
    }


def _copied_manifest(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    placed, copy = f"s{seed}-copy-a", f"s{seed}-copy-b"
    later = start + rng.uniform(0.2, 1.0)
    copied = targeted_pod(copy, config, node, _slice(1000))
    copied["metadata"]["annotations"] = copied_annotations(node)
    return [
        CreatePod(start, targeted_pod(placed, config, node, _slice(1000))),
        AwaitBound(start, placed),
        CreatePod(later, copied),
    ]


def _preexisting_before_start(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    service = config.scheduler_service if config.scheduler_service in config.services else ""
    return _preexisting(rng, seed, start, node, config, while_stopped=service)


INCIDENTS: Final = (
    Incident("lock-expiry", _lock_expiry),
    Incident("admission-order", _admission_order),
    Incident("slow-binding", _slow_binding),
    Incident("plugin-restart", _plugin_restart),
    Incident("default-scheduler", _default_scheduler),
    Incident("preexisting", _preexisting),
    Incident("preexisting-before-start", _preexisting_before_start),
    Incident("copied-manifest", _copied_manifest),
    *PREEMPTION_INCIDENTS,
    *DRA_INCIDENTS,
)
"""Every incident, by name (see the module docstring; the preemption incidents are
:mod:`.preemption`'s, the DRA ones :mod:`.dra`'s)."""


def incident_named(name: str) -> Incident:
    """The incident called ``name``; ``ValueError`` naming the known ones otherwise."""
    for incident in INCIDENTS:
        if incident.name == name:
            return incident
    raise ValueError(f"no incident {name!r}; known: {', '.join(i.name for i in INCIDENTS)}")


def preexisting_pod(
    name: str,
    namespace: str,
    *,
    node: str,
    device: DeviceInfo,
    replica: str,
    whole: bool,
    started: str,
) -> dict[str, Any]:
    """A pod an HAMi release older than 2.5 placed on ``device`` of ``node`` and that has run
    since ``started`` (RFC 3339): HAMi's annotations of a finished bind, no
    ``hami.io/vgpu-node`` label, and the kubelet's record (``replica`` and the env the device
    plugin gave), as :meth:`~hami_kubesim.apiserver.server.ApiServer.restore` takes it."""
    memory = device.devmem if whole else device.devmem * 60 // 100
    cores = device.devcore if whole else 30
    devices = (ContainerDevice(device.id, device.type, memory, cores),)
    record = {
        "node": node,
        "containers": [
            {
                "name": "c0",
                "kind": "app",
                "resources": [
                    {"resource": _GPU, "deviceIDs": [replica], "envs": expected_env(devices)}
                ],
            }
        ],
    }
    pod = pod_manifest(
        name,
        namespace,
        {_GPU: "1", "nvidia.com/gpumem": str(memory), "nvidia.com/gpucores": str(cores)},
        scheduler_name=HAMI_SCHEDULER,
        annotations={
            keys.VGPU_NODE: node,
            keys.VGPU_TIME: started,
            keys.NVIDIA_DEVICES_ALLOCATED: encode_pod_devices((devices,)),
            keys.NVIDIA_DEVICES_TO_ALLOCATE: ";",
            keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS,
            keys.BIND_TIME: started,
            ALLOCATIONS_ANNOTATION: json.dumps(record, separators=(",", ":")),
        },
        nodeName=node,
    )
    pod["metadata"]["creationTimestamp"] = started
    pod["status"] = {"phase": "Running", "startTime": started, "hostIP": "", "podIP": ""}
    return pod
