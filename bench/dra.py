"""DRA beside the device-plugin path, in one run of the whole system: pods per second from
creation to Running, and the latency of NodePrepareResources as the kubelet calls it.

One system holds both kinds of node, every service a process as deployed (webhook, extender,
one device plugin per node: ``--mode dra`` on the DRA nodes).  Two waves of pods, one after the
other, each in its own namespace and timed from outside through a watch:

* device-plugin path: ``nvidia.com/gpu: 1`` + ``gpumem`` pods; the webhook admits them, the
  scheduling loop calls the extender's filter and bind, the kubelet stand-in calls the plugin's
  Allocate over its socket;
* DRA path: each pod references a ResourceClaimTemplate asking the same memory; the
  resourceclaim controller makes each pod's claim, the scheduling loop allocates it from the
  nodes' ResourceSlices (kube-scheduler's DynamicResources, no extender), the kubelet stand-in
  calls NodePrepareResources over the plugin's DRA socket and applies the CDI spec.

The Prepare latency is what each kubelet stand-in measured around its NodePrepareResources
calls (one call per pod here: a claim is used by one pod); the device-plugin Allocate latency
comes from the plugins' own histogram.

    uv run --frozen python bench/dra.py [--nodes 4] [--gpus 4] [--pods 200] [--memory-mib 1024]

Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence

from hami_kubesim import dra_objects as dra
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.metrics import HistogramSummary, histogram_summary, scrape
from hami_kubesim.stack.podtimes import PodTimes, histogram_text, latency_text
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import claim_pod, gpu_pod
from hami_kubesim.stack.system.settle import until
from hami_kubesim.stack.system.spec import (
    SchedulerOptions,
    SystemSpec,
    dra_node,
    gpu_model_node,
)
from hami_runtime.logs import configure_logging

CREATE_CONCURRENCY = 16
DP_NAMESPACE = "bench-dp"
DRA_NAMESPACE = "bench-dra"
TEMPLATE = "slice"


def system_spec(nodes: int, gpus: int) -> SystemSpec:
    memory = 16384
    return SystemSpec(
        nodes=(
            *(
                gpu_model_node(f"dp-{i:02d}", "Tesla V100-SXM2-16GB", count=gpus, memory_mib=memory)
                for i in range(nodes)
            ),
            *(dra_node(f"dra-{i:02d}", count=gpus, memory_mib=memory) for i in range(nodes)),
        ),
        namespaces=("default", "kube-system", "hami-system", DP_NAMESPACE, DRA_NAMESPACE),
        scheduler=SchedulerOptions(node_scheduler_policy="spread"),
        log_level="warning",
        start_timeout=300.0,
    )


async def wave(
    system: System, namespace: str, pods: int, memory_mib: int
) -> tuple[PodTimes, float]:
    """Create ``pods`` pods of one path and wait until each is Running or Failed; returns the
    timeline and the wave's seconds from first creation to last end."""
    timeline = PodTimes(namespace)
    watcher = asyncio.create_task(timeline.follow(system.api), name=f"bench-watch-{namespace}")
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(index: int) -> None:
        name = f"p{index:04d}"
        if namespace == DRA_NAMESPACE:
            pod = claim_pod(name, namespace=namespace, template=TEMPLATE)
        else:
            pod = gpu_pod(name, namespace=namespace, memory_mib=memory_mib)
        async with gate:
            timeline.created[name] = time.monotonic()
            await system.create(pod)

    await asyncio.sleep(0.2)  # the watch is open before the first pod
    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(pods)))

    async def ended() -> bool:
        return timeline.ended >= pods

    await until(ended, within=600, what=f"{pods} {namespace} pods Running or Failed", interval=0.1)
    seconds = time.monotonic() - t0
    watcher.cancel()
    return timeline, seconds


def describe(label: str, timeline: PodTimes, seconds: float) -> float:
    rate = len(timeline.running) / seconds
    print(
        f"   {label}: {rate:6.1f} pods/s creation → Running "
        f"({len(timeline.running)} Running, {len(timeline.failed)} Failed, in {seconds:.1f} s)"
    )
    print(f"     creation → Running   {latency_text(timeline.to_running())}")
    print(f"     creation → bound     {latency_text(timeline.to_bound())}")
    print(f"     bound → Running      {latency_text(timeline.bound_to_running())}")
    return rate


async def run(nodes: int, gpus: int, pods: int, memory_mib: int) -> None:
    started = time.monotonic()
    async with running_system(system_spec(nodes, gpus)) as system:
        print(
            f"   up in {time.monotonic() - started:.1f} s: {nodes} device-plugin nodes and "
            f"{nodes} DRA nodes × {gpus} GPUs of 16 GiB, every service a process",
            flush=True,
        )
        await system.api.create(
            "resourceclaimtemplates",
            dra.claim_template(
                TEMPLATE,
                dra.exact_request("gpu", capacity={"memory": f"{memory_mib}Mi"}),
                namespace=DRA_NAMESPACE,
            ),
        )
        dp_timeline, dp_seconds = await wave(system, DP_NAMESPACE, pods, memory_mib)
        dra_timeline, dra_seconds = await wave(system, DRA_NAMESPACE, pods, memory_mib)
        print(f"\n== {pods} pods per path, {memory_mib} MiB each")
        dp_rate = describe("device-plugin path", dp_timeline, dp_seconds)
        dra_rate = describe("DRA path          ", dra_timeline, dra_seconds)
        prepare = [
            seconds
            for node in system.dra_nodes()
            for seconds in system.kubelet(node).dra.manager.call_seconds["NodePrepareResources"]
        ]
        allocate: list[HistogramSummary] = []
        for name, plugin in system.deviceplugins.items():
            if not system.node(name).dra:
                samples = await scrape(plugin.spec.metrics_url)
                found = histogram_summary(samples, "hami_deviceplugin_allocate_duration_seconds")
                if found is not None:
                    allocate.append(found)
        print("   node side:")
        print(f"     NodePrepareResources (kubelet's view)   {latency_text(prepare)}")
        for index, summary in enumerate(allocate):
            print(f"     device plugin Allocate (node {index})      {histogram_text(summary)}")
        print(
            f"   ratio DRA / device-plugin pods/s: {dra_rate / dp_rate:.2f}"
            if dp_rate
            else "   ratio: n/a"
        )
        claims = len(system.api.list("resourceclaims", namespace=DRA_NAMESPACE))
        violations = check_all(system.state())
        print(
            f"   claims made: {claims}; invariant violations: {len(violations)}; "
            f"scheduling loop: {system.scheduling_loop.stats.attempts} attempts",
            flush=True,
        )
        for violation in violations[:5]:
            print(f"     {violation}")


async def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4, help="nodes of each kind")
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per node")
    parser.add_argument("--pods", type=int, default=200, help="pods per path")
    parser.add_argument("--memory-mib", type=int, default=1024, help="GPU memory per pod")
    args = parser.parse_args(argv)
    configure_logging("console", "error")
    task = asyncio.current_task()
    if task is not None:  # SIGTERM stops every process and removes the work dir, as Ctrl-C does
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    print("DRA beside the device-plugin path (webhook, scheduling loop, extender, kubelet, plugin)")
    print(f"CPUs: {os.cpu_count()}; pods created {CREATE_CONCURRENCY} at a time")
    await run(args.nodes, args.gpus, args.pods, args.memory_mib)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
