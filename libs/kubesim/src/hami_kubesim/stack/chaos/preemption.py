"""Preemption incidents (issue 24) that fault scenarios add, each on one node.

Pure, as :mod:`.incidents`: each turns ``(rng, seed, start, node, config)`` into steps; pods
are named ``s<seed>-<incident>-<role>`` and target the node with a ``kubernetes.io/hostname``
node selector. Priorities come from PriorityClasses the steps create (:data:`CLASSES`): the
Priority admission refuses a pod that sets ``spec.priority`` itself.

The node is filled first: one *low* pod per GPU, each asking for 60 % of a card's memory, so a
pod asking for 60 % more fits only once one of them is gone. The low pods ignore SIGTERM
(``kubesim.hami.io/ignores-sigterm``) with a grace period of a few seconds, so a victim stays
``Terminating``, holding its devices, for its whole grace period: the window in which the freed
slices are held for the nominated preemptor.

* ``preempt-grace`` — a high-priority pod needs a victim's memory; the victim takes its full
  grace period; the preemptor runs once it is gone, the other low pods untouched.
* ``preempt-deleted`` — the preemptor is deleted once nominated (its victim terminating); a
  low-priority pod created then takes the slices the hold no longer keeps.
* ``preempt-race`` — every card but one is taken by pods of a priority above both preemptors,
  the last by a low pod; two preemptors of different priorities ask at about the same time, in
  a random order: the freed card fits only one, the higher.
* ``preempt-extender-restart`` — once the preemptor is nominated the extender process is
  killed or stopped and started again, and a low-priority pod asks for the node meanwhile: the
  restarted extender must hold the freed slices for the preemptor again (from its nomination)
  before it filters the low pod.

Not here: totals left stale by a device going unhealthy (the capacity-totals mode is a system
setting, and the fault scenarios share one system in the default mode).
"""

from __future__ import annotations

import random
from typing import Any, Final

from hami_kubesim.kubelet.status import IGNORES_SIGTERM_ANNOTATION
from hami_kubesim.stack.chaos.scenarios import (
    AwaitBound,
    AwaitNominated,
    CreatePod,
    CreatePriorityClass,
    DeletePod,
    Incident,
    ScenarioConfig,
    StartService,
    Step,
    StopService,
    targeted_pod,
)

__all__ = ["CLASSES", "HIGH", "LOW", "MID", "PREEMPTION_INCIDENTS", "TOP"]

LOW: Final = "chaos-low"
MID: Final = "chaos-mid"
HIGH: Final = "chaos-high"
TOP: Final = "chaos-top"
CLASSES: Final = ((LOW, 100), (MID, 1000), (HIGH, 2000), (TOP, 3000))
"""The PriorityClasses the incidents' pods name, with their values."""
_SHARE: Final = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "60"}
"""60 % of a card's memory: two never share a card."""
_STEP: Final = 0.05


def _classes(at: float) -> list[Step]:
    return [CreatePriorityClass(at, name, value) for name, value in CLASSES]


def _pod(name: str, config: ScenarioConfig, node: str, priority_class: str) -> dict[str, Any]:
    return targeted_pod(name, config, node, _SHARE, priorityClassName=priority_class)


def _stubborn(name: str, config: ScenarioConfig, node: str, grace: int) -> dict[str, Any]:
    """A low pod whose containers ignore SIGTERM: deleted, it holds its card for ``grace``
    seconds."""
    return targeted_pod(
        name,
        config,
        node,
        _SHARE,
        annotations={IGNORES_SIGTERM_ANNOTATION: "true"},
        priorityClassName=LOW,
        terminationGracePeriodSeconds=grace,
    )


def _placed(at: float, pods: list[dict[str, Any]]) -> list[Step]:
    """Create ``pods`` one after the other, then wait until each is bound."""
    names = [str(pod["metadata"]["name"]) for pod in pods]
    steps: list[Step] = [CreatePod(at + _STEP * i, pod) for i, pod in enumerate(pods)]
    last = at + _STEP * len(pods)
    return steps + [AwaitBound(last, name) for name in names]


def _filled(
    rng: random.Random, prefix: str, start: float, node: str, config: ScenarioConfig
) -> tuple[list[Step], float]:
    """The classes, then one stubborn low pod per GPU of ``node`` (``<prefix>-low-<i>``);
    returns the steps and when the node is full."""
    grace = rng.choice((2, 3))
    count = max(1, config.gpus_of(node))
    pods = [_stubborn(f"{prefix}-low-{i}", config, node, grace) for i in range(count)]
    return _classes(start) + _placed(start, pods), start + _STEP * (count + 1)


def _preempt_grace(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    steps, full = _filled(rng, f"s{seed}-grace", start, node, config)
    return [*steps, CreatePod(full, _pod(f"s{seed}-grace-high", config, node, HIGH))]


def _preempt_deleted(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    steps, full = _filled(rng, f"s{seed}-deleted", start, node, config)
    preemptor = f"s{seed}-deleted-high"
    return [
        *steps,
        CreatePod(full, _pod(preemptor, config, node, HIGH)),
        AwaitNominated(full, preemptor),
        DeletePod(full, preemptor),
        CreatePod(full + rng.uniform(0.0, 0.3), _pod(f"s{seed}-deleted-late", config, node, LOW)),
    ]


def _preempt_race(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    count = max(1, config.gpus_of(node))
    blockers = [_pod(f"s{seed}-race-top-{i}", config, node, TOP) for i in range(count - 1)]
    steps = _classes(start) + _placed(start, blockers)
    filled = start + _STEP * count
    steps += _placed(filled, [_stubborn(f"s{seed}-race-low", config, node, rng.choice((2, 3)))])
    racing = [(f"s{seed}-race-high", HIGH), (f"s{seed}-race-mid", MID)]
    rng.shuffle(racing)
    first = filled + 2 * _STEP
    second = first + rng.uniform(0.0, 0.3)
    return [
        *steps,
        CreatePod(first, _pod(racing[0][0], config, node, racing[0][1])),
        CreatePod(second, _pod(racing[1][0], config, node, racing[1][1])),
    ]


def _preempt_extender_restart(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    steps, full = _filled(rng, f"s{seed}-restart", start, node, config)
    preemptor = f"s{seed}-restart-high"
    steps += [
        CreatePod(full, _pod(preemptor, config, node, HIGH)),
        AwaitNominated(full, preemptor),
    ]
    service = config.scheduler_service
    if service in config.services:
        steps += [
            StopService(full, service, crash=rng.random() < 0.5),
            StartService(full + rng.uniform(0.2, 1.0), service),
        ]
    late = _pod(f"s{seed}-restart-late", config, node, LOW)
    return [*steps, CreatePod(full + rng.uniform(0.05, 0.5), late)]


PREEMPTION_INCIDENTS: Final = (
    Incident("preempt-grace", _preempt_grace),
    Incident("preempt-deleted", _preempt_deleted),
    Incident("preempt-race", _preempt_race),
    Incident("preempt-extender-restart", _preempt_extender_restart),
)
"""Every preemption incident, by name (see the module docstring)."""
