"""Seeded random fault scenarios: a timeline of pod churn, API faults and service crashes.

Pure: :func:`generate_scenario` turns a seed into a :class:`Scenario`, a list of timed steps
(seconds from the scenario's start). The same seed always gives the same timeline; what the
system does with it still depends on timing, which is the point of running many.

Steps:

* :class:`CreatePod` / :class:`DeletePod` — the stream: shared slices, whole cards, several
  containers, type selectors, node/GPU policies, now and then a pod no node can fit;
* :class:`InjectErrors` — answer a share of matching API requests with 500/503/429 (409 only
  for creates and updates, the writes a real API server can refuse with a conflict);
* :class:`InjectLatency` — delay matching API requests (:class:`ClearLatency` ends that);
* :class:`DropWatches` — end open watches cleanly, with an ERROR 410, or by cutting them;
* :class:`Compact` — drop the watch history (watchers resuming from an old resourceVersion get
  410 Expired and must relist), then end the open watches so they do;
* :class:`StopService` / :class:`StartService` — SIGKILL or SIGTERM a service and start it again
  later in the stream;
* now and then (``ScenarioConfig.incident_share``) one *incident* of the bind path on one node
  (:mod:`.incidents` holds them), built from :class:`PauseKubelet` / :class:`ResumeKubelet`
  (hold that node's kubelet admission), :class:`AwaitBound` (wait until a pod is bound),
  :class:`Ungate` (remove a pod's scheduling gates), :class:`RestoreRunningPods` (pods that
  were placed and started long ago, put straight into the store), and for the preemption
  incidents :class:`CreatePriorityClass` and :class:`AwaitNominated` (wait until a preemptor
  is nominated), for the DRA incidents (:mod:`.dra`) :class:`CreateObject` /
  :class:`DeleteObject` (claims and claim templates), :class:`AwaitRunning` and
  :class:`SetGpusHealthy` (a node's GPUs vanish from its device backend, or come back).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "HOSTNAME_LABEL",
    "AwaitBound",
    "AwaitNominated",
    "AwaitRunning",
    "ClearLatency",
    "Compact",
    "CreateObject",
    "CreatePod",
    "CreatePriorityClass",
    "DeleteObject",
    "DeletePod",
    "DropWatches",
    "Incident",
    "InjectErrors",
    "InjectLatency",
    "PauseKubelet",
    "RestoreRunningPods",
    "ResumeKubelet",
    "Scenario",
    "ScenarioConfig",
    "SetGpusHealthy",
    "StartService",
    "Step",
    "StopService",
    "Ungate",
    "describe",
    "generate_scenario",
    "incident_scenario",
    "pod_manifest",
    "targeted_pod",
]


@dataclass(frozen=True, slots=True)
class CreatePod:
    at: float
    pod: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DeletePod:
    at: float
    name: str


@dataclass(frozen=True, slots=True)
class InjectErrors:
    at: float
    verb: str
    resource: str
    code: int
    rate: float
    times: int


@dataclass(frozen=True, slots=True)
class InjectLatency:
    at: float
    seconds: float
    verb: str
    resource: str


@dataclass(frozen=True, slots=True)
class DropWatches:
    at: float
    resource: str | None
    mode: str
    """``close``, ``expire`` (ERROR 410 first) or ``abort`` (connection cut)."""


@dataclass(frozen=True, slots=True)
class ClearLatency:
    """Drop every latency rule (requests already delayed keep their delay)."""

    at: float


@dataclass(frozen=True, slots=True)
class Compact:
    at: float


@dataclass(frozen=True, slots=True)
class StopService:
    at: float
    service: str
    crash: bool
    """SIGKILL (a crash) rather than SIGTERM."""


@dataclass(frozen=True, slots=True)
class StartService:
    at: float
    service: str


@dataclass(frozen=True, slots=True)
class PauseKubelet:
    at: float
    node: str


@dataclass(frozen=True, slots=True)
class ResumeKubelet:
    at: float
    node: str


@dataclass(frozen=True, slots=True)
class AwaitBound:
    """Hold the timeline until pod ``name`` is bound (or gone, or ``within`` seconds passed)."""

    at: float
    name: str
    within: float = 15.0


@dataclass(frozen=True, slots=True)
class AwaitNominated:
    """Hold the timeline until pod ``name`` is nominated to a node by a preemption
    (``status.nominatedNodeName``), or bound, gone, ended, or ``within`` seconds passed."""

    at: float
    name: str
    within: float = 15.0


@dataclass(frozen=True, slots=True)
class CreatePriorityClass:
    """Create PriorityClass ``name`` of ``value`` unless it exists (kubesim's Priority admission
    refuses pods that set ``spec.priority`` themselves: pods name a class)."""

    at: float
    name: str
    value: int


@dataclass(frozen=True, slots=True)
class Ungate:
    """Remove pod ``name``'s ``spec.schedulingGates``: the scheduler may place it from now on."""

    at: float
    name: str


