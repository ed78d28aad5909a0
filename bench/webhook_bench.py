"""Admission webhook latency: reviews over HTTPS against ``python -m hami_webhook``.

Starts the service as a real process with a generated certificate (quota watches off, so no API
server is needed), then measures:

1. the pure decision (``admit_pod`` + reply encoding) in this process, per review;
2. HTTPS round trips one at a time (concurrency 1);
3. HTTPS round trips with 200 reviews in flight at all times (the figure the target is about:
   p99 per review at 200 concurrent requests, target 5 ms).

The review mix is what a cluster sends: a whole-GPU pod (mutated), a shared-GPU pod with memory
and cores (mutated), a pod without GPUs (allowed untouched) and a pinned GPU pod (denied).
Client and server share this machine's cores, so the concurrent figures include the client's
own CPU time.  Prints figures only; asserts nothing.

    uv run --frozen python bench/webhook_bench.py [--seconds 10] [--concurrency 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from hami_kube.runtime.logs import configure_logging
from hami_kubesim.certs import client_ssl_context, generate_ca
from hami_webhook.http import WebhookState, answer_review
from hami_webhook.metrics import WebhookMetrics
from hami_webhook.mutate import MutationRules


def pod(name: str, limits: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    main: dict[str, Any] = {
        "name": "main",
        "image": "registry.example.com/train:latest",
        "command": ["python", "train.py"],
        "env": [{"name": "EPOCHS", "value": "10"}],
        "resources": {"limits": {"cpu": "2", "memory": "4Gi", **(limits or {})}},
    }
    side = {"name": "sidecar", "image": "registry.example.com/log:latest"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "labels": {"app": name}},
        "spec": {"containers": [main, side], "restartPolicy": "Never", **spec},
    }


MIX = [
    pod("whole", {"nvidia.com/gpu": "1"}),
    pod(
        "shared", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"}
    ),
    pod("cpu-only", None),
    pod("pinned", {"nvidia.com/gpu": "1"}, nodeName="node-1"),
]


def review_body(obj: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "team",
                "name": obj["metadata"]["name"],
                "operation": "CREATE",
                "userInfo": {"username": "bench"},
                "object": obj,
                "oldObject": None,
                "dryRun": False,
            },
        }
    ).encode()


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return (
        f"n={len(ordered):>6}  p50={at(0.50):7.3f} ms  p90={at(0.90):7.3f} ms  "
        f"p99={at(0.99):7.3f} ms  max={ordered[-1] * 1000:7.3f} ms  "
        f"mean={statistics.fmean(ordered) * 1000:7.3f} ms"
    )


def bench_decision(rounds: int) -> list[float]:
    state = WebhookState(rules=MutationRules(), metrics=WebhookMetrics())
    bodies = [review_body(obj) for obj in MIX]
    samples = []
    for index in range(rounds):
        body = bodies[index % len(bodies)]
        started = time.perf_counter()
        answer_review(body, state)
        samples.append(time.perf_counter() - started)
    return samples


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(url: str, context: Any, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"webhook exited with {process.returncode}")
            try:
                async with http.get(url + "/readyz", ssl=context) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("webhook did not become ready within 30 s")


async def load(
    url: str, context: Any, *, concurrency: int, seconds: float
) -> tuple[list[float], int, float]:
    """``concurrency`` workers posting reviews back to back for ``seconds``."""
    bodies = [review_body(obj) for obj in MIX]
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    samples: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=connector) as http:
        # Open every connection (TLS handshake) before measuring, as an API server keeps them.
        async def warm() -> None:
            async with http.post(url + "/webhook", data=bodies[0]) as response:
                await response.read()

        await asyncio.gather(*(warm() for _ in range(concurrency)))
        stop_at = time.perf_counter() + seconds

        async def worker(offset: int) -> None:
            nonlocal errors
            index = offset
            while time.perf_counter() < stop_at:
                body = bodies[index % len(bodies)]
                index += 1
                started = time.perf_counter()
                async with http.post(
                    url + "/webhook",
                    data=body,
                    headers={"Content-Type": "application/json"},
                    params={"timeout": "10s"},
                ) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
                samples.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - began
    return samples, errors, elapsed


async def server_histogram(metrics_url: str) -> str:
    """Handler time as the service's own histogram saw it (all outcomes together)."""
    async with aiohttp.ClientSession() as http, http.get(metrics_url) as response:
        text = await response.text()
    name = "hami_webhook_admission_duration_seconds"
    count = total = 0.0
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        value = float(line.rsplit(" ", 1)[1]) if line.startswith(name) else 0.0
        if line.startswith(f"{name}_count"):
            count += value
        elif line.startswith(f"{name}_sum"):
            total += value
        elif line.startswith(f"{name}_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            key = float("inf") if bound == "+Inf" else float(bound)
            buckets[key] = buckets.get(key, 0.0) + value
    mean = total / count * 1000 if count else 0.0
    p99 = next((bound for bound, seen in sorted(buckets.items()) if seen >= 0.99 * count), 0.0)
    return (
        f"{int(count)} reviews, mean handler time {mean:.3f} ms, "
        f"p99 handler time <= {p99 * 1000:g} ms (histogram bucket)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--decisions", type=int, default=20_000)
    args = parser.parse_args()

    configure_logging("json", "warning")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    decision = bench_decision(args.decisions)
    print(f"decision in-process (admit_pod + encode):        {percentiles(decision)}")

    cert = generate_ca("bench-ca").issue(["127.0.0.1"])
    context = client_ssl_context(cert.ca_pem)
    port, metrics_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="hami-webhook-bench-") as tmp:
        files = cert.write(Path(tmp))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hami_webhook",
            f"--http_bind=127.0.0.1:{port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--cert_file={files.cert}",
            f"--key_file={files.key}",
            "--enable-quota=false",
            "--log-level=warning",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        url = f"https://127.0.0.1:{port}"
        try:
            await wait_ready(url, context, process)
            serial, errors, elapsed = await load(url, context, concurrency=1, seconds=3.0)
            print(
                f"HTTPS, concurrency 1:                            {percentiles(serial)}  "
                f"({len(serial) / elapsed:.0f} reviews/s, {errors} errors)"
            )
            samples, errors, elapsed = await load(
                url, context, concurrency=args.concurrency, seconds=args.seconds
            )
            print(
                f"HTTPS, concurrency {args.concurrency}:                          "
                f"{percentiles(samples)}  ({len(samples) / elapsed:.0f} reviews/s, {errors} errors)"
            )
            p99 = sorted(samples)[int(0.99 * len(samples))] * 1000
            verdict = "meets" if p99 <= 5.0 else "misses"
            print(f"p99 per review at {args.concurrency} concurrent: {p99:.3f} ms ({verdict} 5 ms)")
            histogram = await server_histogram(f"http://127.0.0.1:{metrics_port}/metrics")
            print(f"server side during the run: {histogram}")
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
