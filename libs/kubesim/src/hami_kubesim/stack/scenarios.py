"""Seeded random fault scenarios: a timeline of pod churn, API faults and service crashes.

Pure: :func:`generate_scenario` turns a seed into a :class:`Scenario`, a list of timed steps
(seconds from the scenario's start). The same seed always gives the same timeline; what the
system does with it still depends on timing, which is the point of running many.

Steps:

* :class:`CreatePod` / :class:`DeletePod` — the stream: shared slices, whole cards, several
  containers, type selectors, node/GPU policies, now and then a pod no node can fit;
* :class:`InjectErrors` — answer a share of matching API requests with 500/503/429 (409 only
  for creates and updates, the writes a real API server can refuse with a conflict);
* :class:`InjectLatency` — delay matching API requests;
* :class:`DropWatches` — end open watches cleanly, with an ERROR 410, or by cutting them;
* :class:`Compact` — drop the watch history (watchers resuming from an old resourceVersion get
  410 Expired and must relist), then end the open watches so they do;
* :class:`StopService` / :class:`StartService` — SIGKILL or SIGTERM a service and start it again
  later in the stream.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "Compact",
    "CreatePod",
    "DeletePod",
    "DropWatches",
    "InjectErrors",
    "InjectLatency",
    "Scenario",
    "ScenarioConfig",
    "StartService",
    "Step",
    "StopService",
    "generate_scenario",
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


Step = (
    CreatePod
    | DeletePod
    | InjectErrors
    | InjectLatency
    | DropWatches
    | Compact
    | StopService
    | StartService
)


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
    scheduler_name: str = "hami-scheduler"


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    namespace: str
    steps: tuple[Step, ...] = field(default=())

    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(str(s.pod["metadata"]["name"]) for s in self.steps if isinstance(s, CreatePod))

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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": config.namespace, "annotations": annotations},
        "spec": {
            # Named explicitly so pods created while the webhook is down still reach the
            # extender (the configuration's failurePolicy Ignore admits them unmutated).
            "schedulerName": config.scheduler_name,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": f"c{index}",
                    "image": "example.invalid/cuda-app:latest",
                    "resources": {"limits": dict(limits)},
                }
                for index in range(containers)
            ],
        },
    }


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
    """The scenario of ``seed``: pod churn plus faults, steps in time order."""
    rng = random.Random(seed)
    steps = _stream(rng, seed, config) + _faults(rng, config)
    ordered = sorted(steps, key=lambda step: step.at)
    return Scenario(seed=seed, namespace=config.namespace, steps=tuple(ordered))


def describe(scenario: Scenario) -> Sequence[str]:
    """One line per step, for logs and failure messages."""
    lines = []
    for step in scenario.steps:
        if isinstance(step, CreatePod):
            limits = step.pod["spec"]["containers"][0]["resources"]["limits"]
            lines.append(f"{step.at:5.2f}s create {step.pod['metadata']['name']} {limits}")
        else:
            fields = {k: getattr(step, k) for k in step.__dataclass_fields__ if k != "at"}
            lines.append(f"{step.at:5.2f}s {type(step).__name__} {fields}")
    return lines
