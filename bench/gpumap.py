"""GPU map: page and JSON latency and server CPU per render at 5,000 nodes × 8 GPUs, beside the
filter's latency, and the filter's p99 with the page polled once a second vs without.

    uv run --frozen python bench/gpumap.py [--nodes 5000] [--gpus 8] [--pods 10000,100000]
        [--pending 2000] [--rounds 30] [--window 10] [--windows 3] [--poll-seconds 1]

For each cluster size (10,000 and 100,000 running pods by default), one after the other, a
server process feeds a ``SchedulerCache`` directly, as ``bench/scheduler_bench.py`` does
(:func:`scheduler_bench.fill_running`: the watches' slimming, placements by the decision core),
plus ``--pending`` pending GPU pods (8 whole 80 GiB cards: no node fits) in the map's
``PendingPods``, each with a verdict — one real ``/filter`` of such a pod over every node, its
verdict copied to the others.  It serves, on one event loop as the service does, the real
extender application (``--filter-mode single``, no bind) and the real GPU map application.
A middleware of the bench's own, innermost on both, answers each request's process CPU time
(``time.process_time_ns`` around the handler: building and rendering) in a header.

This process then measures, one request at a time:

1. **the views**, ``--rounds`` times each after two warm-up rounds, interleaved request by
   request: the map's first page (50 nodes), a filtered page (node name containing ``node-04``,
   cards matching ``a100``), the pending pods' first page, and a fit probe
   (1 GPU × 8,192 MiB × 20 % cores over every node) — each as HTML (``/``, ``/pending``,
   ``/fit``) and as JSON (``/api/v1/...``); client-side p50/p99, server CPU per request (p50),
   and the body's size;
2. **the filter**: ``POST /filter`` naming every node, back to back, for a pool of 100 pods of
   ``scheduler_bench``'s four filter shapes filtered in turn (each filter of a pod gives up the
   pod's previous placement, as the service does, so the cluster stays the size it was), over
   ``2 × --windows`` windows of ``--window`` seconds alternating *quiet* and *polled*: in a
   polled window a thread of this process GETs the map's first page every ``--poll-seconds``,
   HTML and JSON alternately.  Reported: the filter's p50/p99 in each, their ratio (the issue's
   bound: polling must not move the filter's p99 by more than 10 %), the poll's own latency,
   and the server's CPU use in each kind of window (``/proc/<pid>/stat``).

Prints figures, counts and the machine's CPU count; asserts nothing about times.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler
from scheduler_bench import FILTER_SHAPES, GPU_MEM, container, fill_running, p99, pod

from hami_kube.resources import JsonObject
from hami_kube.timefmt import format_time
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_runtime import loop
from hami_runtime.logs import configure_logging
from hami_runtime.sites import start_site
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.gpumap.fit import FitProbe
from hami_scheduler.gpumap.pending import PendingPods
from hami_scheduler.gpumap.server import MAX_LINE, GpuMapState, build_gpumap_app
from hami_scheduler.gpumap.verdicts import Verdicts
from hami_scheduler.http import ExtenderState, build_app
from hami_scheduler.leader import AlwaysLeader
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.plan import Planner
from hami_scheduler.wire import ExtenderArgs

CPU_HEADER: Final = "X-Bench-Cpu-Ns"
POOL_PER_SHAPE: Final = 25
CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")

VIEWS: Final[Mapping[str, tuple[str, dict[str, str]]]] = {
    "map, first page": ("map", {}),
    "map, filtered": ("map", {"node": "node-04", "vendor": "a100"}),
    "pending, first page": ("pending", {}),
    "fit, 1 GPU 8 GiB 20 cores": ("fit", {"gpus": "1", "memory": "8192", "cores": "20"}),
}
"""Label → (view, query); the HTML page is ``/`` or ``/<view>``, the JSON ``/api/v1/<view>``."""


def view_path(view: str, form: str) -> str:
    if form == "json":
        return f"/api/v1/{view}"
    return "/" if view == "map" else f"/{view}"


# --- the server process --------------------------------------------------------------------------


@web.middleware
async def cpu_meter(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The process CPU time the handler took (building and rendering), in a response header."""
    started = time.process_time_ns()
    response = await handler(request)
    response.headers[CPU_HEADER] = str(time.process_time_ns() - started)
    return response


