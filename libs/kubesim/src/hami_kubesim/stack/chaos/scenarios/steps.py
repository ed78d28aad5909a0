"""The steps of a fault scenario's timeline and the :class:`Scenario` that holds them.

Pure frozen data, each step at ``at`` seconds from the scenario's start: :mod:`.generate` draws
them from a seed and :mod:`hami_kubesim.stack.chaos.player` carries them out.  A module of their
own so that what a timeline may hold reads in one place, apart from how it is drawn.

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
  (:mod:`hami_kubesim.stack.chaos.incidents` holds them), built from :class:`PauseKubelet` /
  :class:`ResumeKubelet` (hold that node's kubelet admission), :class:`AwaitBound` (wait until
  a pod is bound), :class:`Ungate` (remove a pod's scheduling gates), :class:`RestoreRunningPods`
  (pods that were placed and started long ago, put straight into the store), and for the
  preemption incidents :class:`CreatePriorityClass` and :class:`AwaitNominated` (wait until a
  preemptor is nominated), for the DRA incidents (:mod:`hami_kubesim.stack.chaos.dra`)
  :class:`CreateObject` / :class:`DeleteObject` (claims and claim templates),
  :class:`AwaitRunning` and :class:`SetGpusHealthy` (a node's GPUs vanish from its device
  backend, or come back).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
