"""What fault scenarios may contain (:class:`ScenarioConfig`) and the kinds of incident
(:class:`Incident`) they may draw from; the pod selector label and scheduler name they use.

Pure; apart from :mod:`.generate` because the incidents (:mod:`hami_kubesim.stack.chaos.incidents`,
``.dra``, ``.preemption``) build their steps from the same config.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from hami_kubesim.stack.chaos.scenarios.steps import Step


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