def pending_pod(i: int, now: datetime) -> JsonObject:
    """A pending pod no node fits (8 whole cards and a MiB more), waiting for ``i`` seconds."""
    obj = pod(f"wait-{i:05d}", [container(8, GPU_MEM + 1, 100)])
    obj["metadata"]["creationTimestamp"] = format_time(now - timedelta(seconds=i))
    obj["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/5000 nodes are available: 5000 node(s) didn't fit the extender.",
            }
        ],
    }
    return obj


async def fill_pending(
    pending: PendingPods, filters: FilterService, cache: SchedulerCache, count: int
) -> None:
    """``count`` pending pods, each with the verdict of one real filter of such a pod."""
    now = datetime.now(UTC)
    objects = [pending_pod(i, now) for i in range(count)]
    names = cache.node_names()
    first = objects[0] if objects else pending_pod(0, now)
    await filters.filter(ExtenderArgs(pod=json.loads(json.dumps(first)), node_names=names))
    verdict = pending.verdicts.get(first["metadata"]["uid"])
    assert verdict is not None, "the filter recorded a verdict"
    for obj in objects:
        meta = obj["metadata"]
        mine = dataclasses.replace(verdict, namespace=meta["namespace"], name=meta["name"])
        pending.verdicts.record(meta["uid"], mine)
        pending.upsert(obj)


async def serve(args: argparse.Namespace) -> None:
    configure_logging("json", "error")  # the filter logs a line per call at info
    started = time.perf_counter()
    cache, planner = SchedulerCache(DEFAULT_VENDORS), Planner(DEFAULT_VENDORS)
    args.mixed = False
    placed = fill_running(cache, planner, args)
    metrics = SchedulerMetrics()
    verdicts = Verdicts()
    pending = PendingPods(DEFAULT_VENDORS, verdicts=verdicts)
    filters = FilterService(
        cache=cache,
        planner=planner,
        events=SchedulerEvents(None),
        metrics=metrics,
        verdicts=verdicts,
    )
    cache.warm()  # what the service does once its watches have listed
    await fill_pending(pending, filters, cache, args.pending)
    built = time.perf_counter() - started
    gc.collect()
    gc.freeze()
    state = GpuMapState(
        cache=cache,
        probe=FitProbe(cache, planner),
        pending=pending,
        pending_synced=lambda: True,
        leadership=AlwaysLeader("bench-0"),
        identity="bench-0",
        scheduler_name="hami-scheduler",
        metrics=metrics,
        now=lambda: datetime.now(UTC),
    )
    map_app = build_gpumap_app(state)
    map_app.middlewares.append(cpu_meter)
    extender = build_app(ExtenderState(filters=filters, binder=None, metrics=metrics))
    extender.middlewares.append(cpu_meter)
    map_runner, map_port = await start_site(map_app, "127.0.0.1:0", max_line_size=MAX_LINE)
    runner, port = await start_site(extender, "127.0.0.1:0")
    info = {
        "port": port,
        "map_port": map_port,
        "placed": placed,
        "pending": len(pending.pods),
        "verdicts": len(verdicts),
        "built_s": built,
    }
    print(json.dumps(info), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await map_runner.cleanup()
    await runner.cleanup()


# --- measuring -----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def timings(samples: list[float]) -> str:
    return (
        f"p50 {statistics.median(samples) * 1e3:7.2f} ms   p99 {p99(samples) * 1e3:7.2f} ms"
        f"   (n={len(samples)})"
    )


@dataclasses.dataclass(slots=True)
class ViewSamples:
    latency: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)
    size: int = 0
    detail: str = ""


def _detail(view: str, doc: Mapping[str, Any]) -> str:
    """What the document holds (the counts that explain its cost)."""
    if view == "map":
        nodes = doc["nodes"]
        cards = sum(len(n["devices"]) for n in nodes)
        holders = sum(len(c["holders"]) for n in nodes for c in n["devices"])
        return (
            f"{len(nodes)} of {doc['page']['total']:,} nodes shown, {cards} cards, "
            f"{holders} holders; cluster {doc['cluster']['nodes']:,} nodes"
        )
    if view == "pending":
        return f"{len(doc['items'])} of {doc['page']['total']:,} pending pods shown"
    return f"{doc['fitting']:,} of {doc['nodes']:,} nodes fit, {len(doc['placements'])} shown"


