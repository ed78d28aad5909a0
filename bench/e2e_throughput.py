"""End-to-end throughput: pods per second from creation to Running, at 100 and 1,000 nodes.

Every pod goes the whole way: the API server's admission dispatch calls the webhook (a process,
HTTPS), the scheduling loop (kube-scheduler's stand-in, reading the chart's
KubeSchedulerConfiguration) calls the extender (a process, HTTPS) to filter and bind, the node's
kubelet stand-in calls its device plugin's Allocate over the plugin's unix socket, and the pod
is marked Running.

What runs where (two cores): this process holds kubesim (API server, scheduling loop, one kubelet
stand-in per node); the webhook and the extender are one process each, as deployed. A thousand
device-plugin processes do not fit on this machine (each takes ~120 MB and ~2 s of CPU to
start), so the device plugins run in-process, ``--plugin-hosts`` processes (default 2) each
serving its share of nodes with ``hami_deviceplugin.app.serving(settings)`` — the same service
code and settings as the process (fake backend, own gRPC socket, own API client, node watch and
registration loop), sharing an interpreter and an event loop. The pods spread over the nodes
(``--node-scheduler-policy=spread``): HAMi's node lock serialises binds per node, so packing
every pod onto one node would measure the lock, not the pipeline.

Per-stage latency comes from the services' own histograms: the webhook's
``hami_webhook_admission_duration_seconds``, the extender's
``hami_scheduler_request_duration_seconds{verb=filter|bind}``, the device plugins'
``hami_deviceplugin_allocate_duration_seconds`` (summed over every plugin); plus the stages seen
from outside through a watch: create (admission included), create → bound (queue, filter, bind),
bound → Running (kubelet admission and Allocate).

    uv run --frozen python bench/e2e_throughput.py [--nodes 100,1000] [--pods 400,1000]

Prints figures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
from aiohttp import web

from hami_kubesim.stack.metrics import (
    HistogramSummary,
    Sample,
    histogram_summary,
    parse_samples,
    scrape,
)
from hami_kubesim.stack.podtimes import PodTimes, histogram_text, latency_text
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.ports import free_port
from hami_kubesim.stack.system.processes import ServiceProcess, ServiceSpec, stop_all
from hami_kubesim.stack.system.services import deviceplugin_args
from hami_kubesim.stack.system.settle import until
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, gpu_model_node
from hami_runtime.logs import configure_logging

THIS_SCRIPT = str(Path(__file__).resolve())
GPUS_PER_NODE = 4
CREATE_CONCURRENCY = 32


# --- the plugin host: many device plugins in one process --------------------------------------


async def host_plugins(spec_file: Path, port: int) -> None:
    """Serve every device plugin listed in ``spec_file`` until SIGTERM; ``/readyz`` once all are
    registered, ``/summary`` their summed Allocate histogram."""
    from prometheus_client import generate_latest

    from hami_deviceplugin.app import RunningPlugin, serving
    from hami_deviceplugin.settings import parse_settings

    entries = json.loads(await asyncio.to_thread(spec_file.read_text))
    plugins: list[RunningPlugin] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    async def readyz(_: web.Request) -> web.Response:
        ready = len(plugins) == len(entries) and all(p.ready() for p in plugins)
        return web.Response(status=200 if ready else 503, text=f"{len(plugins)}/{len(entries)}")

    async def summary(_: web.Request) -> web.Response:
        samples: list[Sample] = []
        for plugin in plugins:
            samples += parse_samples(generate_latest(plugin.metrics.registry).decode())
        merged: dict[str, float] = {}
        for sample in samples:
            if sample.name.startswith("hami_deviceplugin_allocate_duration_seconds"):
                key = sample.name + "|" + sample.labels.get("le", "")
                merged[key] = merged.get(key, 0.0) + sample.value
        return web.json_response(merged)

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/summary", summary)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    async with contextlib.AsyncExitStack() as stack:
        for entry in entries:
            settings = parse_settings(entry["args"], {})
            plugins.append(await stack.enter_async_context(serving(settings)))
        await stop.wait()
    await runner.cleanup()


def allocate_summary(merged: dict[str, float]) -> HistogramSummary | None:
    name = "hami_deviceplugin_allocate_duration_seconds"
    samples = [
        Sample(key.split("|")[0], {"le": key.split("|")[1]} if key.split("|")[1] else {}, value)
        for key, value in merged.items()
    ]
    return histogram_summary(samples, name)


# --- the benchmark ------------------------------------------------------------------------------


def system_spec(nodes: int) -> SystemSpec:
    return SystemSpec(
        nodes=tuple(
            gpu_model_node(f"node-{index:04d}", "Tesla T4", count=GPUS_PER_NODE, memory_mib=15360)
            for index in range(nodes)
        ),
        scheduler=SchedulerOptions(node_scheduler_policy="spread"),
        log_level="warning",
        start_timeout=600.0,
    )


async def start_plugin_hosts(system: System, hosts: int) -> list[ServiceProcess]:
    nodes = list(system.spec.nodes)
    processes = []
    for index in range(hosts):
        share = nodes[index::hosts]
        entries = [
            {
                "node": node.name,
                "args": [
                    *deviceplugin_args(
                        system.spec,
                        node,
                        api_url=system.url,
                        kubelet_socket=system.kubelet(node.name).kubelet_socket,
                        devices=system.fake_devices_file(node.name),
                    ),
                    # Hundreds of plugins share one event loop here: poll files and sockets
                    # rarely (a process polls its kubelet.sock every 0.2 s in the e2e stack).
                    "--metrics-bind-address=127.0.0.1:0",
                    "--register-interval=300",
                    "--kubelet-poll-interval=10",
                    "--fake-poll-interval=60",
                ],
            }
            for node in share
        ]
        spec_file = system.work_dir / f"plugin-host-{index}.json"
        spec_file.write_text(json.dumps(entries))
        port = free_port()
        processes.append(
            ServiceProcess(
                ServiceSpec(
                    name=f"plugin-host-{index}",
                    module=THIS_SCRIPT,
                    args=("--plugin-host", str(spec_file), "--port", str(port)),
                    ready_url=f"http://127.0.0.1:{port}/readyz",
                    metrics_url=f"http://127.0.0.1:{port}/summary",
                    log_file=system.logs_dir / f"plugin-host-{index}.log",
                    ready_timeout=900.0,
                    stop_timeout=60.0,
                )
            )
        )
    await asyncio.gather(*(p.start() for p in processes))
    return processes


async def create_pods(system: System, count: int, timeline: PodTimes) -> None:
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(index: int) -> None:
        name = f"p{index:05d}"
        async with gate:
            started = time.monotonic()
            timeline.created[name] = started
            await system.create(gpu_pod(name, namespace="bench", memory_mib=1000, cores=5))
            timeline.create_seconds.append(time.monotonic() - started)

    await asyncio.gather(*(one(i) for i in range(count)))


async def _ended(timeline: PodTimes, pods: int) -> bool:
    return timeline.ended >= pods


async def run_size(nodes: int, pods: int, hosts: int) -> None:
    print(f"\n== {nodes} nodes × {GPUS_PER_NODE} GPUs, {pods} pods", flush=True)
    started = time.monotonic()
    async with running_system(system_spec(nodes), deviceplugin_processes=False) as system:
        plugin_hosts = await start_plugin_hosts(system, min(hosts, nodes))
        try:
            await system.wait_nodes_registered(within=900)
            await system.wait_schedulers_see_nodes(nodes, within=900)
            print(
                f"   up in {time.monotonic() - started:.1f} s: kubesim + {nodes} kubelet "
                f"stand-ins in this process; webhook and extender processes; {nodes} device "
                f"plugins in {len(plugin_hosts)} host processes",
                flush=True,
            )
            await system.ensure_namespace("bench")
            timeline = PodTimes("bench")
            watcher = asyncio.create_task(timeline.follow(system.api), name="bench-watch")
            t0 = time.monotonic()
            await create_pods(system, pods, timeline)
            created = time.monotonic()
            # Polls the watch's tally, not cluster snapshots: listing a thousand nodes every
            # 50 ms would cost this process more CPU than the pipeline it measures.
            await until(
                lambda: _ended(timeline, pods),
                within=900,
                what=f"{pods} pods Running or Failed",
                interval=0.1,
            )
            done = time.monotonic()
            watcher.cancel()
            await report(system, plugin_hosts, timeline, pods, t0, created, done)
        finally:
            await stop_all(plugin_hosts)


async def report(
    system: System,
    plugin_hosts: Sequence[ServiceProcess],
    timeline: PodTimes,
    pods: int,
    t0: float,
    created: float,
    done: float,
) -> None:
    running = len(timeline.running)
    print(
        f"   throughput: {running / (done - t0):7.1f} pods/s creation → Running "
        f"({running} pods in {done - t0:.1f} s; all created after {created - t0:.1f} s; "
        f"{len(timeline.failed)} Failed)"
    )
    print(f"   per pod, creation → Running:        {latency_text(timeline.to_running())}")
    print("   stages seen from outside (watch):")
    print(f"     create (admission + webhook)      {latency_text(timeline.create_seconds)}")
    print(f"     created → bound (queue/filter/bind) {latency_text(timeline.to_bound())}")
    print(f"     bound → Running (kubelet/Allocate) {latency_text(timeline.bound_to_running())}")
    webhook = await scrape(system.webhook.spec.metrics_url)
    scheduler = await scrape(system.schedulers[0].spec.metrics_url)
    allocate: dict[str, float] = {}
    async with aiohttp.ClientSession() as http:
        for host in plugin_hosts:
            async with http.get(host.spec.metrics_url) as response:
                for key, value in (await response.json()).items():
                    allocate[key] = allocate.get(key, 0.0) + value
    print("   stages from the services' metrics:")
    print(
        f"     webhook admission                 "
        f"{histogram_text(histogram_summary(webhook, 'hami_webhook_admission_duration_seconds'))}"
    )
    name = "hami_scheduler_request_duration_seconds"
    print(
        f"     extender filter                   "
        f"{histogram_text(histogram_summary(scheduler, name, verb='filter'))}"
    )
    print(
        f"     extender bind                     "
        f"{histogram_text(histogram_summary(scheduler, name, verb='bind'))}"
    )
    print(f"     device plugin Allocate            {histogram_text(allocate_summary(allocate))}")
    loop_stats = system.scheduling_loop.stats
    print(
        f"   scheduling loop: {loop_stats.attempts} attempts, {loop_stats.scheduled} scheduled, "
        f"{loop_stats.failed} failed (bind failures {loop_stats.bind_failures})",
        flush=True,
    )


async def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="100,1000", help="cluster sizes, comma separated")
    parser.add_argument("--pods", default="400,1000", help="pods per size, comma separated")
    parser.add_argument("--plugin-hosts", type=int, default=2)
    parser.add_argument("--plugin-host", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plugin_host is not None:
        configure_logging("json", "warning")
        await host_plugins(args.plugin_host, args.port)
        return
    configure_logging("console", "error")
    task = asyncio.current_task()
    if task is not None:  # SIGTERM stops every process and removes the work dir, as Ctrl-C does
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    sizes = [int(n) for n in args.nodes.split(",")]
    counts = [int(n) for n in args.pods.split(",")]
    counts += [counts[-1]] * (len(sizes) - len(counts))
    print("End-to-end throughput (webhook, scheduling loop, extender, kubelet, device plugin)")
    print(
        "device plugins: in-process, hami_deviceplugin.app.serving(), "
        f"{args.plugin_hosts} host processes; pods: 1 GPU, 1000 MiB, 5% cores each"
    )
    for nodes, pods in zip(sizes, counts, strict=True):
        await run_size(nodes, pods, args.plugin_hosts)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
