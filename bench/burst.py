"""Bursts: a Job's worth of GPU pods created at once, against the kubelet's own pace.

HAMi users report a 40-pod Job taking 15–30 minutes (HAMi #1367): binds serialise behind the node
lock and fail into kube-scheduler's back-off.  Here a bind that meets the lock of a pod still
waiting for its Allocate waits in line for it instead (``--node-lock-wait``), so a burst should
move at the pace of the kubelet, which admits pods one at a time anyway.

Scenarios (the whole system on kubesim: webhook, extender and device plugins as processes, the
scheduling loop and the kubelet stand-ins in this process):

* ``one-node``: 40 pods (1 GPU, 1000 MiB each) created at once, binpacked onto one 8-GPU node;
* ``four-nodes``: the same 40 pods over four 8-GPU nodes (``--node-scheduler-policy spread``).

Each is compared with its **floor**: the same number of pods created already bound to the same
nodes and asking for no device, i.e. the time the kubelet stand-ins alone need to admit them.
Printed per scenario: time from the first creation to the last pod Running, the floor, their
ratio (the goal is ≤ 2×), how many binds waited for a lock and for how long (the extender's
``hami_scheduler_node_lock_wait_seconds``), how many scheduling attempts failed into back-off
(``FailedScheduling`` events), and every pod's outcome.

    uv run --frozen python bench/burst.py [--pods 40] [--repeat 3]

Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_kubesim.stack.metrics import histogram_summary, scrape
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.spec import GpuNode, SchedulerOptions, SystemSpec, gpu_model_node
from hami_runtime.logs import configure_logging

GPU_MODEL = "NVIDIA A100-SXM4-80GB"
GPU_MIB = 81920


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: tuple[GpuNode, ...]
    node_policy: str


def scenarios() -> tuple[Scenario, ...]:
    def nodes(count: int, prefix: str) -> tuple[GpuNode, ...]:
        return tuple(
            gpu_model_node(f"{prefix}-{i}", GPU_MODEL, count=8, memory_mib=GPU_MIB, numa_nodes=2)
            for i in range(count)
        )

    return (
        Scenario("one-node", nodes(1, "burst"), "binpack"),
        Scenario("four-nodes", nodes(4, "spread"), "spread"),
    )


def idle_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """A pod already bound to ``node`` that asks for no device: only the kubelet handles it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
    }


async def run_burst(
    system: System, namespace: str, pods: Sequence[Mapping[str, Any]], *, within: float
) -> tuple[float, dict[str, str]]:
    """Create every pod at once; seconds until all are Running (or ``within`` runs out), and
    each pod's phase at the end.

    Phases are followed through the API server's commit observer, not by listing: a list copies
    every pod, and polling one every few milliseconds spent a third of the emulator's CPU (the
    scheduling loop's, the kubelets' and the API server's) during a burst, slowing what it
    measures."""
    await system.ensure_namespace(namespace)
    phases: dict[str, str] = {}
    done = asyncio.Event()

    def observed(resource: str, _type: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if resource != "pods" or meta.get("namespace") != namespace:
            return
        phases[meta.get("name", "")] = (obj.get("status") or {}).get("phase") or "Pending"
        if len(phases) == len(pods) and all(p in ("Running", "Failed") for p in phases.values()):
            done.set()

    stop = system.api.observe(observed)
    try:
        started = time.perf_counter()
        await asyncio.gather(*(system.create(pod) for pod in pods))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await done.wait()
        return time.perf_counter() - started, dict(phases)
    finally:
        stop()


async def lock_waits(system: System) -> tuple[float, float]:
    """(binds that waited for a lock, seconds they waited in total) from the extenders."""
    count = total = 0.0
    for name, url in system.metrics_urls().items():
        if not name.startswith("scheduler"):
            continue
        samples = await scrape(url)
        summary = histogram_summary(samples, "hami_scheduler_node_lock_wait_seconds")
        if summary is not None:
            count += summary.count
            total += summary.count * summary.mean
    return count, total


def failed_scheduling(system: System, namespace: str) -> int:
    return sum(
        int(event.get("count") or 1)
        for event in system.api.list("events", namespace=namespace)
        if event.get("reason") == "FailedScheduling"
    )


async def one(scenario: Scenario, count: int, repeat: int) -> None:
    spec = SystemSpec(
        nodes=scenario.nodes,
        scheduler=SchedulerOptions(node_scheduler_policy=scenario.node_policy),
        log_level="warning",
    )
    async with running_system(spec) as system:
        await system.wait_nodes_registered()
        await system.wait_schedulers_see_nodes(len(scenario.nodes))
        names = [n.name for n in scenario.nodes]
        bursts: list[float] = []
        floors: list[float] = []
        for round_ in range(repeat):
            floor_ns = f"floor-{round_}"
            floor_pods = [
                idle_pod(f"idle-{i}", floor_ns, names[i % len(names)]) for i in range(count)
            ]
            floor, floor_phases = await run_burst(system, floor_ns, floor_pods, within=120)
            floors.append(floor)
            burst_ns = f"burst-{round_}"
            waited_before, _ = await lock_waits(system)
            gpu_pods = [
                gpu_pod(f"job-{i}", namespace=burst_ns, gpus=1, memory_mib=1000)
                for i in range(count)
            ]
            took, phases = await run_burst(system, burst_ns, gpu_pods, within=300)
            bursts.append(took)
            waited_after, wait_total = await lock_waits(system)
            outcomes: dict[str, int] = {}
            for phase in phases.values():
                outcomes[phase] = outcomes.get(phase, 0) + 1
            print(
                f"  round {round_ + 1}: burst {took:6.2f} s, floor {floor:5.2f} s "
                f"({took / floor:4.1f}x); lock waits {int(waited_after - waited_before)}; "
                f"FailedScheduling {failed_scheduling(system, burst_ns)}; outcomes {outcomes}; "
                f"floor outcomes {sorted(set(floor_phases.values()))}"
            )
            await system.clear_pods(burst_ns, within=120)
            await system.clear_pods(floor_ns, within=120)
        median_burst, median_floor = statistics.median(bursts), statistics.median(floors)
        print(
            f"  {scenario.name}: {count} pods, median burst {median_burst:.2f} s against a floor "
            f"of {median_floor:.2f} s: {median_burst / median_floor:.1f}x (goal ≤ 2x); "
            f"total lock wait {wait_total:.1f} s"
        )


async def main(args: argparse.Namespace) -> None:
    configure_logging("json", "warning")
    for scenario in scenarios():
        if args.only and scenario.name not in args.only:
            continue
        print(f"== {scenario.name}: {len(scenario.nodes)} node(s) × 8 GPUs, {scenario.node_policy}")
        await one(scenario, args.pods, args.repeat)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=[], help="scenario names")
    asyncio.run(main(parser.parse_args()))