async def measure_views(port: int, rounds: int) -> dict[tuple[str, str], ViewSamples]:
    results: dict[tuple[str, str], ViewSamples] = {}
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:
        for round_ in range(-2, rounds):  # two warm-up rounds
            for label, (view, query) in VIEWS.items():
                for form in ("html", "json"):
                    started = time.perf_counter()
                    async with http.get(url + view_path(view, form), params=query) as response:
                        body = await response.read()
                    elapsed = time.perf_counter() - started
                    if response.status != 200:
                        raise SystemExit(f"{label} {form}: {response.status} {body[:300]!r}")
                    if round_ < 0:
                        continue
                    samples = results.setdefault((label, form), ViewSamples())
                    samples.latency.append(elapsed)
                    samples.cpu.append(int(response.headers[CPU_HEADER]) / 1e9)
                    samples.size = len(body)
                    if form == "json" and not samples.detail:
                        samples.detail = _detail(view, json.loads(body))
    return results


class Poller:
    """GETs the map's first page every ``period`` seconds while :attr:`on` is set, HTML and
    JSON alternately, from a thread (blocking I/O: it holds the GIL only to start and finish
    a request)."""

    def __init__(self, port: int, period: float) -> None:
        self.urls = [f"http://127.0.0.1:{port}{view_path('map', f)}" for f in ("html", "json")]
        self.period = period
        self.on = threading.Event()
        self.done = threading.Event()
        self.latency: dict[str, list[float]] = {"html": [], "json": []}
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def _run(self) -> None:
        turn = 0
        while not self.done.is_set():
            if not self.on.wait(0.05):
                continue
            form = ("html", "json")[turn % 2]
            started = time.perf_counter()
            with urllib.request.urlopen(self.urls[turn % 2], timeout=30) as response:
                response.read()
            self.latency[form].append(time.perf_counter() - started)
            turn += 1
            self.done.wait(max(self.period - (time.perf_counter() - started), 0.0))

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self._thread.join(timeout=60)


@dataclasses.dataclass(slots=True)
class FilterSamples:
    latency: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"quiet": [], "polled": []}
    )
    cpu: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"quiet": [], "polled": []}
    )
    busy: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {"quiet": [], "polled": []}
    )
    """Server CPU seconds per wall second, per window."""
    polls: dict[str, list[float]] = dataclasses.field(default_factory=dict)


def filter_pool(node_names: list[str]) -> list[bytes]:
    """The filter bodies: ``POOL_PER_SHAPE`` pods of each shape, shapes in turn."""
    pods = [
        pod(f"bench-{i}-{uuid.uuid4().hex[:8]}", containers, annotations)
        for i in range(POOL_PER_SHAPE)
        for containers, annotations in FILTER_SHAPES.values()
    ]
    return [
        json.dumps({"Pod": obj, "Nodes": None, "NodeNames": node_names}).encode() for obj in pods
    ]


async def measure_filters(
    info: Mapping[str, Any], pid: int, args: argparse.Namespace
) -> FilterSamples:
    names = [f"node-{n:05d}" for n in range(args.nodes)]
    bodies = filter_pool(names)
    observed = FilterSamples()
    url = f"http://127.0.0.1:{info['port']}/filter"
    turn = 0
    with Poller(info["map_port"], args.poll_seconds) as poller:
        async with aiohttp.ClientSession() as http:

            async def run_for(seconds: float, kind: str | None) -> None:
                nonlocal turn
                until = time.perf_counter() + seconds
                while time.perf_counter() < until:
                    body = bodies[turn % len(bodies)]
                    turn += 1
                    started = time.perf_counter()
                    async with http.post(url, data=body) as response:
                        reply = await response.json()
                    elapsed = time.perf_counter() - started
                    if reply["Error"] or not reply["NodeNames"]:
                        raise SystemExit(f"filter failed: {reply['Error']}")
                    if kind is not None:
                        observed.latency[kind].append(elapsed)
                        observed.cpu[kind].append(int(response.headers[CPU_HEADER]) / 1e9)

            await run_for(2.0, None)  # every pod of the pool placed once; memos warm
            for _ in range(args.windows):
                for kind in ("quiet", "polled"):
                    if kind == "polled":
                        poller.on.set()
                    cpu, wall = cpu_seconds(pid), time.perf_counter()
                    await run_for(args.window, kind)
                    busy = (cpu_seconds(pid) - cpu) / (time.perf_counter() - wall)
                    observed.busy[kind].append(busy)
                    poller.on.clear()
        observed.polls = poller.latency
    return observed


