"""GPU map: page and JSON latency and server CPU per render at 5,000 nodes × 8 GPUs, beside the
filter's latency, and the filter's p99 with the page polled once a second vs without.

    uv run --frozen python bench/gpumap.py [--nodes 5000] [--gpus 8] [--pods 10000,100000]
        [--pending 2000] [--rounds 30] [--window 10] [--windows 8] [--poll-seconds 1]
        [--max-age 5] [--reference]

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
   ``--windows`` rounds of windows of ``--window`` seconds, one of each kind in turn (so that
   whatever else runs on the machine hits each kind alike):

   * *quiet*: nothing else;
   * *page polled*: a poller process of its own (as a browser elsewhere: a thread here would
     hold this process's GIL while reading a page, and delay its reading of a filter's answer)
     GETs the map's first page every ``--poll-seconds``, HTML and JSON alternately, from a GPU
     map server that builds every answer (``--gpumap-max-age 0``);
   * *page polled, answers shared*: the same from the server as the service runs it by default,
     an answer shared for ``--max-age`` seconds (``gpumap/answers.py``);
   * with ``--reference``, *page polled, built at once*: the same from a reference server of the
     bench's own on the same event loop, which calls the same pure functions in one go
     (``map_document``, ``render_page``, ``json.dumps``) — as the map was served before it was
     built in steps.

   Reported per kind: the filter's p50/p99 and their ratios to the quiet windows' (the issue's
   bound: polling must not move the filter's p99 by more than 10 %) with a bootstrap 90 %
   interval of the p99 ratio (how far the samples' noise alone moves it), the polls' own
   latency, the filters that overlapped a poll apart from the rest, the server's CPU use
   (``/proc/<pid>/stat``) and its garbage collections.

Prints figures, counts and the machine's CPU count; asserts nothing about times.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler
from scheduler_bench import (
    FILTER_SHAPES,
    GPU_MEM,
    bench_parser,
    container,
    fill_running,
    p99,
    pod,
    served,
    server_info,
)

from hami_kube.resources import JsonObject
from hami_kube.timefmt import format_time
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_runtime.logs import configure_logging
from hami_runtime.sites import start_site
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.gpumap.answers import SharedAnswers
from hami_scheduler.gpumap.fit import FitProbe
from hami_scheduler.gpumap.model import MapQuery, map_document
from hami_scheduler.gpumap.page import render_page
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


class GcWatch:
    """The server's garbage collections so far: per generation, how many and their time."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        generation = info["generation"]
        self.counts[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._began

    async def handle(self, request: web.Request) -> web.Response:
        del request
        return web.json_response({"counts": self.counts, "seconds": self.seconds})


def at_once_app(state: GpuMapState, collections: GcWatch) -> web.Application:
    """The reference: the map (``/`` and ``/api/v1/map``) built, rendered and serialised in one
    go by the same pure functions, as the map was served before it was built in steps."""

    async def handle(request: web.Request) -> web.Response:
        query = MapQuery.read(request.query)
        doc = map_document(state.cache, query, now=state.now(), replica=state.replica())
        if request.path == "/":
            text = render_page("map", doc, request.query)
            return web.Response(text=text, content_type="text/html")
        body = json.dumps(doc, separators=(",", ":"), default=str).encode()
        return web.Response(body=body, content_type="application/json")

    app = web.Application(middlewares=[cpu_meter])
    app.router.add_get("/", handle)
    app.router.add_get("/api/v1/map", handle)
    app.router.add_get("/bench/gc", collections.handle)
    return app


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
    shared_app = build_gpumap_app(dataclasses.replace(state, shared=SharedAnswers(args.max_age)))
    shared_app.middlewares.append(cpu_meter)
    shared_runner, shared_port = await start_site(shared_app, "127.0.0.1:0")
    runner, port = await start_site(extender, "127.0.0.1:0")
    once_app = at_once_app(state, GcWatch())
    once_runner, once_port = await start_site(once_app, "127.0.0.1:0")
    info = {
        "port": port,
        "map_port": map_port,
        "shared_port": shared_port,
        "once_port": once_port,
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
    await shared_runner.cleanup()
    await once_runner.cleanup()
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


QUIET: Final = "quiet"
POLLED: Final = "page polled"
SHARED: Final = "page polled, answers shared"
AT_ONCE: Final = "page polled, built at once"
KINDS: Final = (QUIET, POLLED, SHARED, AT_ONCE)
"""The filter windows: no page; the map's first page polled, every poll built (``max-age``
0); polled as the service answers by default, a map answer shared for ``--max-age`` seconds
between the requests asking it (``--gpumap-max-age``, ``gpumap/answers.py``); the same page
polled from the reference server that builds, renders and serialises it in one go (what the map
did before it was built in steps, ``gpumap/steps.py``)."""


def kinds(args: argparse.Namespace) -> tuple[str, ...]:
    """The window kinds measured: the reference (built at once) only with ``--reference``."""
    return KINDS if args.reference else (QUIET, POLLED, SHARED)


def p99_interval(
    measured: list[float], quiet: list[float], draws: int = 400
) -> tuple[float, float]:
    """A bootstrap 90 % interval of ``p99(measured) / p99(quiet)``: both resampled with
    replacement ``draws`` times (seeded: the same samples give the same interval)."""
    chance = random.Random(25)
    ratios = sorted(
        p99(chance.choices(measured, k=len(measured))) / p99(chance.choices(quiet, k=len(quiet)))
        for _ in range(draws)
    )
    return ratios[round(0.05 * (draws - 1))], ratios[round(0.95 * (draws - 1))]


class Poller:
    """GETs the map's first page every ``period`` seconds from :attr:`port` (``None``: idle),
    HTML and JSON alternately, from a process of its own (``--poll``), as a browser elsewhere
    would: a poller thread in this process would hold the GIL while it reads a page, and delay
    this process's reading of a filter's answer, a delay the server never caused."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.polls: list[tuple[int, str, float, float]] = []
        """``(port, form, start, end)`` of every poll (``time.perf_counter``: CLOCK_MONOTONIC,
        the same clock in both processes)."""
        self._child: subprocess.Popen[str] | None = None

    def watch(self, port: int | None) -> None:
        """Poll ``port`` from now on (``None``: stop polling)."""
        assert self._child is not None
        assert self._child.stdin is not None
        self._child.stdin.write(f"{port or 0}\n")
        self._child.stdin.flush()

    def __enter__(self) -> Poller:
        command = [sys.executable, __file__, "--poll", "--poll-seconds", str(self.period)]
        self._child = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._child is not None
        out, _ = self._child.communicate("quit\n", timeout=60)
        self.polls = [(port, form, start, end) for port, form, start, end in json.loads(out)]


def poll_forever(period: float) -> None:
    """The ``--poll`` process: reads a port per line on stdin (0: idle; ``quit``: print every
    poll as JSON and end) and polls the map there every ``period`` seconds meanwhile."""
    polls: list[tuple[int, str, float, float]] = []
    turns: dict[int, int] = {}
    port = 0
    due = 0.0
    pending = b""
    while True:
        wait = None if port == 0 else max(due - time.perf_counter(), 0.0)
        readable, _, _ = select.select([0], [], [], wait)
        if readable:
            chunk = os.read(0, 4096)
            pending += chunk
            lines = pending.split(b"\n")
            pending = lines.pop()
            if not chunk or b"quit" in lines:
                break
            for line in lines:
                port = int(line)
                due = time.perf_counter()
            continue
        turn = turns[port] = turns.get(port, -1) + 1
        form = ("html", "json")[turn % 2]
        started = time.perf_counter()
        url = f"http://127.0.0.1:{port}{view_path('map', form)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            response.read()
        polls.append((port, form, started, time.perf_counter()))
        due = started + period
    print(json.dumps(polls), flush=True)


@dataclasses.dataclass(slots=True)
class FilterSamples:
    latency: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    cpu: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    busy: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Server CPU seconds per wall second, per window."""
    spans: dict[str, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)
    """``(start, end)`` of every filter (``time.perf_counter``)."""
    polls: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)
    """Window kind → form → the polls' latencies."""
    poll_spans: dict[str, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)
    gc: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Window kind → the server's full collections and their seconds, then the young ones'."""

    def overlapping(self, kind: str) -> tuple[list[float], list[float]]:
        """The latencies of the ``kind`` windows' filters that overlapped a poll, and the rest."""
        polls = self.poll_spans.get(kind, [])
        during: list[float] = []
        apart: list[float] = []
        for start, end in self.spans.get(kind, []):
            hit = any(p_start < end and start < p_end for p_start, p_end in polls)
            (during if hit else apart).append(end - start)
        return during, apart


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
    ports = {
        QUIET: None,
        POLLED: info["map_port"],
        SHARED: info["shared_port"],
        AT_ONCE: info["once_port"],
    }
    turn = 0
    poller = Poller(args.poll_seconds)
    with poller:
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
                    ended = time.perf_counter()
                    if reply["Error"] or not reply["NodeNames"]:
                        raise SystemExit(f"filter failed: {reply['Error']}")
                    if kind is not None:
                        observed.latency.setdefault(kind, []).append(ended - started)
                        observed.spans.setdefault(kind, []).append((started, ended))
                        cpu = int(response.headers[CPU_HEADER]) / 1e9
                        observed.cpu.setdefault(kind, []).append(cpu)

            async def collections() -> dict[str, list[float]]:
                async with http.get(f"http://127.0.0.1:{info['once_port']}/bench/gc") as answer:
                    found: dict[str, list[float]] = await answer.json()
                    return found

            await run_for(2.0, None)  # every pod of the pool placed once; memos warm
            for _ in range(args.windows):
                for kind in kinds(args):
                    collected = await collections()
                    poller.watch(ports[kind])
                    cpu, wall = cpu_seconds(pid), time.perf_counter()
                    await run_for(args.window, kind)
                    busy = (cpu_seconds(pid) - cpu) / (time.perf_counter() - wall)
                    poller.watch(None)
                    observed.busy.setdefault(kind, []).append(busy)
                    after = await collections()
                    gcs = observed.gc.setdefault(kind, [0.0] * 4)
                    gcs[0] += after["counts"][2] - collected["counts"][2]
                    gcs[1] += after["seconds"][2] - collected["seconds"][2]
                    gcs[2] += sum(after["counts"][:2]) - sum(collected["counts"][:2])
                    gcs[3] += sum(after["seconds"][:2]) - sum(collected["seconds"][:2])
    kind_of = {port: kind for kind, port in ports.items() if port is not None}
    for port, form, start, end in poller.polls:
        kind = kind_of[port]
        observed.polls.setdefault(kind, {}).setdefault(form, []).append(end - start)
        observed.poll_spans.setdefault(kind, []).append((start, end))
    return observed


# --- report --------------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    info: Mapping[str, Any],
    views: Mapping[tuple[str, str], ViewSamples],
    filters: FilterSamples,
) -> None:
    quiet = filters.latency[QUIET]
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
        f"  filter, every node named ({args.windows} × {len(kinds(args))} windows of "
        f"{args.window:g} s, "
        f"in turn; polled: every {args.poll_seconds:g} s, HTML and JSON alternately)"
    )
    for kind in kinds(args):
        latencies = filters.latency[kind]
        cpu = statistics.median(filters.cpu[kind])
        busy = statistics.fmean(filters.busy[kind])
        full, paused, young, young_paused = filters.gc.get(kind, [0.0] * 4)
        print(
            f"    {kind:29s} {timings(latencies)}  server CPU p50 {cpu * 1e3:5.2f} ms; "
            f"server busy {busy:.2f} CPU s/s; GCs: {full:.0f} full ({paused * 1e3:.0f} ms), "
            f"{young:.0f} young ({young_paused * 1e3:.0f} ms)"
        )
        if kind == QUIET:
            continue
        for form, polls in filters.polls.get(kind, {}).items():
            print(f"      {'poll of the map, ' + form:27s} {timings(polls)}")
        during, apart = filters.overlapping(kind)
        if during and apart:
            print(
                f"      {'filters during a poll':27s} {timings(during)}   "
                f"max {max(during) * 1e3:.2f} ms"
            )
            print(f"      {'filters between polls':27s} {timings(apart)}")
        low, high = p99_interval(latencies, quiet)
        print(
            f"      / quiet: filter p50 {statistics.median(latencies) / filter_p50:.3f}, "
            f"p99 {p99(latencies) / p99(quiet):.3f} (90 % bootstrap interval {low:.3f}-"
            f"{high:.3f})   (bound: p99 ≤ 1.10)"
        )


