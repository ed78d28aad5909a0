"""Admission webhook latency: reviews over HTTPS against ``python -m hami_webhook``.

Starts the service as a real process with a generated certificate (quota watches off, so no API
server is needed), then measures:

1. the pure decision (``admit_pod`` + reply encoding) in this process, per review;
2. HTTPS round trips one at a time (concurrency 1);
3. closed loop: 200 reviews in flight at all times, from this process and, when ``wrk`` is on
   PATH, from wrk (a C client that leaves the server more of the two cores).  With N requests
   always in flight, Little's law fixes the mean latency at N / throughput, so this part measures
   throughput; a p99 of 5 ms at 200 in flight would need more than 40,000 reviews/s;
4. open loop: 200 kept-alive connections, reviews arriving at random (Poisson) times at a fixed
   rate, each timed from its arrival, so time spent waiting for a free connection counts (no
   coordinated omission).  Swept over rates; prints p99 per rate and the highest rate whose p99
   stays within 5 ms.

The review mix is what a cluster sends: a whole-GPU pod (mutated), a shared-GPU pod with memory
and cores (mutated), a pod without GPUs (allowed untouched) and a pinned GPU pod (denied).
Client and server share this machine's cores, so every HTTPS figure includes the client's own
CPU time.  Prints figures only; asserts nothing.

    uv run --frozen python bench/webhook_bench.py [--seconds 10] [--concurrency 200]
        [--rates 500,1000,2000,3000,4000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from hami_kubesim.certs import TlsFiles, client_ssl_context, generate_ca
from hami_kubesim.stack.system.ports import free_port
from hami_runtime import loop
from hami_runtime.logs import configure_logging
from hami_webhook.admission.http import WebhookState, answer_review
from hami_webhook.metrics import WebhookMetrics
from hami_webhook.mutation.rules import MutationRules


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


async def open_connections(http: aiohttp.ClientSession, url: str, body: bytes, count: int) -> None:
    """Open ``count`` connections (TLS handshakes included) before measuring, as an API server
    keeps its connections to a webhook."""

    async def warm() -> None:
        async with http.post(url + "/webhook", data=body) as response:
            await response.read()

    await asyncio.gather(*(warm() for _ in range(count)))


async def load(
    url: str, context: Any, *, concurrency: int, seconds: float
) -> tuple[list[float], int, float]:
    """``concurrency`` workers posting reviews back to back for ``seconds``."""
    bodies = [review_body(obj) for obj in MIX]
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    samples: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=connector) as http:
        await open_connections(http, url, bodies[0], concurrency)
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


async def open_loop(
    url: str, context: Any, *, connections: int, rate: float, seconds: float, seed: int = 7
) -> tuple[list[float], int, float]:
    """Poisson arrivals at ``rate`` per second over ``connections`` kept-alive connections.

    Each review is timed from its scheduled arrival, so a review that waits for a free
    connection, or for this client's own event loop, is charged for the wait.
    """
    bodies = [review_body(obj) for obj in MIX]
    connector = aiohttp.TCPConnector(limit=connections, ssl=context)
    samples: list[float] = []
    errors = 0
    rng = random.Random(seed)
    async with aiohttp.ClientSession(connector=connector) as http:
        await open_connections(http, url, bodies[0], connections)

        async def one(body: bytes, arrival: float) -> None:
            nonlocal errors
            async with http.post(
                url + "/webhook", data=body, headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
            samples.append(time.perf_counter() - arrival)

        tasks: set[asyncio.Task[None]] = set()
        began = time.perf_counter()
        arrival, index = began, 0
        while arrival < began + seconds:
            delay = arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(bodies[index % len(bodies)], arrival))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            index += 1
            arrival += rng.expovariate(rate)
        if tasks:
            await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - began
    return samples, errors, elapsed


_WRK_SCRIPT = """
local bodies = {%s}
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format("POST", "/webhook", {["Content-Type"] = "application/json"},
                    bodies[(counter %% #bodies) + 1])
end
"""


async def run_wrk(url: str, *, connections: int, seconds: float, tmp: Path) -> str | None:
    """wrk's closed-loop figures (one client thread), or ``None`` when wrk is not installed."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    bodies = ", ".join(json.dumps(review_body(obj).decode()) for obj in MIX)
    script = tmp / "reviews.lua"
    script.write_text(_WRK_SCRIPT % bodies)
    process = await asyncio.create_subprocess_exec(
        wrk,
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "-s",
        str(script),
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    text = out.decode()
    figures = {
        name: match.group(1)
        for name, pattern in (
            ("p50", r"^\s*50%\s+(\S+)"),
            ("p90", r"^\s*90%\s+(\S+)"),
            ("p99", r"^\s*99%\s+(\S+)"),
            ("rate", r"^Requests/sec:\s+(\S+)"),
            ("errors", r"^\s*Non-2xx or 3xx responses:\s+(\d+)"),
        )
        if (match := re.search(pattern, text, re.MULTILINE))
    }
    if "rate" not in figures:
        return f"wrk failed: {text.strip()[:300]}"
    return (
        f"p50={figures.get('p50')}  p90={figures.get('p90')}  p99={figures.get('p99')}  "
        f"({float(figures['rate']):.0f} reviews/s, {figures.get('errors', '0')} non-200)"
    )


# The floor of the HTTP stack itself: the same aiohttp + TLS serving path on the same event loop
# with a handler that only reads the body and answers a constant.
_EMPTY_SERVER = """
import asyncio, ssl, sys
from aiohttp import web
from hami_runtime import loop

async def review(request):
    await request.read()
    return web.Response(body=b'{"kind":"AdmissionReview"}', content_type="application/json")

async def main():
    app = web.Application()
    app.router.add_post("/webhook", review)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(sys.argv[2], sys.argv[3])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", int(sys.argv[1]), ssl_context=context, reuse_port=True)
    await site.start()
    await asyncio.Event().wait()

loop.run(main())
"""


async def reference_floor(
    *, processes: int, connections: int, seconds: float, files: TlsFiles, context: Any, tmp: Path
) -> str | None:
    """wrk against ``processes`` empty-handler servers sharing one port (SO_REUSEPORT)."""
    if shutil.which("wrk") is None:
        return None
    port = free_port()
    servers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _EMPTY_SERVER,
            str(port),
            str(files.cert),
            str(files.key),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.close()
                break
            except (OSError, ConnectionError):
                await asyncio.sleep(0.05)
        return await run_wrk(
            f"https://127.0.0.1:{port}", connections=connections, seconds=seconds, tmp=tmp
        )
    finally:
        for server in servers:
            if server.returncode is None:
                server.kill()
            await server.wait()


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
    parser.add_argument(
        "--rates",
        type=lambda text: [float(part) for part in text.split(",") if part],
        default=[500.0, 1000.0, 2000.0, 3000.0, 4000.0],
        help="open-loop arrival rates (reviews/s), comma-separated",
    )
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
            n = args.concurrency
            samples, errors, elapsed = await load(url, context, concurrency=n, seconds=args.seconds)
            throughput = len(samples) / elapsed
            print(
                f"closed loop, {n} in flight (this client):     {percentiles(samples)}  "
                f"({throughput:.0f} reviews/s, {errors} errors)"
            )
            print(
                f"  Little's law: mean = {n} / {throughput:.0f} per s = "
                f"{n / throughput * 1000:.1f} ms; p99 <= 5 ms at {n} in flight needs "
                f">= {n / 0.005:,.0f} reviews/s"
            )
            wrk = await run_wrk(url, connections=n, seconds=args.seconds, tmp=Path(tmp))
            print(
                f"closed loop, {n} in flight (wrk):             "
                f"{wrk or 'skipped (wrk not on PATH; apt-get install wrk)'}"
            )
            for processes in (1, 2):
                floor = await reference_floor(
                    processes=processes,
                    connections=n,
                    seconds=args.seconds,
                    files=files,
                    context=context,
                    tmp=Path(tmp),
                )
                if floor is not None:
                    print(f"  floor: empty aiohttp handler, {processes} process(es), wrk: {floor}")
            best: float | None = None
            for rate in args.rates:
                samples, errors, elapsed = await open_loop(
                    url, context, connections=n, rate=rate, seconds=args.seconds
                )
                p99 = sorted(samples)[int(0.99 * len(samples))] * 1000
                if p99 <= 5.0 and errors == 0:
                    best = max(best or 0.0, rate)
                print(
                    f"open loop, {n} connections, {rate:>6.0f}/s:      {percentiles(samples)}  "
                    f"({len(samples) / elapsed:.0f} reviews/s, {errors} errors)"
                )
            if best is None:
                print(f"open loop at {n} connections: no rate tried kept p99 within 5 ms")
            else:
                print(
                    f"open loop at {n} connections: p99 within 5 ms up to {best:.0f} reviews/s "
                    "(highest rate tried that kept it)"
                )
            histogram = await server_histogram(f"http://127.0.0.1:{metrics_port}/metrics")
            print(f"server side during the run: {histogram}")
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await process.wait()


if __name__ == "__main__":
    loop.run(main())