@dataclass(frozen=True, slots=True)
class RestoreRunningPods:
    """Pods placed on ``node`` by an old HAMi release and running since: HAMi's allocation
    annotations (``bind-phase: success``), no ``hami.io/vgpu-node`` label, a kubelet
    allocation record; put straight into the store. Each takes a GPU of ``node`` that nobody
    holds when the step is played: all of it (``whole``) or 60 % of its memory and 30 % of its
    cores. With ``while_stopped`` that service is stopped (SIGTERM) first and started again
    after: the pods are there before it starts."""

    at: float
    node: str
    names: tuple[str, ...]
    whole: bool = True
    while_stopped: str = ""


@dataclass(frozen=True, slots=True)
class AwaitRunning:
    """Hold the timeline until pod ``name`` runs (or is gone, ended, or ``within`` passed)."""

    at: float
    name: str
    within: float = 15.0


@dataclass(frozen=True, slots=True)
class CreateObject:
    """Create an object of ``resource`` (a claim, a claim template) in the scenario's namespace;
    a refusal is counted, not raised."""

    at: float
    resource: str
    obj: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DeleteObject:
    """Delete object ``name`` of ``resource`` in the scenario's namespace (gone already: fine)."""

    at: float
    resource: str
    name: str


@dataclass(frozen=True, slots=True)
class SetGpusHealthy:
    """Every GPU of ``node`` reported (un)healthy by its fake device backend: an unhealthy GPU
    leaves the node's ResourceSlice (it vanished, as far as DRA is concerned)."""

    at: float
    node: str
    healthy: bool


Step = (
    CreatePod
    | DeletePod
    | InjectErrors
    | InjectLatency
    | ClearLatency
    | DropWatches
    | Compact
    | StopService
    | StartService
    | PauseKubelet
    | ResumeKubelet
    | AwaitBound
    | AwaitNominated
    | CreatePriorityClass
    | Ungate
    | RestoreRunningPods
    | AwaitRunning
    | CreateObject
    | DeleteObject
    | SetGpusHealthy
)


@dataclass(frozen=True, slots=True)
class Incident:
    """A kind of incident: ``build(rng, seed, start, node, config)`` returns its steps, the first
    at ``start``, on ``node``."""

    name: str
    build: Callable[[random.Random, int, float, str, ScenarioConfig], list[Step]]


HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
HAMI_SCHEDULER: Final = "hami-scheduler"


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    """What scenarios may contain."""

    namespace: str = "chaos"
    duration: float = 1.5
    """Seconds over which the stream is spread."""
    pods: tuple[int, int] = (4, 8)
    """How many pods are created (inclusive range)."""
    delete_share: float = 0.3
    gpu_models: tuple[str, ...] = ("T4", "A100", "A10")
    services: tuple[str, ...] = ()
    """Names of the service processes that may be stopped."""
    service_fault_share: float = 0.4
    """Share of scenarios in which one service is stopped and started again."""
    scheduler_name: str = HAMI_SCHEDULER
    nodes: tuple[str, ...] = ()
    """GPU nodes an incident may happen on."""
    incidents: tuple[Incident, ...] = ()
    """Incidents that may happen (:data:`.incidents.INCIDENTS` lists them)."""
    incident_share: float = 0.0
    """Share of scenarios with one incident."""
    lock_timeout: float = 3.0
    """The extenders' node-lock timeout (seconds), which incidents outlast."""
    scheduler_service: str = "scheduler-0"
    """The extender process an incident stops (while pods are restored, or during a
    preemption)."""
    node_gpus: tuple[tuple[str, int], ...] = ()
    """How many GPUs each node of ``nodes`` has (incidents that fill a node need it)."""
    dra_nodes: tuple[str, ...] = ()
    """Nodes whose GPUs are served through DRA (the DRA incidents happen there; the other
    incidents never do)."""

    def gpus_of(self, node: str) -> int:
        """``node``'s GPU count (0 when not known)."""
        return dict(self.node_gpus).get(node, 0)


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    namespace: str
    steps: tuple[Step, ...] = field(default=())

    incident: str = ""
    """The kind of incident it contains (empty: none)."""

    @property
    def pods(self) -> tuple[str, ...]:
        names: list[str] = []
        for step in self.steps:
            if isinstance(step, CreatePod):
                names.append(str(step.pod["metadata"]["name"]))
            elif isinstance(step, RestoreRunningPods):
                names.extend(step.names)
        return tuple(names)

    def count(self, kind: type) -> int:
        return sum(isinstance(step, kind) for step in self.steps)


