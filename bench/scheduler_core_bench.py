"""Scheduler decision core: one filter over 5,000 nodes × 8 GPUs carrying 100,000 pods.

Prints figures only (no assertions).  Run from the repository root:

    uv run --frozen python bench/scheduler_core_bench.py [--nodes 5000] [--pods 100000]

What is measured (wall time of the pure core; the HTTP shell is not included):

* building the cluster: registry → ``NodeUsage`` and applying every running pod's usage;
* ``apply_usage`` + ``remove_usage`` per pod event (what the cache does on a watch event);
* the first filter after every node changed (each node's open-device view is rebuilt once);
* ``select_node`` cold (no memo) for several pod shapes — every candidate evaluated;
* ``select_node`` warm — a stream of filters with a ``SelectMemo``, each decision applied to
  its node before the next filter (the steady state of a deployment scaling up);
* the cost of materialising every ``FailedNodes`` reason when nothing fits;
* ``decide_node`` alone per node (the full per-node decision).
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from hami_protocol.node.registry import DeviceInfo
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import pod_device_requests
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.core import (
    NodeUsage,
    PodPlan,
    QuotaLimits,
    SelectMemo,
    VendorQuota,
    apply_usage,
    build_node_usage,
    decide_node,
    decision_usage,
    pod_plan,
    remove_usage,
    select_node,
)

GPU_MEM = 81920


def container(nums: int, mem: int | None = None, cores: int | None = None) -> dict[str, Any]:
    limits: dict[str, str] = {"nvidia.com/gpu": str(nums)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return {"name": "c", "resources": {"limits": limits}}


def plan(
    containers: list[dict[str, Any]],
    annotations: Mapping[str, str] | None = None,
    quota: Mapping[str, VendorQuota] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> PodPlan:
    named = [{**c, "name": f"c{i}"} for i, c in enumerate(containers)]
    inits = [{**c, "name": f"i{i}"} for i, c in enumerate(init or [])]
    spec = {"initContainers": inits, "containers": named}
    requests = pod_device_requests({"spec": spec}, vendors=DEFAULT_VENDORS)
    return pod_plan(requests, parse_pod_policy(annotations or {}), quota=quota)


RUNNING_SHAPES = [
    (0.40, plan([container(1, 8000, 20)])),
    (0.30, plan([container(1, 16000, 30)])),
    (0.20, plan([container(1, 4000, 10)])),
    (0.10, plan([container(2, 20000, 50)])),
]


def registry(node: int, gpus: int) -> dict[str, list[DeviceInfo]]:
    return {
        "NVIDIA": [
            DeviceInfo(
                id=f"GPU-{node:05d}-{i}",
                index=i,
                count=10,
                devmem=GPU_MEM,
                devcore=100,
                type="NVIDIA-A100-SXM4-80GB",
                numa=i // (gpus // 2),
                health=True,
            )
            for i in range(gpus)
        ]
    }


def build_cluster(nodes: int, gpus: int, pods: int, rng: random.Random) -> dict[str, NodeUsage]:
    cluster = {
        f"node-{n:05d}": build_node_usage(f"node-{n:05d}", registry(n, gpus)) for n in range(nodes)
    }
    names = list(cluster)
    weights = [w for w, _ in RUNNING_SHAPES]
    shapes = [p for _, p in RUNNING_SHAPES]
    placed = attempts = 0
    while placed < pods and attempts < pods * 3:
        attempts += 1
        shape = rng.choices(shapes, weights)[0]
        name = rng.choice(names)
        decision = decide_node(cluster[name], shape)
        if decision.fits:
            cluster[name] = apply_usage(cluster[name], decision_usage(decision, shape))
            placed += 1
    print(f"  running pods placed: {placed:,} (attempts {attempts:,})")
    return cluster


def timings(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {p50 * 1e3:8.2f} ms   p99 {p99 * 1e3:8.2f} ms   (n={len(ordered)})"


def measure(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--stream", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(7)

    print(f"cluster: {args.nodes:,} nodes × {args.gpus} GPUs, {args.pods:,} running pods")
    start = time.perf_counter()
    cluster = build_cluster(args.nodes, args.gpus, args.pods, rng)
    print(f"  built in {time.perf_counter() - start:.1f} s")
    busy = sum(d.used > 0 for n in cluster.values() for d in n.devices)
    print(f"  GPUs in use: {busy:,} of {args.nodes * args.gpus:,}")

    name = next(iter(cluster))
    one = decision_usage(decide_node(cluster[name], RUNNING_SHAPES[0][1]), RUNNING_SHAPES[0][1])

    def churn() -> None:
        cluster[name] = remove_usage(apply_usage(cluster[name], one), one)

    per_event = measure(churn, 2000)
    print(
        f"\npod event (apply + remove on one node): {statistics.median(per_event) * 1e6:.1f} µs p50"
    )

    filters = {
        "1 GPU 8 GiB 20 cores": plan([container(1, 8192, 20)]),
        "1 GPU whole card": plan([container(1)]),
        "2 GPUs 20 GiB 50 cores, spread": plan(
            [container(2, 20000, 50)], {"hami.io/node-scheduler-policy": "spread"}
        ),
        "4 GPUs topology-aware": plan(
            [container(4, 8000, 10)], {"hami.io/gpu-scheduler-policy": "topology-aware"}
        ),
        "2 GPUs numa-bind": plan([container(2, 8000, 10)], {"nvidia.com/numa-bind": "true"}),
        "2 app containers": plan([container(1, 4000, 10), container(1, 4000, 10)]),
        "1 GPU, quota exhausted": plan(
            [container(1, 8192, 20)],
            quota={"NVIDIA": VendorQuota(QuotaLimits(memory=100_000), used_memory=95_000)},
        ),
        "whole GPU under a memory quota": plan(
            [container(1)],
            quota={"NVIDIA": VendorQuota(QuotaLimits(memory=1_000_000), used_memory=95_000)},
        ),
        "init + app under a quota (full path)": plan(
            [container(1, 4000, 10)],
            quota={"NVIDIA": VendorQuota(QuotaLimits(memory=9_000), used_memory=1_000)},
            init=[container(1, 8000, 10)],
        ),
    }
    print("\nfirst filter after every node changed (each open-device view rebuilt once)")
    for label in ("default gc", "after gc.freeze()"):
        if label != "default gc":
            gc.collect()
            gc.freeze()  # what the service does once its caches are synced
        fresh = {key: NodeUsage(n.layout, n.devices) for key, n in cluster.items()}
        start = time.perf_counter()
        select_node(filters["1 GPU 8 GiB 20 cores"], fresh)
        print(f"  {label:36s} {(time.perf_counter() - start) * 1e3:8.1f} ms")
        del fresh

    print("\nselect_node, cold (no memo: every candidate evaluated)")
    for label, pod in filters.items():
        fits = len(select_node(pod, cluster).fitting)
        samples = measure(functools.partial(select_node, pod, cluster), args.repeat)
        print(f"  {label:36s} {timings(samples)}   fitting nodes {fits:,}")

    print("\nselect_node, warm (SelectMemo; each decision applied before the next filter)")
    for label in (
        "1 GPU 8 GiB 20 cores",
        "2 GPUs numa-bind",
        "init + app under a quota (full path)",
    ):
        pod = filters[label]
        memo = SelectMemo()
        select_node(pod, cluster, memo=memo)
        samples = []
        for _ in range(args.stream):
            start = time.perf_counter()
            selection = select_node(pod, cluster, memo=memo)
            samples.append(time.perf_counter() - start)
            if selection.node is not None and selection.decision is not None:
                chosen = selection.node
                cluster[chosen] = apply_usage(
                    cluster[chosen], decision_usage(selection.decision, pod)
                )
        print(f"  {label:36s} {timings(samples)}")

    hopeless = plan([container(8, 80000, 100)])
    selection = select_node(hopeless, cluster)
    start = time.perf_counter()
    reasons = dict(selection.failed)
    elapsed = time.perf_counter() - start
    sample = next(iter(reasons.values()))
    none_fit = timings(measure(lambda: select_node(hopeless, cluster), 5))
    print(f"\nno node fits (8 × 80 GB exclusive): select {none_fit}")
    print(f"  materialising {len(reasons):,} FailedNodes reasons: {elapsed * 1e3:.1f} ms")
    print(f"  e.g. {sample!r}")

    nodes = list(cluster.values())[:2000]
    pod = filters["1 GPU 8 GiB 20 cores"]
    start = time.perf_counter()
    for n in nodes:
        decide_node(n, pod)
    per_node = (time.perf_counter() - start) / len(nodes)
    print(f"\ndecide_node alone: {per_node * 1e6:.1f} µs per node ({args.gpus} GPUs)")


if __name__ == "__main__":
    main()
