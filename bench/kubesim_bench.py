"""Benchmark of the emulated API server at cluster scale: 5,000 nodes and 50,000 pods.

Prints create/patch throughput (in process and over HTTP), list latency (full and per node with
``fieldSelector=spec.nodeName``), watch fan-out (events delivered per second) and memory.  Prints
figures only; asserts nothing.

    uv run --frozen python bench/kubesim_bench.py [--nodes 5000] [--pods 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from hami_kubesim.apiserver.server import ApiServer, LocalWatch
from hami_kubesim.testing import running_apiserver


def rss_mib() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def node(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"node-{i:05d}", "labels": {"gpu": "true", "zone": f"z{i % 4}"}},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "63", "memory": "500Gi", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(i: int, namespace: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"pod-{i:06d}",
            "namespace": namespace,
            "labels": {"app": f"app-{i % 50}"},
            "annotations": {"hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,3000,30:;"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1.0",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "cpu": "2"},
                        "requests": {"cpu": "1", "memory": "2Gi"},
                    },
                }
            ]
        },
    }


def report(label: str, count: int, seconds: float, unit: str = "ops") -> None:
    rate = count / seconds if seconds > 0 else float("inf")
    print(f"  {label:<52} {count:>8} {unit} in {seconds:7.3f}s  -> {rate:>10,.0f} {unit}/s")


async def timed(coro_factory: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = await coro_factory()
    return result, time.perf_counter() - start


async def in_process(server: ApiServer, nodes: int, pods: int, namespaces: list[str]) -> None:
    print("in process (ApiServer methods: defaults, validation, copies in and out)")
    for ns in namespaces:
        if server.try_get("namespaces", ns) is None:
            await server.create("namespaces", {"metadata": {"name": ns}})
    start = time.perf_counter()
    for i in range(nodes):
        await server.create("nodes", node(i))
    report("create nodes", nodes, time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(pods):
        await server.create("pods", pod(i, namespaces[i % len(namespaces)]))
        if i % 2000 == 0:
            await asyncio.sleep(0)
    report("create pods", pods, time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(pods):
        await server.bind(namespaces[i % len(namespaces)], f"pod-{i:06d}", f"node-{i % nodes:05d}")
    report("bind pods (pods/binding)", pods, time.perf_counter() - start)
    count = min(pods, 20_000)
    start = time.perf_counter()
    for i in range(count):
        await server.patch(
            "pods",
            f"pod-{i:06d}",
            {
                "metadata": {
                    "annotations": {"hami.io/bind-phase": "allocating", "hami.io/bind-time": str(i)}
                }
            },
            namespace=namespaces[i % len(namespaces)],
        )
    report("strategic-merge patch pod annotations", count, time.perf_counter() - start)


async def over_http(url: str, server: ApiServer, nodes: int, sample: int) -> None:
    print("over HTTP (aiohttp client, raw JSON)")
    async with aiohttp.ClientSession(base_url=url) as http:
        sem = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            async with (
                sem,
                http.post(
                    "/api/v1/namespaces/default/pods", json=pod(900_000 + i, "default")
                ) as resp,
            ):
                await resp.read()

        _, took = await timed(lambda: asyncio.gather(*(create(i) for i in range(sample))))
        report("create pods (16 concurrent)", sample, took)

        async def patch(i: int) -> None:
            body = {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}}
            headers = {"Content-Type": "application/strategic-merge-patch+json"}
            async with (
                sem,
                http.patch(
                    f"/api/v1/namespaces/default/pods/pod-{900_000 + i:06d}",
                    json=body,
                    headers=headers,
                ) as resp,
            ):
                await resp.read()

        _, took = await timed(lambda: asyncio.gather(*(patch(i) for i in range(sample))))
        report("patch pods (16 concurrent)", sample, took)

        for label, path in (("list all pods", "/api/v1/pods"), ("list all nodes", "/api/v1/nodes")):
            times, size, items = [], 0, 0
            for _ in range(3):
                start = time.perf_counter()
                async with http.get(path) as resp:
                    raw = await resp.read()
                times.append(time.perf_counter() - start)
                size = len(raw)
            items = len(json.loads(raw)["items"])
            print(
                f"  {label:<52} {items:>8} items, {size / 2**20:7.1f} MiB, "
                f"best {min(times) * 1000:8.1f} ms (server + transfer)"
            )
        in_proc = []
        for _ in range(3):
            start = time.perf_counter()
            page = server.store.select(server.resource("pods"))
            body = b",".join(e.item_json() for e in page.entries)
            in_proc.append(time.perf_counter() - start)
        print(
            f"  {'list all pods, server side only (cached JSON)':<52} {len(page.entries):>8} "
            f"items, {len(body) / 2**20:7.1f} MiB, best {min(in_proc) * 1000:8.1f} ms"
        )
        samples = 200
        start = time.perf_counter()
        for i in range(samples):
            async with http.get(
                "/api/v1/pods",
                params={"fieldSelector": f"spec.nodeName=node-{(i * 37) % nodes:05d}"},
            ) as resp:
                await resp.read()
        took = time.perf_counter() - start
        print(
            f"  {'list pods fieldSelector=spec.nodeName (per node)':<52} {samples:>8} lists, "
            f"mean {took / samples * 1000:8.2f} ms"
        )
        start = time.perf_counter()
        for i in range(20):
            async with http.get("/api/v1/pods", params={"labelSelector": f"app=app-{i}"}) as resp:
                await resp.read()
        took = time.perf_counter() - start
        print(
            f"  {'list pods labelSelector=app=... (scan)':<52} {20:>8} lists, "
            f"mean {took / 20 * 1000:8.2f} ms"
        )


async def fan_out_in_process(server: ApiServer, watchers: int, events: int) -> None:
    start_rv = str(server.resource_version)
    streams = [server.watch("configmaps", resource_version=start_rv) for _ in range(watchers)]

    async def consume(stream: LocalWatch) -> int:
        got = 0
        async for _ in stream:
            got += 1
            if got == events:
                break
        await stream.aclose()
        return got

    consumers = [asyncio.create_task(consume(s)) for s in streams]
    start = time.perf_counter()
    for i in range(events):
        await server.create(
            "configmaps", {"metadata": {"name": f"fan-{watchers}-{i}", "namespace": "default"}}
        )
        if i % 100 == 0:
            await asyncio.sleep(0)  # let consumers run, as a busy server would
    counts = await asyncio.gather(*consumers)
    received = sum(counts)
    took = time.perf_counter() - start
    report(f"in-process fan-out: {watchers} watchers x {events} events", received, took, "events")


async def fan_out_http(url: str, server: ApiServer, watchers: int, events: int) -> None:
    start_rv = str(server.resource_version)
    async with aiohttp.ClientSession(base_url=url) as http:
        responses = [
            await http.get(
                "/api/v1/namespaces/kube-public/configmaps",
                params={"watch": "1", "resourceVersion": start_rv},
            )
            for _ in range(watchers)
        ]
        while True:  # the streams register once the server has handled the requests
            if server.stats()["watchers"]["configmaps"] >= watchers:
                break
            await asyncio.sleep(0.01)

        async def drain(resp: aiohttp.ClientResponse) -> int:
            got = 0
            while got < events:
                if not await resp.content.readline():
                    break
                got += 1
            resp.close()
            return got

        start = time.perf_counter()
        readers = [asyncio.create_task(drain(r)) for r in responses]
        for i in range(events):
            await server.create(
                "configmaps", {"metadata": {"name": f"http-fan-{i}", "namespace": "kube-public"}}
            )
            if i % 50 == 0:
                await asyncio.sleep(0)
        counts = await asyncio.gather(*readers)
        took = time.perf_counter() - start
    report(f"HTTP fan-out: {watchers} watch streams x {events} events", sum(counts), took, "events")


async def memory_sample(count: int) -> None:
    tracemalloc.start()
    server = ApiServer()
    base = tracemalloc.get_traced_memory()[0]

    for i in range(count):
        await server.create("pods", pod(i, "default"))
    used = tracemalloc.get_traced_memory()[0] - base
    for entry in server.store.select(server.resource("pods")).entries:
        entry.item_json()
    with_json = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    print(
        f"  tracemalloc, {count} pods: {used / count:,.0f} B/pod stored, "
        f"{with_json / count:,.0f} B/pod with cached JSON"
    )


async def main(args: argparse.Namespace) -> None:
    namespaces = [f"team-{i}" for i in range(10)]
    rss0 = rss_mib()
    async with running_apiserver(history=10_000) as sim:
        server = sim.server
        await in_process(server, args.nodes, args.pods, namespaces)
        gc.collect()
        print(
            f"  RSS after {args.nodes} nodes + {args.pods} pods: {rss_mib():,.0f} MiB "
            f"(start {rss0:,.0f} MiB)"
        )
        await over_http(sim.url, server, args.nodes, args.http_sample)
        print(f"  RSS after HTTP phase (JSON cached for listed objects): {rss_mib():,.0f} MiB")
        print("watch fan-out")
        await fan_out_in_process(server, watchers=1000, events=100)
        await fan_out_in_process(server, watchers=10, events=5000)
        await fan_out_http(sim.url, server, watchers=100, events=200)
        pinned = 2000
        streams = [
            server.watch(
                "pods",
                field_selector=f"spec.nodeName=node-{i:05d}",
                resource_version=str(server.resource_version),
            )
            for i in range(pinned)
        ]
        start = time.perf_counter()
        count = 5000
        for i in range(count):
            await server.patch(
                "pods",
                f"pod-{i:06d}",
                {"metadata": {"labels": {"touched": "1"}}},
                namespace=namespaces[i % len(namespaces)],
            )
        took = time.perf_counter() - start
        report(f"pod patches with {pinned} node-pinned watchers open", count, took)
        for stream in streams:
            await stream.aclose()
    print("memory")
    await memory_sample(args.memory_sample)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--http-sample", type=int, default=2000)
    parser.add_argument("--memory-sample", type=int, default=5000)
    asyncio.run(main(parser.parse_args()))