# Verbs and resources the services and the control-plane stand-ins use.
_ERROR_TARGETS: Final = (
    ("patch", "pods"),
    ("patch", "nodes"),
    ("get", "pods"),
    ("get", "nodes"),
    ("list", "*"),
    ("watch", "*"),
    ("create", "pods/binding"),
    ("create", "events"),
    ("patch", "pods/status"),
    ("update", "leases*"),
    ("*", "*"),
)
_CODES: Final = (500, 503, 429, 500)
# A real API server answers 409 only to writes that carry a precondition or name an existing
# object: updates (resourceVersion) and creates (AlreadyExists, a pod already bound). A merge
# patch without a resourceVersion is retried inside the server instead, so no 409 there.
_CONFLICT_VERBS: Final = frozenset({"update", "create"})
_LATENCY_TARGETS: Final = (("patch", "*"), ("get", "*"), ("*", "pods"), ("*", "*"))
_WATCHED: Final = (None, "pods", "nodes")


def _pod(rng: random.Random, name: str, config: ScenarioConfig) -> dict[str, Any]:
    shape = rng.random()
    limits: dict[str, str]
    if shape < 0.45:  # a shared slice
        limits = {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": str(rng.choice((1000, 2000, 3000, 4000, 6000))),
            "nvidia.com/gpucores": str(rng.choice((5, 10, 20, 30))),
        }
    elif shape < 0.65:  # a share of the memory, several GPUs
        limits = {
            "nvidia.com/gpu": str(rng.choice((1, 2))),
            "nvidia.com/gpumem-percentage": str(rng.choice((10, 25, 40))),
        }
    elif shape < 0.8:  # whole cards
        limits = {"nvidia.com/gpu": str(rng.choice((1, 2))), "nvidia.com/gpucores": "100"}
    elif shape < 0.93:  # two containers
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1500", "nvidia.com/gpucores": "10"}
    else:  # fits nowhere
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "500000"}
    containers = 2 if 0.8 <= shape < 0.93 else 1
    annotations: dict[str, str] = {}
    if rng.random() < 0.3:
        annotations["nvidia.com/use-gputype"] = rng.choice(config.gpu_models)
    if rng.random() < 0.3:
        annotations["hami.io/node-scheduler-policy"] = rng.choice(("binpack", "spread"))
    if rng.random() < 0.3:
        annotations["hami.io/gpu-scheduler-policy"] = rng.choice(("binpack", "spread"))
    # The scheduler is named explicitly so pods created while the webhook is down still reach
    # the extender (the configuration's failurePolicy Ignore admits them unmutated).
    return pod_manifest(
        name,
        config.namespace,
        limits,
        scheduler_name=config.scheduler_name,
        containers=containers,
        annotations=annotations,
    )


def pod_manifest(
    name: str,
    namespace: str,
    limits: Mapping[str, str],
    *,
    scheduler_name: str,
    containers: int = 1,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod of ``containers`` containers (``c0``, ``c1``, ...) each asking for ``limits``;
    ``spec`` is added to its spec (``nodeName``, ``nodeSelector``, ``schedulingGates``)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": dict(annotations or {}),
    }
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": f"c{index}",
                    "image": "example.invalid/cuda-app:latest",
                    "resources": {"limits": dict(limits)},
                }
                for index in range(containers)
            ],
            **spec,
        },
    }


def targeted_pod(
    name: str, config: ScenarioConfig, node: str, limits: Mapping[str, str], **spec: Any
) -> dict[str, Any]:
    """A pod of ``config``'s namespace and scheduler asking for ``limits`` on ``node`` (a
    ``kubernetes.io/hostname`` node selector); ``spec`` as for :func:`pod_manifest`."""
    return pod_manifest(
        name,
        config.namespace,
        limits,
        scheduler_name=config.scheduler_name,
        nodeSelector={HOSTNAME_LABEL: node},
        **spec,
    )


