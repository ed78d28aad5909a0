"""Preemption: the extender's ``/preempt`` latency beside ``/filter`` at 5,000 nodes × 8 GPUs,
and a preemptor's creation → Running on kubesim's whole stack.

    uv run --frozen python bench/preemption.py [--nodes 5000] [--gpus 8] [--pods-per-gpu 2]
        [--rounds 20] [--candidates N] [--part 1|2|both] [--e2e-nodes 2] [--e2e-gpus 2]

**Part 1 — the verb.**  A server process feeds a ``SchedulerCache`` directly (as
``bench/scheduler_bench.py`` does: the watches' handlers and slimming, no API server) with
``--nodes`` nodes of ``--gpus`` 80 GiB GPUs, every GPU full: ``--pods-per-gpu`` running pods of
1 GPU × (80 GiB / pods-per-gpu) × (100 / pods-per-gpu)% cores each, priorities 0-9, start times
spread; placements come from the decision core, so they are valid.  It serves the real extender
application with ``FilterService`` and ``PreemptService``.  The preemptor (2 GPUs × 40,000 MiB ×
50% cores, priority 1000) fits nowhere without eviction.  Each round sends, one at a time over
one keep-alive connection, a new preemptor pod

* ``POST /filter`` naming every node (``FailedNodes`` names them all), then
* ``POST /preempt`` as kube-scheduler sends it after its dry run (contract
  ``preemption-and-capacity.md`` §1.2, §2.2): the candidates are ``--candidates`` consecutive
  nodes from a random offset (default kube-scheduler's number: max(10% of the potential nodes,
  100), capped at their count — 500 at 5,000 nodes), ``nodeCacheCapable`` form
  (``NodeNameToMetaVictims``), twice:
  - **in-tree victims** (≤1.37 with capacity totals advertised): per node the pods kube-scheduler's
    ``SelectVictimsOnNode`` would leave as victims if NodeResourcesFit counted the node's
    memory / cores / slot totals (every lower-priority pod removed, then reprieved most important
    first while the totals still fit), blind to which GPU each pod holds;
  - **empty victim lists** (≥1.38, PR #135486: in-tree found nothing, the extender picks).

Reported: client-side p50/p99 of each, the preempt / filter ratios of p50 and p99, the cost per
candidate node, and the counts that explain them (nodes, pods per node, candidates, victims
offered and returned per node, nodes dropped), with the machine's CPU count.  Two warm-up rounds
(the first filter builds every ``FailedNodes`` reason text) are not counted.

**Part 2 — end to end.**  ``hami_kubesim.stack`` starts kubesim (API server with Priority
admission, scheduling loop reading the chart's KubeSchedulerConfiguration with
``preemptVerb: preempt``, kubelet stand-ins with graceful pod deletion on), the webhook, the
extender and one device plugin per node: ``--e2e-nodes`` × ``--e2e-gpus`` Tesla T4 (15 GiB).
Every GPU is filled with two low-priority pods (7,000 MiB each, ``terminationGracePeriodSeconds:
0``); then preemptors (1 GPU × 10,000 MiB, high priority) are created one at a time, each needing
both pods of one GPU evicted.  Reported per preemptor, from the API server's commit observer:
creation → first FailedScheduling, → ``nominatedNodeName``, → its victims gone, → bound, →
Running.  When the scheduling loop does not preempt (no ``Preempted`` event, no nomination, no
victim deleted within ``--e2e-wait`` seconds of the first FailedScheduling), part 2 prints
"part 2: skipped" with the scheduler's message instead.  The stack runs the chart's config, every
device resource ``ignoredByScheduler``: kube-scheduler ≤1.37 finds no in-tree victim there and
never preempts for devices (contract §1.5), so preemption shows here with the loop's ≥1.38
behaviour (or with capacity totals advertised).

Prints figures only; asserts nothing about times.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from scheduler_bench import GPU_MEM, container, node, p99, pod, server_info, timings

from hami_kube.objects import PodView
from hami_kube.resources import JsonObject
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import gpu_pod
from hami_kubesim.stack.system.settle import until
from hami_kubesim.stack.system.spec import SystemSpec, gpu_model_node
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_runtime import loop
from hami_runtime.logs import configure_logging
from hami_runtime.sites import start_site
from hami_scheduler.cache.nodes import slim_node
from hami_scheduler.cache.pods import slim_pod
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import decide_node
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.http import ExtenderState, build_app
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.preempt import PreemptService
from hami_scheduler.selection.plan import Planner, decision_record

PREEMPTOR_PRIORITY = 1000
PREEMPTOR_GPU_MEM = 40000
PREEMPTOR_CORES = 50
SLOTS_PER_GPU = 10  # scheduler_bench.node registers every GPU with count 10


# --- the cluster: every GPU full of low-priority pods --------------------------------------------


@dataclass(frozen=True, slots=True)
class Running:
    """A running pod as both processes derive it (no IPC needed for the in-tree victims)."""

    uid: str
    priority: int
    started: str
    mem: int
    cores: int


def residents(n: int, gpus: int, per_gpu: int) -> list[Running]:
    """The pods that fill node ``n``: priorities 0-9 drawn per node (so the least important
    pods sometimes share a GPU, sometimes not) and start times spread over the node."""
    rng = random.Random(n)
    return [
        Running(
            uid=f"low-{n:05d}-{k:03d}",
            priority=rng.randrange(10),
            started=f"2026-01-01T{k // 60:02d}:{k % 60:02d}:{n % 60:02d}Z",
            mem=GPU_MEM // per_gpu,
            cores=100 // per_gpu,
        )
        for k in range(gpus * per_gpu)
    ]


def preemptor_pod(gpus: int) -> JsonObject:
    obj = pod(
        f"preemptor-{uuid.uuid4().hex[:8]}",
        [container(min(2, gpus), PREEMPTOR_GPU_MEM, PREEMPTOR_CORES)],
    )
    obj["spec"]["priority"] = PREEMPTOR_PRIORITY
    obj["status"] = {"phase": "Pending"}
    return obj


def fill(cache: SchedulerCache, planner: Planner, args: argparse.Namespace) -> int:
    """Every GPU of every node full; returns how many pods were placed."""
    placed = 0
    for n in range(args.nodes):
        obj = node(n, args.gpus)
        slim_node(obj, DEFAULT_VENDORS)
        cache.upsert_node(obj)
        name = obj["metadata"]["name"]
        for resident in residents(n, args.gpus, args.pods_per_gpu):
            containers = [container(1, resident.mem, resident.cores)]
            shape = pod(resident.uid, containers)
            plan = planner.plan(PodView(shape), planner.requests(shape))
            decision = decide_node(cache.nodes[name], plan)
            if not decision.fits:
                raise SystemExit(f"{resident.uid} does not fit on {name}: {decision}")
            record = decision_record(
                decision, plan, namespace="team", vendors=DEFAULT_VENDORS, now_unix=0
            )
            obj = pod(resident.uid, containers, record.annotations)
            obj["metadata"]["uid"] = resident.uid
            obj["metadata"]["labels"].update(record.labels)
            obj["spec"]["nodeName"] = name
            obj["spec"]["priority"] = resident.priority
            obj["status"]["startTime"] = resident.started
            slim_pod(obj, DEFAULT_VENDORS)
            cache.upsert_pod(obj)
            placed += 1
    return placed


async def serve(args: argparse.Namespace) -> None:
    configure_logging("json", "error")  # the verb logs one line per call at info
    started = time.perf_counter()
    cache, planner = SchedulerCache(DEFAULT_VENDORS), Planner(DEFAULT_VENDORS)
    placed = fill(cache, planner, args)
    built = time.perf_counter() - started
    cache.warm()  # what the service does once its watches have listed
    gc.collect()
    gc.freeze()
    metrics = SchedulerMetrics()
    filters = FilterService(
        cache=cache, planner=planner, events=SchedulerEvents(None), metrics=metrics
    )
    preempts = PreemptService(cache=cache, planner=planner, metrics=metrics)
    # The service's default body limit (1 MiB): 500 candidates in the UID form fit well within.
    app = build_app(ExtenderState(filters=filters, binder=None, metrics=metrics, preempts=preempts))
    runner, port = await start_site(app, "127.0.0.1:0")
    print(json.dumps({"port": port, "placed": placed, "built_s": built}), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


# --- what kube-scheduler sends -------------------------------------------------------------------


def num_candidates(potential: int, percentage: int = 10, absolute: int = 100) -> int:
    """kube-scheduler's ``GetOffsetAndNumCandidates`` count (``calculateNumCandidates``):
    max(``minCandidateNodesPercentage``% of the potential nodes, ``minCandidateNodesAbsolute``),
    capped at the potential nodes."""
    return min(max(potential * percentage // 100, absolute), potential)


def in_tree_victims(pods: Sequence[Running], gpus: int, wanted: tuple[int, int, int]) -> list[str]:
    """``SelectVictimsOnNode`` with NodeResourcesFit counting the node's memory, cores and slot
    totals: all lower-priority pods removed, then given back most important first (higher
    priority, earlier start) while the preemptor's totals still fit.  Victims most important
    first, as kube-scheduler sends them."""
    capacity = (gpus * GPU_MEM, gpus * 100, gpus * SLOTS_PER_GPU)
    lower = [p for p in pods if p.priority < PREEMPTOR_PRIORITY]
    kept = [p for p in pods if p.priority >= PREEMPTOR_PRIORITY]
    used = [sum(p.mem for p in kept), sum(p.cores for p in kept), len(kept)]
    victims: list[str] = []
    for p in sorted(lower, key=lambda p: (-p.priority, p.started)):
        back = (used[0] + p.mem, used[1] + p.cores, used[2] + 1)
        if all(u + w <= c for u, w, c in zip(back, wanted, capacity, strict=True)):
            used = list(back)
        else:
            victims.append(p.uid)
    return victims


def meta(uids: Sequence[str]) -> dict[str, Any]:
    return {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": 0}


# --- part 1: drive and report --------------------------------------------------------------------

FILTER = "filter"
IN_TREE = "preempt, in-tree victims (<=1.37, totals)"
EMPTY = "preempt, empty victim lists (>=1.38)"


@dataclass(slots=True)
class Observed:
    samples: dict[str, list[float]]
    failed_nodes: int = 0
    offered: int = 0
    returned: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)


async def drive(port: int, args: argparse.Namespace, candidates: int) -> Observed:
    names = [f"node-{n:05d}" for n in range(args.nodes)]
    pods_of = {names[n]: residents(n, args.gpus, args.pods_per_gpu) for n in range(args.nodes)}
    gpus_wanted = min(2, args.gpus)
    wanted = (gpus_wanted * PREEMPTOR_GPU_MEM, gpus_wanted * PREEMPTOR_CORES, gpus_wanted)
    in_tree = {name: in_tree_victims(pods_of[name], args.gpus, wanted) for name in names}
    rng = random.Random(11)
    observed = Observed({FILTER: [], IN_TREE: [], EMPTY: []})
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:

        async def post(verb: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
            data = json.dumps(body).encode()
            start = time.perf_counter()
            async with http.post(f"{url}/{verb}", data=data) as response:
                reply: dict[str, Any] = await response.json()
            elapsed = time.perf_counter() - start
            if response.status != 200 or reply.get("Error"):
                raise SystemExit(f"{verb} failed: {response.status} {reply}")
            return elapsed, reply

        for round_ in range(-2, args.rounds):  # two warm-up rounds
            preemptor = preemptor_pod(args.gpus)
            elapsed, reply = await post(
                "filter", {"Pod": preemptor, "Nodes": None, "NodeNames": names}
            )
            if reply["NodeNames"]:
                raise SystemExit(f"the preemptor fits without eviction: {reply['NodeNames'][:3]}")
            observed.failed_nodes = len(reply["FailedNodes"])
            if round_ >= 0:
                observed.samples[FILTER].append(elapsed)
            offset = rng.randrange(len(names))
            chosen = [names[(offset + i) % len(names)] for i in range(candidates)]
            forms = {
                IN_TREE: {name: meta(in_tree[name]) for name in chosen},
                EMPTY: {name: meta(()) for name in chosen},
            }
            for label, victims in forms.items():
                elapsed, reply = await post(
                    "preempt",
                    {"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims},
                )
                if round_ < 0:
                    continue
                observed.samples[label].append(elapsed)
                answered = reply["NodeNameToMetaVictims"]
                observed.kept[label] = observed.kept.get(label, 0) + len(answered)
                returned = sum(len(v["Pods"]) for v in answered.values())
                observed.returned[label] = observed.returned.get(label, 0) + returned
            if round_ >= 0:
                observed.offered += sum(len(in_tree[name]) for name in chosen)
    return observed


def start_server(args: argparse.Namespace) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--serve", "--nodes", str(args.nodes)]
    command += ["--gpus", str(args.gpus), "--pods-per-gpu", str(args.pods_per_gpu)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def run_part1(args: argparse.Namespace) -> None:
    candidates = args.candidates or num_candidates(args.nodes)
    child = start_server(args)
    try:
        info = server_info(child)
        observed = asyncio.run(drive(info["port"], args, candidates))
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    report_part1(args, info, observed, candidates)


def report_part1(
    args: argparse.Namespace, info: dict[str, Any], observed: Observed, candidates: int
) -> None:
    per_node = args.gpus * args.pods_per_gpu
    rounds = len(observed.samples[FILTER])
    print(
        f"part 1: /preempt vs /filter, {args.nodes:,} nodes × {args.gpus} GPUs "
        f"({os.cpu_count()} CPUs on this machine)"
    )
    print(
        f"  cluster: {info['placed']:,} running pods, {per_node} per node "
        f"({args.pods_per_gpu} per GPU, 1 GPU × {GPU_MEM // args.pods_per_gpu} MiB each, "
        f"priority 0-9), every GPU full; cache fed in {info['built_s']:.1f} s"
    )
    print(
        f"  preemptor: {min(2, args.gpus)} GPUs × {PREEMPTOR_GPU_MEM} MiB × "
        f"{PREEMPTOR_CORES}% cores, priority {PREEMPTOR_PRIORITY}; {rounds} rounds"
    )
    calls = max(rounds * candidates, 1)
    filter_samples = observed.samples[FILTER]
    print(
        f"  {'filter, every node named':44s} {timings(filter_samples)}"
        f"   FailedNodes {observed.failed_nodes:,}"
    )
    for label in (IN_TREE, EMPTY):
        samples = observed.samples[label]
        kept = observed.kept.get(label, 0)
        returned = observed.returned.get(label, 0)
        offered = f"{observed.offered / calls:.2f}" if label == IN_TREE else "0"
        print(f"  {label:44s} {timings(samples)}")
        print(
            f"    {candidates} candidate nodes per call; victims per node offered {offered}, "
            f"returned {returned / max(kept, 1):.2f}; nodes kept {kept / max(rounds, 1):.0f}, "
            f"dropped {(calls - kept) / max(rounds, 1):.0f} per call; "
            f"p50 per candidate node {statistics.median(samples) / candidates * 1e6:.0f} µs"
        )
        ratio_p50 = statistics.median(samples) / statistics.median(filter_samples)
        ratio_p99 = p99(samples) / p99(filter_samples)
        print(f"    preempt / filter: p50 {ratio_p50:.2f}, p99 {ratio_p99:.2f}")


# --- part 2: end to end on kubesim's whole stack ------------------------------------------------

E2E_NAMESPACE = "bench"
T4_MEM = 15360
VICTIM_MEM = 7000  # two per T4; one gone leaves 8,360 MiB free, too little for the preemptor
E2E_PREEMPTOR_MEM = 10000
LOW_CLASS, HIGH_CLASS = ("bench-low", 10), ("bench-high", 1000)


def priority_class(name: str, value: int) -> JsonObject:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def e2e_pod(name: str, memory_mib: int, priority_class_name: str) -> JsonObject:
    obj = gpu_pod(name, namespace=E2E_NAMESPACE, memory_mib=memory_mib)
    obj["spec"]["priorityClassName"] = priority_class_name
    obj["spec"]["terminationGracePeriodSeconds"] = 0
    return obj


class Recorder:
    """When each pod of the namespace reached each stage, from the API server's commit
    observer (synchronous, in commit order: no watch lag in the times)."""

    def __init__(self) -> None:
        self.times: dict[str, dict[str, float]] = {}
        self.messages: dict[str, str] = {}
        self.victims: dict[str, set[str]] = {}  # preemptor UID → victims named by Preempted

    def stage(self, name: str, what: str, now: float) -> None:
        self.times.setdefault(name, {}).setdefault(what, now)

    def __call__(self, resource: str, change: str, obj: Any) -> None:
        now = time.monotonic()
        metadata = obj.get("metadata", {})
        if resource == "pods" and metadata.get("namespace") == E2E_NAMESPACE:
            name = metadata.get("name", "")
            view = PodView(obj)
            if change == "DELETED":
                self.stage(name, "deleted", now)
            if metadata.get("deletionTimestamp"):
                self.stage(name, "terminating", now)
            if view.nominated_node_name:
                self.stage(name, "nominated", now)
            if view.node_name:
                self.stage(name, "bound", now)
            if view.phase == "Running":
                self.stage(name, "running", now)
        elif resource == "events":
            involved = obj.get("involvedObject") or obj.get("regarding") or {}
            if involved.get("namespace") != E2E_NAMESPACE:
                return
            name, reason = involved.get("name", ""), obj.get("reason")
            message = str(obj.get("message") or obj.get("note") or "")
            if reason == "FailedScheduling":
                self.stage(name, "failed", now)
                self.messages[name] = message
            elif reason == "Preempted":
                by = message.removeprefix("Preempted by pod ").split(" ", 1)[0]
                self.victims.setdefault(by, set()).add(name)

    def has(self, name: str, what: str) -> bool:
        return what in self.times.get(name, {})

    def going(self) -> set[str]:
        """The low-priority pods being deleted or gone."""
        return {
            name
            for name, seen in self.times.items()
            if name.startswith("low-") and ("terminating" in seen or "deleted" in seen)
        }

    def preempting(self, name: str, uid: str, before: set[str]) -> bool:
        """Whether anything shows a preemption for the pod: a nomination, a Preempted event
        naming it, or a low-priority pod deleted since it was created (``before``: those gone
        already)."""
        named = bool(self.victims.get(uid))
        return self.has(name, "nominated") or named or bool(self.going() - before)


async def fill_e2e(system: System, recorder: Recorder, gpus_total: int) -> list[str]:
    names = [f"low-{i:03d}" for i in range(2 * gpus_total)]
    for name in names:
        await system.create(e2e_pod(name, VICTIM_MEM, LOW_CLASS[0]))

    async def all_running() -> bool:
        return all(recorder.has(name, "running") for name in names)

    await until(all_running, within=120, what=f"{len(names)} low-priority pods Running")
    return names


async def one_preemptor(
    system: System, recorder: Recorder, index: int, wait: float
) -> dict[str, float] | str:
    """Stage times of one preemptor from its creation, or why there was no preemption."""
    name = f"high-{index:03d}"
    before = recorder.going()
    created = time.monotonic()
    obj = await system.create(e2e_pod(name, E2E_PREEMPTOR_MEM, HIGH_CLASS[0]))
    uid = str(obj["metadata"]["uid"])

    async def tried() -> bool:
        return recorder.has(name, "failed") or recorder.has(name, "running")

    await until(tried, within=60, what=f"{name} tried by the scheduling loop")
    if not recorder.has(name, "running"):

        async def preempting() -> bool:
            return recorder.preempting(name, uid, before) or recorder.has(name, "running")

        try:
            await until(preempting, within=wait, what=f"a preemption for {name}", interval=0.05)
        except TimeoutError:
            message = recorder.messages.get(name, "no FailedScheduling message")
            return f"nothing preempted within {wait:.0f} s of {name}'s FailedScheduling: {message}"

    async def running() -> bool:
        return recorder.has(name, "running")

    await until(running, within=120, what=f"{name} Running", interval=0.02)
    times = {what: at - created for what, at in recorder.times[name].items()}
    victims = recorder.victims.get(uid, set())
    gone = [recorder.times.get(v, {}).get("deleted") for v in victims]
    if victims and all(g is not None for g in gone):
        times["victims gone"] = max(g for g in gone if g is not None) - created
    times["victims"] = len(victims)
    return times


async def run_part2(nodes: int, gpus: int, wait: float) -> None:
    spec = SystemSpec(
        nodes=tuple(
            gpu_model_node(f"e2e-{i}", "Tesla T4", count=gpus, memory_mib=T4_MEM)
            for i in range(nodes)
        ),
        objects=(priority_class(*LOW_CLASS), priority_class(*HIGH_CLASS)),
        # GPU-only pressure: up to 1.37 kube-scheduler's dry run finds no victim it can count
        # (without the capacity totals), from 1.38 it hands the node to the preempt verb.
        preemption_behaviour="1.38",
        log_level="warning",
        start_timeout=120.0,
    )
    print(
        f"\npart 2: creation → Running of a preemptor, {nodes} nodes × {gpus} T4 on kubesim's "
        f"whole stack; victims {VICTIM_MEM} MiB × 2 per GPU, terminationGracePeriodSeconds 0, "
        f"priority {LOW_CLASS[1]}; preemptors 1 GPU × {E2E_PREEMPTOR_MEM} MiB, priority "
        f"{HIGH_CLASS[1]}",
        flush=True,
    )
    configure_logging("console", "error")
    started = time.monotonic()
    async with running_system(spec) as system:
        # Victims are deleted gracefully, as by a real API server; with zero grace their
        # kubelet stand-in confirms the deletion at once.
        system.api.delete_pods_gracefully()
        await system.wait_nodes_registered(within=120)
        await system.wait_schedulers_see_nodes(nodes, within=120)
        await system.ensure_namespace(E2E_NAMESPACE)
        recorder = Recorder()
        stop = system.api.observe(recorder)
        try:
            await fill_e2e(system, recorder, nodes * gpus)
            print(f"  up and filled in {time.monotonic() - started:.1f} s", flush=True)
            rows = []
            for index in range(nodes * gpus):
                result = await one_preemptor(system, recorder, index, wait)
                if isinstance(result, str):
                    print(f"part 2: skipped — the scheduling loop does not preempt ({result})")
                    return
                rows.append(result)
        finally:
            stop()
    report_part2(rows)


def report_part2(rows: Sequence[dict[str, float]]) -> None:
    stages = ("failed", "nominated", "victims gone", "bound", "running")
    labels = {
        "failed": "first FailedScheduling",
        "nominated": "nominatedNodeName set",
        "victims gone": "its victims deleted",
        "bound": "bound",
        "running": "Running",
    }
    print(f"  {len(rows)} preemptors, one at a time; from creation to:")
    for stage in stages:
        seen = [row[stage] for row in rows if stage in row]
        if not seen:
            print(f"    {labels[stage]:26s} never seen")
            continue
        print(
            f"    {labels[stage]:26s} p50 {statistics.median(seen) * 1e3:8.1f} ms   "
            f"max {max(seen) * 1e3:8.1f} ms   (n={len(seen)})"
        )
    victims = [row["victims"] for row in rows]
    print(f"  victims per preemptor (Preempted events): {statistics.fmean(victims):.1f}")


# --- entry --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods-per-gpu", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (after 2 warm-up)")
    parser.add_argument(
        "--candidates", type=int, default=0, help="nodes per /preempt (default kube-scheduler's)"
    )
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    parser.add_argument("--e2e-nodes", type=int, default=2)
    parser.add_argument("--e2e-gpus", type=int, default=2)
    parser.add_argument(
        "--e2e-wait", type=float, default=20.0, help="seconds to wait for a preemption to start"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        loop.run(serve(args))  # the service's own event loop
        return
    if args.part in ("1", "both"):
        run_part1(args)
    if args.part in ("2", "both"):
        asyncio.run(run_part2(args.e2e_nodes, args.e2e_gpus, args.e2e_wait))


if __name__ == "__main__":
    main()
