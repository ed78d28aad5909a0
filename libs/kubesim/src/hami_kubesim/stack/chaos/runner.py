"""Run fault scenarios against a running system and check the invariants after each.

:func:`run_scenario` plays a :class:`~.scenarios.Scenario` on its timeline
(:class:`~.player.Player`: the driver creates and deletes pods in-process, as a client; the
faults hit every HTTP client of the API server: the services and the control-plane
stand-ins), then stops the faults, resumes the kubelets, brings every stopped service back,
waits for every pod to settle, checks the invariants — the node-lock and preemption rules
against the :class:`~.timeline.TimelineRecorder`'s record of the scenario, the preemption rules
over the preemptions the scheduling loop carried out meanwhile — and deletes the scenario's
pods. :func:`run_scenarios` does that for many seeds on one system and sums up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog

from hami_kube.objects import PodView
from hami_kubesim.stack.chaos.incidents import INCIDENTS
from hami_kubesim.stack.chaos.player import Player
from hami_kubesim.stack.chaos.scenarios import Incident, Scenario, ScenarioConfig, generate_scenario
from hami_kubesim.stack.chaos.timeline import TimelineRecorder
from hami_kubesim.stack.checks.invariants import Violation, check_all
from hami_kubesim.stack.checks.locks import stale_locks
from hami_kubesim.stack.state import ClusterState, failed_scheduling, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.settle import settled, unsettled
from hami_kubesim.stack.system.spec import (
    SchedulerOptions,
    SystemSpec,
    dra_node,
    gpu_model_node,
)
from hami_protocol.durations import parse_go_duration

__all__ = [
    "CHAOS_LOCK_TIMEOUT",
    "ChaosSummary",
    "PodResult",
    "ScenarioResult",
    "chaos_config",
    "chaos_spec",
    "run_scenario",
    "run_scenarios",
]

log = structlog.get_logger(__name__)

CHAOS_LOCK_TIMEOUT = timedelta(seconds=3)


def chaos_spec() -> SystemSpec:
    """The system the fault scenarios run on: three GPU nodes of different models, one extender.

    ``f-node-c``'s device plugin runs without PodResources (the node lock path); the node-lock
    expiry is 3 s and the scheduling loop's pod backoff 0.2 s doubling to 2 s
    (the chart's kube-scheduler defaults are 1 s to 10 s), so pods retried after a fault settle
    within a scenario rather than tens of seconds later. The scheduling loop preempts as
    kube-scheduler 1.38 does: a node short of GPU slices only (no in-tree victim) goes to the
    extender's preempt verb, so the preemption incidents preempt in the default mode.
    ``f-node-dra`` runs its two 16 GiB GPUs through DRA (the DRA incidents happen there; the
    extender never sees them, so the stream's pods never land there).
    """
    return SystemSpec(
        nodes=(
            gpu_model_node("f-node-a", "Tesla T4", count=4, memory_mib=15360, numa_nodes=2),
            gpu_model_node("f-node-b", "NVIDIA A100-SXM4-40GB", count=2, memory_mib=40960),
            # Its device plugin runs without the kubelet's PodResources API: binds to it take
            # the node lock, so the scenarios cover both ways a pod is identified.
            dataclasses.replace(
                gpu_model_node("f-node-c", "NVIDIA A10", count=4, memory_mib=23028),
                pod_resources=False,
            ),
            dra_node("f-node-dra", count=2, memory_mib=16384),
        ),
        scheduler=SchedulerOptions(node_lock_timeout="3s"),
        pod_initial_backoff=0.2,
        pod_max_backoff=2.0,
        preemption_behaviour="1.38",
    )


def chaos_config(
    system: System,
    *,
    duration: float = 1.5,
    incidents: Sequence[Incident] = INCIDENTS,
    incident_share: float = 0.3,
) -> ScenarioConfig:
    """What the scenarios on ``system`` may contain: its services may be stopped, incidents
    (a share of the scenarios) happen on its GPU nodes with its node-lock timeout."""
    gpu_nodes = [n for n in system.spec.nodes if n.extender_gpus]
    return ScenarioConfig(
        duration=duration,
        services=tuple(p.name for p in system.services()),
        nodes=tuple(n.name for n in gpu_nodes),
        node_gpus=tuple((n.name, len(n.gpus)) for n in gpu_nodes),
        incidents=tuple(incidents),
        incident_share=incident_share,
        lock_timeout=_seconds(system.spec.scheduler.node_lock_timeout, CHAOS_LOCK_TIMEOUT),
        scheduler_service=system.schedulers[0].name,
        dra_nodes=tuple(n.name for n in system.spec.nodes if n.dra and n.device_plugin),
    )


def _seconds(go_duration: str, default: timedelta) -> float:
    if not go_duration:
        return default.total_seconds()
    return parse_go_duration(go_duration)


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    seed: int
    seconds: float
    faults: Counter[str]
    """Faults injected, by kind (API errors counted as answered, not as armed)."""
    outcomes: Counter[str]
    """Pods by final outcome (Running, Failed, Unschedulable, ...; ``rejected`` at admission)."""
    violations: tuple[Violation, ...]
    stale_locks: tuple[str, ...] = ()
    """Nodes holding a lock annotation past its expiry when the scenario settled."""
    incident: str = ""
    """The incident the scenario contained (empty: none)."""
    pods: Mapping[str, PodResult] = field(default_factory=dict)
    """Each pod of the scenario by name, as it ended."""
    preemptions: int = 0
    """Preemptions the scheduling loop carried out during the scenario."""


@dataclass(frozen=True, slots=True)
class PodResult:
    """How one pod of a scenario ended."""

    outcome: str
    """:class:`~hami_kubesim.stack.state.Outcome` value."""
    node: str = ""
    message: str = ""
    """``status.message`` (why it failed), or its last FailedScheduling message."""


def _pod_result(state: ClusterState, pod: Mapping[str, Any]) -> PodResult:
    view = PodView(pod)
    message = str(view.status.get("message") or "")
    if not message:
        message = (failed_scheduling(state, pod) or ("",))[-1]
    return PodResult(outcome(state, pod).value, view.node_name, message)


@dataclass(slots=True)
class ChaosSummary:
    results: list[ScenarioResult] = field(default_factory=list)

    @property
    def faults(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for result in self.results:
            total.update(result.faults)
        return total

    @property
    def outcomes(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for result in self.results:
            total.update(result.outcomes)
        return total

    @property
    def violations(self) -> list[tuple[int, Violation]]:
        return [(r.seed, v) for r in self.results for v in r.violations]

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.results)

    @property
    def incidents(self) -> Counter[str]:
        return Counter(r.incident for r in self.results if r.incident)

    def render(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "none"
        incidents = ", ".join(f"{k} {v}" for k, v in sorted(self.incidents.items())) or "none"
        lines = [
            f"scenarios: {len(self.results)}",
            f"faults injected: {sum(self.faults.values())} ({faults})",
            f"pods: {sum(self.outcomes.values())} ({outcomes})",
            f"incidents: {sum(self.incidents.values())} ({incidents})",
            f"preemptions: {self.preemptions}",
            f"expired lock annotations left for the next bind to take over: "
            f"{sum(bool(r.stale_locks) for r in self.results)} scenarios",
            f"violations: {len(self.violations)}",
        ]
        by_seed = {r.seed: r.incident for r in self.results}
        lines += [
            f"  seed {seed}{f' ({by_seed[seed]})' if by_seed.get(seed) else ''}: {violation}"
            for seed, violation in self.violations
        ]
        return "\n".join(lines)


async def run_scenario(
    system: System,
    scenario: Scenario,
    *,
    lock_timeout: timedelta,
    settle_within: float = 60.0,
) -> ScenarioResult:
    """Play ``scenario``, settle, check the invariants, clean up; see the module doc."""
    started = time.monotonic()
    await system.ensure_namespace(scenario.namespace)
    system.api.faults.reseed(scenario.seed)
    player = Player(system, scenario)
    loop = asyncio.get_running_loop()
    with TimelineRecorder(system.api) as recorder:
        origin = loop.time()
        try:
            for step in scenario.steps:
                # Pacing the timeline, not waiting for a condition.
                delay = origin + step.at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await player.play(step)
        finally:
            await player.finish()
        keys = [f"{scenario.namespace}/{name}" for name in scenario.pods]
        try:
            # ... and every claim no pod uses any more unprepared (its CDI spec removed).
            state = await system.wait_for(
                lambda s: settled(keys)(s) and not s.unpreparing,
                within=settle_within,
                what="pods settle",
            )
        except TimeoutError:
            state = system.state()  # the checker reports what is still in flight
            log.warning("scenario did not settle", seed=scenario.seed, pods=unsettled(state, keys))
        timeline = recorder.timeline()
        state = dataclasses.replace(
            state,
            timeline=timeline,
            preemptions=tuple(p for p in state.preemptions if p.at >= timeline.since),
        )
    violations = check_all(state, lock_timeout=lock_timeout)
    stale = stale_locks(state, lock_timeout=lock_timeout)
    pods = {
        PodView(pod).name: _pod_result(state, pod)
        for pod in state.pods
        if PodView(pod).namespace == scenario.namespace
    }
    outcomes: Counter[str] = Counter(result.outcome for result in pods.values())
    if player.rejected:
        outcomes["rejected"] += player.rejected
    await system.clear_pods(scenario.namespace, within=settle_within)
    await system.clear_claims(scenario.namespace)
    return ScenarioResult(
        seed=scenario.seed,
        seconds=time.monotonic() - started,
        faults=player.faults,
        outcomes=outcomes,
        violations=violations,
        stale_locks=tuple(stale),
        incident=scenario.incident,
        pods=pods,
        preemptions=len(state.preemptions),
    )


async def run_scenarios(
    system: System,
    seeds: Sequence[int],
    config: ScenarioConfig,
    *,
    lock_timeout: timedelta,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> ChaosSummary:
    """Run the scenario of every seed in turn on ``system``."""
    summary = ChaosSummary()
    for seed in seeds:
        result = await run_scenario(
            system, generate_scenario(seed, config), lock_timeout=lock_timeout
        )
        summary.results.append(result)
        if on_result is not None:
            on_result(result)
    return summary