# --- report --------------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    info: Mapping[str, Any],
    views: Mapping[tuple[str, str], ViewSamples],
    filters: FilterSamples,
) -> None:
    quiet, polled = filters.latency["quiet"], filters.latency["polled"]
    print(
        f"\n{args.nodes:,} nodes × {args.gpus} GPUs, {info['placed']:,} running pods, "
        f"{info['pending']:,} pending GPU pods ({info['verdicts']:,} verdicts kept); "
        f"caches fed in {info['built_s']:.1f} s; {os.cpu_count()} CPUs on this machine"
    )
    filter_p50 = statistics.median(quiet)
    print(
        f"  {'view':28s} {'form':4s}  client latency{'':28s}  server CPU p50  "
        f"p50 / filter p50  body"
    )
    for (label, form), samples in views.items():
        cpu = statistics.median(samples.cpu)
        ratio = statistics.median(samples.latency) / filter_p50
        print(
            f"  {label:28s} {form:4s}  {timings(samples.latency)}  {cpu * 1e3:8.2f} ms"
            f"  {ratio:10.2f}        {samples.size / 1024:7.1f} KiB"
        )
        if form == "json":
            print(f"  {'':28s}       ({samples.detail})")
    print(
        f"  {'filter, every node named':33s} {timings(quiet)}  "
        f"{statistics.median(filters.cpu['quiet']) * 1e3:8.2f} ms   (quiet windows)"
    )
    print(
        f"  {'filter, page polled':33s} {timings(polled)}  "
        f"{statistics.median(filters.cpu['polled']) * 1e3:8.2f} ms   "
        f"(polled every {args.poll_seconds:g} s, HTML and JSON alternately)"
    )
    for form, polls in filters.polls.items():
        if polls:
            print(f"    {'poll of the map, ' + form:31s} {timings(polls)}")
    print(
        f"  polled / quiet: filter p50 {statistics.median(polled) / filter_p50:.3f}, "
        f"p99 {p99(polled) / p99(quiet):.3f}   (bound: p99 ≤ 1.10; "
        f"{args.windows} windows of {args.window:g} s each, alternating)"
    )
    print(
        "  server CPU use (CPU s per s): quiet "
        f"{statistics.fmean(filters.busy['quiet']):.2f}, polled "
        f"{statistics.fmean(filters.busy['polled']):.2f}"
    )


def start_server(args: argparse.Namespace, pods: int) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--serve", "--nodes", str(args.nodes)]
    command += ["--gpus", str(args.gpus), "--pods", str(pods), "--pending", str(args.pending)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def run_size(args: argparse.Namespace, pods: int) -> None:
    child = start_server(args, pods)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            raise SystemExit("the server process died before serving")
        info = json.loads(line)
        views = asyncio.run(measure_views(info["map_port"], args.rounds))
        filters = asyncio.run(measure_filters(info, child.pid, args))
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    report(args, info, views, filters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", default="10000,100000", help="running pods, one size per run")
    parser.add_argument("--pending", type=int, default=2000, help="pending GPU pods")
    parser.add_argument("--rounds", type=int, default=30, help="requests per view and form")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per filter window")
    parser.add_argument("--windows", type=int, default=3, help="quiet + polled window pairs")
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        args.pods = int(args.pods)
        loop.run(serve(args))  # the service's own event loop
        return
    for size in (int(p) for p in args.pods.split(",")):
        run_size(args, size)


if __name__ == "__main__":
    main()
