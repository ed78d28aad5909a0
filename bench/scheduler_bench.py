"""Scheduler extender: ``/filter`` latency over HTTP at 5,000 nodes × 8 GPUs, and memory.

For each cluster size (10,000 and 100,000 running shared pods by default) a server process is
started that

* feeds its :class:`~hami_scheduler.cache.view.SchedulerCache` **directly**, through the same
  handlers and object slimming the watches use, keeping every (slimmed) Node and Pod object in
  a ``hami_kube`` ``Store`` as the reflectors would — so its memory is what a deployment holds;
  the running pods' ``hami.io/vgpu-devices-allocated`` annotations are produced by the decision
  core on the cache's own nodes, i.e. they are valid placements;
* builds every node's open-device views and freezes the heap out of the garbage collector
  (``cache.warm()``, ``gc.freeze()``), as the service does once its caches have synced;
* serves the real extender application (``--filter-mode single``).  There is no API server
  and no bind: each filter's decision is assumed in the cache, as the service keeps it until its
  bind (the filter writes nothing; the Binding carries the decision), so decisions accumulate on
  the nodes.

The servers for all sizes run side by side and this process sends filters one at a time over
HTTP (keep-alive), alternating between them request by request so that whatever else runs on
the machine slows every size alike; each request is a new pod with ``NodeNames`` naming all
5,000 nodes, for a mix of pod shapes taken in turn.  Reported: client-side p50/p99, each
server's resident memory (``VmRSS``), its garbage-collector pauses while serving, and a pod no
node fits (every
``FailedNodes`` reason materialised; the first such filter builds every reason text).  Prints
figures only; asserts nothing.

With ``--mixed`` every fifth node is a Cambricon (capacity), Hygon (colon register) or Moore
Threads (capacity) node with as many devices, and one-device pods of each of those vendors are
filtered too; the NVIDIA shapes and the vendor shapes are reported apart, with their p50 and
p99 ratios and how many nodes each kind's ``FailedNodes`` names.

    uv run --frozen python bench/scheduler_bench.py [--nodes 5000] [--pods 10000,100000] [--mixed]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import aiohttp

from hami_kube.objects import PodView
from hami_kube.resources import JsonObject
from hami_kube.store import Store
from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo, encode_node_devices_json
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
from hami_scheduler.selection.plan import Planner, decision_record

GPU_MEM = 81920


def container(nums: int, mem: int | None = None, cores: int | None = None) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": str(nums)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return {
        "name": "main",
        "image": "registry.example.com/train:latest",
        "command": ["python", "train.py"],
        "env": [
            {"name": "EPOCHS", "value": "10"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "x"},
        ],
        "resources": {"limits": limits},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }


def pod(
    name: str, containers: list[dict[str, Any]], annotations: Mapping[str, str] | None = None
) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": str(uuid.uuid4()),
            "labels": {"app": name.rsplit("-", 1)[0]},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": containers,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "restartPolicy": "Never",
        },
        "status": {"phase": "Running"},
    }


RUNNING_SHAPES = [
    (0.40, [container(1, 8000, 20)]),
    (0.30, [container(1, 16000, 30)]),
    (0.20, [container(1, 4000, 10)]),
    (0.10, [container(2, 20000, 50)]),
]

FILTER_SHAPES: dict[str, tuple[list[dict[str, Any]], dict[str, str]]] = {
    "1 GPU 8 GiB 20 cores": ([container(1, 8192, 20)], {}),
    "2 GPUs 20 GiB 50 cores, spread": (
        [container(2, 20000, 50)],
        {keys.NODE_SCHEDULER_POLICY: "spread"},
    ),
    "2 GPUs numa-bind": ([container(2, 8000, 10)], {keys.NVIDIA_NUMA_BIND: "true"}),
    "4 GPUs topology-aware": (
        [container(4, 8000, 10)],
        {keys.GPU_SCHEDULER_POLICY: "topology-aware"},
    ),
}


VENDOR_KINDS = ("MLU", "DCU", "Mthreads")
"""What the non-NVIDIA fifth of a ``--mixed`` cluster runs, in turn: capacity-synthesised
Cambricon, colon-registered Hygon, capacity-synthesised Moore Threads."""


def vendor_node(n: int, gpus: int) -> JsonObject:
    """A node of the non-NVIDIA fifth: ``gpus`` devices of one vendor, as its plugin shows them."""
    kind = VENDOR_KINDS[(n // 5) % len(VENDOR_KINDS)]
    annotations: dict[str, str] = {"node.alpha.kubernetes.io/ttl": "0"}
    resources: dict[str, str] = {}
    if kind == "MLU":
        resources = {
            "cambricon.com/vmlu": str(gpus * 100),
            "cambricon.com/mlu.smlu.vcore": str(gpus * 100),
            "cambricon.com/mlu.smlu.vmemory": str(gpus * 96),
        }
    elif kind == "Mthreads":
        resources = {
            "mthreads.com/vgpu": str(gpus * 100),
            "mthreads.com/sgpu-core": str(gpus * 16),
            "mthreads.com/sgpu-memory": str(gpus * 96),
        }
    else:
        devices = [
            DeviceInfo(f"DCU-{n:05d}-{i}", i, 10, 65536, 100, "DCU-Z100", i // 4, True)
            for i in range(gpus)
        ]
        annotations[keys.node_register_key("dcu")] = ":".join(
            f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},true" for d in devices
        )
        annotations[keys.node_handshake_key("dcu")] = "Reported 2026-01-01 00:00:00"
        resources = {"hygon.com/dcunum": str(gpus * 10)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{n:05d}",
            "labels": {"kubernetes.io/hostname": f"node-{n:05d}", "gpu": "on"},
            "annotations": annotations,
        },
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", **resources},
            "capacity": {"cpu": "96", "memory": "1Ti", **resources},
        },
    }


def vendor_container(limits: dict[str, str]) -> dict[str, Any]:
    spec = container(0)
    spec["resources"] = {"limits": {"cpu": "4", "memory": "16Gi", **limits}}
    return spec


VENDOR_SHAPES: dict[str, tuple[list[dict[str, Any]], dict[str, str]]] = {
    "vendor: 1 MLU 4 GiB": (
        [vendor_container({"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "16"})],
        {},
    ),
    "vendor: 1 DCU 8 GiB 20 cores": (
        [
            vendor_container(
                {"hygon.com/dcunum": "1", "hygon.com/dcumem": "8192", "hygon.com/dcucores": "20"}
            )
        ],
        {},
    ),
    "vendor: 1 Mthreads 2 GiB": (
        [vendor_container({"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4"})],
        {},
    ),
}


def node(n: int, gpus: int, *, mixed: bool = False) -> JsonObject:
    if mixed and n % 5 == 4:
        return vendor_node(n, gpus)
    devices = [
        DeviceInfo(
            id=f"GPU-{n:05d}-{i}",
            index=i,
            count=10,
            devmem=GPU_MEM,
            devcore=100,
            type="NVIDIA-A100-SXM4-80GB",
            numa=i // max(gpus // 2, 1),
            health=True,
        )
        for i in range(gpus)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{n:05d}",
            "labels": {"kubernetes.io/hostname": f"node-{n:05d}", "gpu": "on"},
            "annotations": {
                keys.NVIDIA_REGISTER: encode_node_devices_json(devices),
                keys.NVIDIA_HANDSHAKE: "Reported 2026-01-01 00:00:00",
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": str(gpus * 10)},
            "capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": str(gpus * 10)},
            "images": [
                {"names": [f"registry.example.com/img-{i}:v1"], "sizeBytes": 1} for i in range(20)
            ],
        },
    }


def vm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def fill_running(
    cache: SchedulerCache,
    planner: Planner,
    args: argparse.Namespace,
    stores: tuple[Store, Store] | None = None,
) -> int:
    """Feed ``cache`` ``args.nodes`` nodes of ``args.gpus`` GPUs (``args.mixed``: every fifth a
    vendor node) and up to ``args.pods`` running pods placed by the decision core, through the
    watches' slimming; ``stores``: where to keep the (slimmed) Node and Pod objects as the
    reflectors would.  Returns how many pods were placed."""
    rng = random.Random(7)
    for n in range(args.nodes):
        obj = node(n, args.gpus, mixed=args.mixed)
        slim_node(obj, DEFAULT_VENDORS)
        if stores is not None:
            stores[0].upsert(obj)
        cache.upsert_node(obj)
    shapes = [
        (w, c, planner.plan(PodView(pod("x", c)), planner.requests(pod("x", c))))
        for w, c in RUNNING_SHAPES
    ]
    names = list(cache.nodes)
    placed = attempts = 0
    while placed < args.pods and attempts < args.pods * 3:
        attempts += 1
        _, containers, plan = rng.choices(shapes, [w for w, _, _ in shapes])[0]
        chosen = rng.choice(names)
        decision = decide_node(cache.nodes[chosen], plan)
        if not decision.fits:
            continue
        record = decision_record(
            decision, plan, namespace="team", vendors=DEFAULT_VENDORS, now_unix=0
        )
        obj = pod(f"run-{placed}", containers, record.annotations)
        obj["metadata"]["labels"].update(record.labels)
        obj["spec"]["nodeName"] = chosen
        slim_pod(obj, DEFAULT_VENDORS)
        if stores is not None:
            stores[1].upsert(obj)
        cache.upsert_pod(obj)
        placed += 1
    return placed


async def serve(args: argparse.Namespace) -> None:
    configure_logging("json", "warning")
    started = time.perf_counter()
    cache = SchedulerCache(DEFAULT_VENDORS)
    nodes, pods = Store(), Store()
    planner = Planner(DEFAULT_VENDORS)
    placed = fill_running(cache, planner, args, (nodes, pods))
    built = time.perf_counter() - started
    cache.warm()  # what the service does once its watches have listed
    gc.collect()
    gc.freeze()
    filters = FilterService(
        cache=cache,
        planner=planner,
        events=SchedulerEvents(None),
        metrics=SchedulerMetrics(),
    )
    app = build_app(ExtenderState(filters=filters, binder=None, metrics=SchedulerMetrics()))
    runner, port = await start_site(app, "127.0.0.1:0")
    busy = sum(d.used > 0 for n in cache.nodes.values() for d in n.devices)
    print(
        json.dumps({"port": port, "placed": placed, "built_s": built, "busy_gpus": busy}),
        flush=True,
    )
    pauses = {0: 0.0, 1: 0.0, 2: 0.0}
    counts = {0: 0, 1: 0, 2: 0}
    began = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        generation = info["generation"]
        counts[generation] += 1
        pauses[generation] = max(pauses[generation], time.perf_counter() - began[0])

    gc.callbacks.append(collected)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()
    print(
        json.dumps(
            {"gc_counts": counts, "gc_max_pause_ms": {g: p * 1e3 for g, p in pauses.items()}}
        ),
        flush=True,
    )


def timings(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {p50 * 1e3:7.2f} ms   p99 {p99 * 1e3:7.2f} ms   (n={len(ordered)})"


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


NO_FIT_COLD = "first filter, no node fits (cold)"
NO_FIT = "no node fits (5,000 reasons)"


def _filter_body(obj: JsonObject, node_names: list[str]) -> bytes:
    return json.dumps({"Pod": obj, "Nodes": None, "NodeNames": node_names}).encode()


async def drive(
    ports: Mapping[int, int], node_names: list[str], repeat: int, *, mixed: bool = False
) -> tuple[dict[int, dict[str, list[float]]], dict[int, dict[str, int]]]:
    """Filters against every server, interleaved request by request, so that whatever else
    runs on this machine slows every cluster size alike.  Also returns, per size, how many
    nodes the last NVIDIA and vendor pod's ``FailedNodes`` named."""
    results: dict[int, dict[str, list[float]]] = {size: {} for size in ports}
    refused: dict[int, dict[str, int]] = {size: {} for size in ports}
    async with aiohttp.ClientSession() as http:

        async def one(size: int, label: str, body: bytes) -> dict[str, Any]:
            start = time.perf_counter()
            async with http.post(f"http://127.0.0.1:{ports[size]}/filter", data=body) as response:
                reply: dict[str, Any] = await response.json()
            results[size].setdefault(label, []).append(time.perf_counter() - start)
            return reply

        hopeless = _filter_body(pod("hopeless", [container(8, GPU_MEM + 1, 100)]), node_names)
        for attempt in range(6):
            # The first builds every reason text for this plan; later ones reuse them.
            for size in ports:
                reply = await one(size, NO_FIT_COLD if attempt == 0 else NO_FIT, hopeless)
                named = {**reply["FailedNodes"], **(reply["FailedAndUnresolvableNodes"] or {})}
                assert len(named) == len(node_names)
        shapes = {**FILTER_SHAPES, **(VENDOR_SHAPES if mixed else {})}
        # Shape by shape within each round, so that noise and collections hit every shape alike.
        for i in range(repeat):
            for label, (containers, annotations) in shapes.items():
                for size in ports:
                    obj = pod(f"bench-{i}-{uuid.uuid4().hex[:8]}", containers, annotations)
                    reply = await one(size, label, _filter_body(obj, node_names))
                    if reply["Error"] or not reply["NodeNames"]:
                        raise SystemExit(f"filter failed: {reply['Error']}")
                    kind = "vendor" if label.startswith("vendor:") else "nvidia"
                    refused[size][kind] = len(reply["FailedNodes"]) + len(
                        reply["FailedAndUnresolvableNodes"] or {}
                    )
    return results, refused


