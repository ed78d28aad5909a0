"""Seeded random fault scenarios: a timeline of pod churn, API faults and service crashes.

Pure: :func:`generate_scenario` turns a seed into a :class:`.steps.Scenario`, a list of timed
steps (seconds from the scenario's start). The same seed always gives the same timeline; what
the system does with it still depends on timing, which is the point of running many.  The pod
manifests of the churn and of the incidents (:func:`pod_manifest`, :func:`targeted_pod`) and
the one-line rendering of a scenario (:func:`describe`) are here too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hami_kubesim.stack.chaos.scenarios.config import (
    HAMI_SCHEDULER,
    HOSTNAME_LABEL,
    Incident,
    ScenarioConfig,
)
from hami_kubesim.stack.chaos.scenarios.steps import (
    Compact,
    CreatePod,
    DeletePod,
    DropWatches,
    InjectErrors,
    InjectLatency,
    Scenario,
    StartService,
    Step,
    StopService,
)

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