def start_server(args: argparse.Namespace, pods: int) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--serve", "--nodes", str(args.nodes)]
    command += ["--gpus", str(args.gpus), "--pods", str(pods), "--pending", str(args.pending)]
    command += ["--max-age", str(args.max_age)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def run_size(args: argparse.Namespace, pods: int) -> None:
    child = start_server(args, pods)
    try:
        info = server_info(child)
        views = asyncio.run(measure_views(info["map_port"], args.rounds))
        filters = asyncio.run(measure_filters(info, child.pid, args))
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    report(args, info, views, filters)


def main() -> None:
    parser = bench_parser(__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=2000, help="pending GPU pods")
    parser.add_argument("--rounds", type=int, default=30, help="requests per view and form")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per filter window")
    parser.add_argument("--windows", type=int, default=8, help="rounds of the window kinds")
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also the windows polling the reference server that builds the map at once",
    )
    parser.add_argument("--poll", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--max-age",
        type=float,
        default=5.0,
        help="seconds a map answer is shared in the 'answers shared' windows (the service's "
        "--gpumap-max-age default)",
    )
    args = parser.parse_args()
    if args.poll:
        poll_forever(args.poll_seconds)
        return
    if served(args, serve):
        return
    for size in (int(p) for p in args.pods.split(",")):
        run_size(args, size)


if __name__ == "__main__":
    main()
