"""API requests per scheduled single-GPU pod, by component and verb — measured, not estimated.

The whole system runs on kubesim (webhook, extender and device plugins as processes); kubesim
counts every request by User-Agent (``kubesim_client_requests_total``).  Single-GPU pods are
created one at a time and each is waited for until Running; the requests the components sent
meanwhile, less what they send when idle (the registration loop's pass, the handshake loop;
measured over an idle stretch first and scaled to the run's length), divided by the number of
pods, is the cost of one pod.  Watches are a standing cost and Events a courtesy: both are
printed apart and left out of the totals, as in the count of HAMi's requests below (from
``contracts/hami-protocol.md`` §3.6, §5.4, §5.5).

Two systems are measured: device plugins that identify pods through the kubelet's PodResources
API (the default; binds take no node lock) and plugins without it (``--pod-resources-socket
none``; binds take HAMi's node lock).

    uv run --frozen python bench/api_cost.py [--pods 20] [--idle 5]

Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from typing import Final

from hami_kube.objects import PodView
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.spec import SystemSpec, gpu_model_node
from hami_runtime.logs import configure_logging

COMPONENTS: Final = ("hami-webhook", "hami-scheduler", "hami-deviceplugin")
WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
READS: Final = frozenset({"GET", "LIST"})

HAMI: Final = (
    ("webhook", "0", "0"),
    ("extender filter", "1 (pod patch)", "0"),
    ("extender bind", "3 (lock, pod patch, Binding)", "~3 (pod, node, lock owner)"),
    ("device plugin", "2 (pod patch, unlock)", "~2 (node lock, pending pod)"),
    ("total", "6", "~5"),
)

Key = tuple[str, str, str]


def _counts(system: System) -> Counter[Key]:
    by = system.api.requests.counts().by("client", "verb", "resource")
    return Counter({key: int(value) for key, value in by.items()})


async def _running(system: System, namespace: str, name: str, within: float = 60.0) -> None:
    deadline = time.perf_counter() + within
    while time.perf_counter() < deadline:
        pod = system.api.try_get("pods", name, namespace=namespace)
        if pod is not None and PodView(pod).phase in ("Running", "Failed"):
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"{namespace}/{name} did not run within {within:g}s")


async def measure(label: str, deviceplugin_args: tuple[str, ...], pods: int, idle: float) -> None:
    spec = SystemSpec(
        nodes=(gpu_model_node("cost-0", "NVIDIA A100-SXM4-80GB", count=8, memory_mib=81920),),
        deviceplugin_args=deviceplugin_args,
        log_level="warning",
    )
    async with running_system(spec) as system:
        await system.wait_nodes_registered()
        await system.wait_schedulers_see_nodes(1)
        await system.ensure_namespace("cost")
        await asyncio.sleep(1.0)  # let the start-up traffic end
        before_idle = _counts(system)
        started = time.perf_counter()
        await asyncio.sleep(idle)
        idle_span = time.perf_counter() - started
        background = _counts(system) - before_idle
        before = _counts(system)
        started = time.perf_counter()
        for index in range(pods):
            name = f"one-{index}"
            await system.create(gpu_pod(name, namespace="cost", gpus=1, memory_mib=1000))
            await _running(system, "cost", name)
        span = time.perf_counter() - started
        spent = _counts(system) - before
    scale = span / idle_span
    print(f"== {label}: {pods} pods, one at a time, {span:.1f} s")
    total_writes = total_reads = 0.0
    for component in COMPONENTS:
        rows: dict[tuple[str, str], float] = {}
        for (client, verb, resource), count in spent.items():
            if client != component or verb == "WATCH":
                continue
            idle_count = background.get((client, verb, resource), 0) * scale
            rows[(verb, resource)] = max(0.0, (count - idle_count) / pods)
        writes = sum(v for (verb, res), v in rows.items() if verb in WRITES and res != "events")
        reads = sum(v for (verb, res), v in rows.items() if verb in READS)
        events = sum(v for (verb, res), v in rows.items() if res == "events")
        total_writes += writes
        total_reads += reads
        detail = ", ".join(
            f"{verb} {res} {value:.2f}"
            for (verb, res), value in sorted(rows.items())
            if value >= 0.05 and res != "events"
        )
        print(
            f"  {component:18} writes {writes:4.2f}  reads {reads:4.2f}  (events {events:.2f})"
            f"  {detail}"
        )
    print(f"  total per pod: {total_writes:.2f} writes, {total_reads:.2f} reads (events aside)")


async def main(args: argparse.Namespace) -> None:
    configure_logging("json", "warning")
    print("HAMi, from its code (contracts/hami-protocol.md): writes / reads per pod")
    for part, writes, reads in HAMI:
        print(f"  {part:16} {writes:32} {reads}")
    await measure("device plugins with PodResources (no node lock)", (), args.pods, args.idle)
    await measure(
        "device plugins without PodResources (node lock)",
        ("--pod-resources-socket=none",),
        args.pods,
        args.idle,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle traffic")
    asyncio.run(main(parser.parse_args()))
