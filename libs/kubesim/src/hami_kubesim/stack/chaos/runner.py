"""Run fault scenarios against a running system and check the invariants after each.

:func:`run_scenario` plays a :class:`~hami_kubesim.stack.scenarios.Scenario` on its timeline
(the driver creates and deletes pods in-process, as a client; the faults hit every HTTP client
of the API server: the services and the control-plane stand-ins), then stops the faults, brings
every stopped service back, waits for every pod to settle, checks the invariants and deletes the
scenario's pods. :func:`run_scenarios` does that for many seeds on one system and sums up.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog

from hami_kube.objects import PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.stack.invariants import Violation, check_all, stale_locks
from hami_kubesim.stack.processes import ServiceProcess
from hami_kubesim.stack.scenarios import (
    Compact,
    CreatePod,
    DeletePod,
    DropWatches,
    InjectErrors,
    InjectLatency,
    Scenario,
    ScenarioConfig,
    StartService,
    Step,
    StopService,
    generate_scenario,
)
from hami_kubesim.stack.settle import settled, unsettled
from hami_kubesim.stack.spec import SchedulerOptions, SystemSpec, gpu_model_node
from hami_kubesim.stack.state import outcome
from hami_kubesim.stack.system import System

__all__ = [
    "CHAOS_LOCK_TIMEOUT",
    "ChaosSummary",
    "ScenarioResult",
    "chaos_spec",
    "run_scenario",
    "run_scenarios",
]

log = structlog.get_logger(__name__)

CHAOS_LOCK_TIMEOUT = timedelta(seconds=3)


def chaos_spec() -> SystemSpec:
    """The system the fault scenarios run on: three GPU nodes of different models, one extender.

    The node-lock expiry is 3 s and the scheduling loop's pod backoff 0.2 s doubling to 2 s
    (the chart's kube-scheduler defaults are 1 s to 10 s), so pods retried after a fault settle
    within a scenario rather than tens of seconds later.
    """
    return SystemSpec(
        nodes=(
            gpu_model_node("f-node-a", "Tesla T4", count=4, memory_mib=15360, numa_nodes=2),
            gpu_model_node("f-node-b", "NVIDIA A100-SXM4-40GB", count=2, memory_mib=40960),
            gpu_model_node("f-node-c", "NVIDIA A10", count=4, memory_mib=23028),
        ),
        scheduler=SchedulerOptions(node_lock_timeout="3s"),
        pod_initial_backoff=0.2,
        pod_max_backoff=2.0,
    )


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

    def render(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "none"
        lines = [
            f"scenarios: {len(self.results)}",
            f"faults injected: {sum(self.faults.values())} ({faults})",
            f"pods: {sum(self.outcomes.values())} ({outcomes})",
            f"expired lock annotations left for the next bind to take over: "
            f"{sum(bool(r.stale_locks) for r in self.results)} scenarios",
            f"violations: {len(self.violations)}",
        ]
        lines += [f"  seed {seed}: {violation}" for seed, violation in self.violations]
        return "\n".join(lines)


class _Player:
    """Carries out the steps of one scenario on one system."""

    def __init__(self, system: System, scenario: Scenario) -> None:
        self.system = system
        self.scenario = scenario
        self.faults: Counter[str] = Counter()
        self.rejected = 0
        self.background: list[asyncio.Task[object]] = []

    def _service(self, name: str) -> ServiceProcess:
        return next(p for p in self.system.services() if p.name == name)

    async def play(self, step: Step) -> None:
        api, namespace = self.system.api, self.scenario.namespace
        if isinstance(step, CreatePod):
            try:
                await self.system.create(step.pod)
            except StatusError:
                self.rejected += 1
        elif isinstance(step, DeletePod):
            await self.system.delete_pod(namespace, step.name)
        elif isinstance(step, InjectErrors):
            api.inject_error(
                step.verb, step.resource, code=step.code, rate=step.rate, times=step.times
            )
        elif isinstance(step, InjectLatency):
            api.inject_latency(step.seconds, step.verb, step.resource)
            self.faults["latency rules"] += 1
        elif isinstance(step, DropWatches):
            self.faults[f"watches dropped ({step.mode})"] += api.drop_watches(
                step.resource, mode=step.mode
            )
        elif isinstance(step, Compact):
            api.compact()
            self.faults["compactions"] += 1
            self.faults["watches dropped (after compaction)"] += api.drop_watches()
        elif isinstance(step, StopService):
            service = self._service(step.service)
            self.faults["service kills" if step.crash else "service stops"] += 1
            self._spawn(service.kill() if step.crash else service.stop(), f"stop-{service.name}")
        elif isinstance(step, StartService):
            service = self._service(step.service)
            self._spawn(self._start_after_stop(service), f"start-{service.name}")

    async def _start_after_stop(self, service: ServiceProcess) -> None:
        stops = [t for t in self.background if t.get_name() == f"stop-{service.name}"]
        await asyncio.gather(*stops)
        await service.start(wait=False)

    def _spawn(self, work: Coroutine[Any, Any, object], name: str) -> None:
        self.background.append(asyncio.create_task(work, name=name))

    async def finish(self) -> None:
        """End the faults and bring every service back, ready."""
        self.faults["API errors answered"] += sum(
            int(rule.get("fired", 0)) for rule in self.system.api.faults.to_dict()["errors"]
        )
        self.system.api.clear_faults()
        await asyncio.gather(*self.background)
        for service in self.system.services():
            await service.start(wait=False)
        for service in self.system.services():
            await service.wait_ready()


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
    player = _Player(system, scenario)
    loop = asyncio.get_running_loop()
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
        state = await system.wait_for(settled(keys), within=settle_within, what="pods settle")
    except TimeoutError:
        state = system.state()  # the checker reports what is still in flight
        log.warning("scenario did not settle", seed=scenario.seed, pods=unsettled(state, keys))
    violations = check_all(state, lock_timeout=lock_timeout)
    stale = stale_locks(state, lock_timeout=lock_timeout)
    outcomes: Counter[str] = Counter(
        outcome(state, pod).value
        for pod in state.pods
        if PodView(pod).namespace == scenario.namespace
    )
    if player.rejected:
        outcomes["rejected"] += player.rejected
    await system.clear_pods(scenario.namespace, within=settle_within)
    return ScenarioResult(
        seed=scenario.seed,
        seconds=time.monotonic() - started,
        faults=player.faults,
        outcomes=outcomes,
        violations=violations,
        stale_locks=tuple(stale),
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