def _stream(rng: random.Random, seed: int, config: ScenarioConfig) -> list[Step]:
    steps: list[Step] = []
    count = rng.randint(*config.pods)
    names = [f"s{seed}-p{i}" for i in range(count)]
    for name in names:
        at = rng.uniform(0.0, config.duration)
        steps.append(CreatePod(at, _pod(rng, name, config)))
        if rng.random() < config.delete_share:
            steps.append(DeletePod(min(config.duration, at + rng.uniform(0.05, 1.0)), name))
    return steps


def _faults(rng: random.Random, config: ScenarioConfig) -> list[Step]:
    steps: list[Step] = []
    for _ in range(rng.randint(1, 3)):
        verb, resource = rng.choice(_ERROR_TARGETS)
        codes = (*_CODES, 409) if verb in _CONFLICT_VERBS else _CODES
        steps.append(
            InjectErrors(
                at=rng.uniform(0.0, config.duration / 2),
                verb=verb,
                resource=resource,
                code=rng.choice(codes),
                rate=rng.choice((0.1, 0.25, 0.5)),
                times=rng.randint(1, 8),
            )
        )
    if rng.random() < 0.5:
        verb, resource = rng.choice(_LATENCY_TARGETS)
        steps.append(
            InjectLatency(
                at=rng.uniform(0.0, config.duration / 2),
                seconds=rng.choice((0.02, 0.05, 0.1, 0.2)),
                verb=verb,
                resource=resource,
            )
        )
    if rng.random() < 0.6:
        steps.append(
            DropWatches(
                at=rng.uniform(0.0, config.duration),
                resource=rng.choice(_WATCHED),
                mode=rng.choice(("close", "expire", "abort")),
            )
        )
    if rng.random() < 0.4:
        steps.append(Compact(at=rng.uniform(0.0, config.duration)))
    if config.services and rng.random() < config.service_fault_share:
        service = rng.choice(config.services)
        down = rng.uniform(0.0, config.duration * 0.6)
        steps.append(StopService(down, service, crash=rng.random() < 0.7))
        steps.append(StartService(min(config.duration, down + rng.uniform(0.1, 0.8)), service))
    return steps


def generate_scenario(seed: int, config: ScenarioConfig) -> Scenario:
    """The scenario of ``seed``: pod churn plus faults, and now and then an incident (drawn
    last, so a seed's churn and faults do not depend on the incident settings); steps in time
    order."""
    rng = random.Random(seed)
    steps = _stream(rng, seed, config) + _faults(rng, config)
    name = ""
    if config.incidents and config.nodes and rng.random() < config.incident_share:
        incident = rng.choice(config.incidents)
        start = rng.uniform(0.0, config.duration / 2)
        steps += incident.build(rng, seed, start, rng.choice(config.nodes), config)
        name = incident.name
    return _scenario(seed, config, steps, name)


def incident_scenario(incident: Incident, seed: int, config: ScenarioConfig) -> Scenario:
    """A scenario of ``incident`` alone (no churn, no faults) on the first of ``config.nodes``,
    for targeted tests."""
    rng = random.Random(seed)
    steps = incident.build(rng, seed, 0.0, config.nodes[0], config)
    return _scenario(seed, config, steps, incident.name)


def _scenario(seed: int, config: ScenarioConfig, steps: list[Step], incident: str) -> Scenario:
    ordered = sorted(steps, key=lambda step: step.at)  # stable: same-time steps keep their order
    return Scenario(seed=seed, namespace=config.namespace, steps=tuple(ordered), incident=incident)


def describe(scenario: Scenario) -> Sequence[str]:
    """One line per step, for logs and failure messages."""
    lines = []
    for step in scenario.steps:
        if isinstance(step, CreatePod):
            spec = step.pod["spec"]
            limits = spec["containers"][0]["resources"]["limits"]
            where = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)
            extra = f" on {where}" if where else ""
            if spec.get("schedulingGates"):
                extra += " (gated)"
            if spec.get("schedulerName") not in (None, HAMI_SCHEDULER):
                extra += f" by {spec.get('schedulerName')}"
            lines.append(f"{step.at:5.2f}s create {step.pod['metadata']['name']} {limits}{extra}")
        else:
            fields = {k: getattr(step, k) for k in step.__dataclass_fields__ if k != "at"}
            lines.append(f"{step.at:5.2f}s {type(step).__name__} {fields}")
    return lines