def server_info(child: subprocess.Popen[str]) -> dict[str, Any]:
    """The first line a ``--serve`` child prints (its port, what it holds); exits if it died."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        raise SystemExit("the server process died before serving")
    info: dict[str, Any] = json.loads(line)
    return info


def bench_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the cluster's size (``--nodes``, ``--gpus``, ``--pods``: running pods, one
    size per server, comma-separated) and the hidden ``--serve`` of the server processes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", default="10000,100000", help="running pods, one size per run")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    return parser


def served(
    args: argparse.Namespace, serve: Callable[[argparse.Namespace], Coroutine[Any, Any, None]]
) -> bool:
    """With ``--serve``: run ``serve`` on the service's own event loop, and say so."""
    if not args.serve:
        return False
    args.pods = int(args.pods)
    loop.run(serve(args))
    return True


def start_server(args: argparse.Namespace, pods: int) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--serve", "--nodes", str(args.nodes)]
    command += ["--gpus", str(args.gpus), "--pods", str(pods)]
    if args.mixed:
        command.append("--mixed")
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def gc_summary(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        return "n/a"
    info = json.loads(line)
    return ", ".join(
        f"gen{g}: {info['gc_counts'][g]} (max {pause:.1f} ms)"
        for g, pause in info["gc_max_pause_ms"].items()
    )


def shapes_only(results: Mapping[str, list[float]], *, vendor: bool = False) -> list[float]:
    """The filters of pod shapes (NVIDIA ones, or with ``vendor`` the non-NVIDIA ones)."""
    return [
        s
        for label, samples in results.items()
        if "no node" not in label and label.startswith("vendor:") == vendor
        for s in samples
    ]


def main() -> None:
    parser = bench_parser(__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=150, help="filters per pod shape")
    parser.add_argument(
        "--mixed", action="store_true", help="every fifth node a Cambricon, Hygon or MThreads node"
    )
    args = parser.parse_args()
    if served(args, serve):
        return
    sizes = [int(p) for p in args.pods.split(",")]
    children = {size: start_server(args, size) for size in sizes}
    try:
        ports: dict[int, int] = {}
        infos: dict[int, dict[str, Any]] = {}
        for size, child in children.items():
            infos[size] = server_info(child)
            ports[size] = infos[size]["port"]
        names = [f"node-{n:05d}" for n in range(args.nodes)]
        results, refused = asyncio.run(drive(ports, names, args.repeat, mixed=args.mixed))
        rss = {size: vm_rss_mib(child.pid) for size, child in children.items()}
    finally:
        for child in children.values():
            child.send_signal(signal.SIGTERM)
        for child in children.values():
            child.wait(timeout=30)
    for size in sizes:
        info = infos[size]
        print(
            f"\n{args.nodes:,} nodes × {args.gpus} GPUs, {info['placed']:,} running pods "
            f"(caches fed in {info['built_s']:.1f} s; GPUs in use {info['busy_gpus']:,})"
        )
        for label, samples in results[size].items():
            print(f"  {label:40s} {timings(samples)}")
        print(f"  {'all NVIDIA shapes':40s} {timings(shapes_only(results[size]))}")
        if args.mixed:
            vendor = shapes_only(results[size], vendor=True)
            nvidia = shapes_only(results[size])
            p50_ratio = statistics.median(vendor) / statistics.median(nvidia)
            print(f"  {'all vendor shapes':40s} {timings(vendor)}")
            print(
                f"  vendor / NVIDIA: p50 {p50_ratio:.2f}, p99 {p99(vendor) / p99(nvidia):.2f}"
                f"   (vendor nodes {args.nodes // 5:,}; FailedNodes per vendor pod "
                f"{refused[size]['vendor']:,}, per NVIDIA pod {refused[size]['nvidia']:,})"
            )
        print(f"  scheduler RSS: {rss[size]:.0f} MiB")
        print(f"  server GC collections while serving: {gc_summary(children[size])}")
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        ratio = p99(shapes_only(results[large])) / p99(shapes_only(results[small]))
        print(
            f"\np99 at {large:,} pods / p99 at {small:,} pods: {ratio:.2f}"
            f"   (RSS {rss[small]:.0f} → {rss[large]:.0f} MiB)"
        )


if __name__ == "__main__":
    main()
