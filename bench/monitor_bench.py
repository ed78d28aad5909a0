"""Scrape latency and memory of the vGPU monitor on a crowded node.

Two scenarios on one 4-GPU node: (a) 2,000 containers with one GPU each (500 per GPU) and (b)
500 containers with 4 GPUs each.  Each container's HAMi-core region (v1, 1-2 processes, memory
used 20-90 % of a plausible limit, SM utilisation under the container's limit) is encoded with
``encode_region`` and written sparse under a temporary ``HOOK_PATH``
(``containers/<pod uid>_<container>/<uuid>.cache``); the matching pods (one container each,
labelled ``hami.io/vgpu-node=<node>``, with the allocated annotation) are created in a kubesim
API server on a real socket.  The monitor runs as a real subprocess (``python -m
hami_deviceplugin.monitor``, fake backend with the node's GPUs, feedback every 5 s as shipped)
and, once ready, is scraped ``--scrapes`` times in a row (GET ``/metrics``).

Printed per scenario: p50/p95/p99/max scrape latency, the body size, the number of samples and
of per-container series (``hami_vgpu_memory_used_bytes``), and the monitor's VmRSS and VmHWM
(``/proc/<pid>/status``) after the scrapes — once with the regions left alone and once while
another process rewrites every region (a process slot and a kernel launch each) in a loop, as
the containers' HAMi-core would.  Targets printed beside: p99 <= 100 ms, RSS <= 150 MB.  Asserts
nothing.  Run: ``uv run --frozen python bench/monitor_bench.py [--scrapes N] [--only a|b]``.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.hamicore import RegionWriter
from hami_kubesim.stack.system.ports import free_port
from hami_kubesim.stack.system.processes import ServiceProcess, ServiceSpec
from hami_kubesim.stack.system.settle import until
from hami_kubesim.stack.system.spec import dump_yaml, fake_devices_document, gpu_model_node
from hami_kubesim.testing import RunningApiServer, running_apiserver
from hami_protocol.keys import NVIDIA_DEVICES_ALLOCATED, VGPU_NODE
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices
from hami_protocol.region.codec import (
    DeviceMemory,
    DeviceUtilization,
    ProcSlot,
    SharedRegion,
    encode_region,
)
from hami_protocol.region.layout import MAX_DEVICES, V1, RegionVersion
from hami_runtime.logs import configure_logging

NODE = "bench-node"
NAMESPACE = "default"
GPU_MIB = 81920
NODE_GPUS = gpu_model_node(NODE, "NVIDIA A100-SXM4-80GB", count=4, memory_mib=GPU_MIB)
UUIDS = [gpu.uuid for gpu in NODE_GPUS.gpus]
MIB = 1 << 20
TARGET_P99_MS = 100.0
TARGET_RSS_MB = 150.0
_BLOCK = 4096


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    containers: int
    gpus_per_container: int
    limit_mib: int


SCENARIOS = (
    Scenario("a", "2000 containers x 1 GPU", 2000, 1, 2048),
    Scenario("b", "500 containers x 4 GPUs", 500, 4, 8192),
)


def _padded(values: Sequence[Any], empty: Any) -> tuple[Any, ...]:
    return (*values, *([empty] * (MAX_DEVICES - len(values))))


def region(number: int, uuids: Sequence[str], limit: int) -> SharedRegion:
    """Container ``number``'s region: 1-2 processes sharing its memory and SM time."""
    procs = []
    count = 1 + number % 2
    for p in range(count):
        used = [
            limit * (20 + (number * 7 + d * 13 + p) % 70) // 100 // count for d in range(len(uuids))
        ]
        procs.append(
            ProcSlot(
                pid=100 + p,
                hostpid=10_000 + number * 2 + p,
                used=_padded(
                    [DeviceMemory(u // 16, u // 32, u - u // 16 - u // 32, 0, u) for u in used],
                    DeviceMemory(0, 0, 0, 0, 0),
                ),
                monitor_used=(0,) * MAX_DEVICES,
                device_util=_padded(
                    [DeviceUtilization(0, 0, (number * 11 + p) % 50) for _ in uuids],
                    DeviceUtilization(0, 0, 0),
                ),
                status=1,
            )
        )
    return SharedRegion(
        version=RegionVersion.V1,
        major_version=1,
        minor_version=0,
        sm_init_flag=1,
        owner_pid=100,
        num=len(uuids),
        uuids=_padded(list(uuids), ""),
        limits=_padded([limit] * len(uuids), 0),
        sm_limits=_padded([50] * len(uuids), 0),
        procs=tuple(procs),
        utilization_switch=0,
        recent_kernel=2,
        priority=1,
        last_kernel_time=int(time.time()),
    )


def write_sparse(path: Path, image: bytes) -> None:
    """``image`` with its all-zero blocks left as holes (a region is 2 MB, mostly zeros)."""
    with path.open("wb") as file:
        for start in range(0, len(image), _BLOCK):
            block = image[start : start + _BLOCK]
            if block.strip(b"\0"):
                file.seek(start)
                file.write(block)
        file.truncate(len(image))


def pod(name: str, uuids: Sequence[str], limit_mib: int) -> dict[str, Any]:
    allocated = encode_pod_devices(
        (tuple(ContainerDevice(u, "NVIDIA", limit_mib, 50) for u in uuids),)
    )
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {VGPU_NODE: NODE, "app": "inference"},
            "annotations": {VGPU_NODE: NODE, NVIDIA_DEVICES_ALLOCATED: allocated},
        },
        "spec": {
            "nodeName": NODE,
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/cuda-app:latest",
                    "resources": {"limits": {"nvidia.com/gpu": str(len(uuids))}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


async def populate(sim: RunningApiServer, hook: Path, scenario: Scenario) -> list[Path]:
    """The pods and their regions; returns the region files."""
    paths = []
    per = scenario.gpus_per_container
    for number in range(scenario.containers):
        uuids = [UUIDS[(number * per + d) % len(UUIDS)] for d in range(per)]
        stored = await sim.server.create("pods", pod(f"job-{number}", uuids, scenario.limit_mib))
        directory = hook / "containers" / f"{stored['metadata']['uid']}_main"
        directory.mkdir(parents=True)
        path = directory / f"{uuid.uuid4()}.cache"
        write_sparse(path, encode_region(region(number, uuids, scenario.limit_mib * MIB)))
        paths.append(path)
    return paths


def rewrite_forever(paths: Sequence[Path], stop: Event, sweeps: Any) -> None:
    """In a child process: every container's HAMi-core updates its process and launches a
    kernel, region after region, until ``stop``."""
    writers = []
    for path in paths:
        file = path.open("r+b")
        mapped = mmap.mmap(file.fileno(), V1.size, flags=mmap.MAP_SHARED)
        writers.append(RegionWriter(path, file, mapped, V1))
    tick = 0
    while not stop.is_set():
        for number, writer in enumerate(writers):
            used = [(1 << 30) + ((number + tick) % 64) * MIB] * writer.num
            writer.set_process(100, used_bytes=used, sm_util=[(number + tick) % 50] * writer.num)
            writer.launch_kernel()
        tick += 1
        sweeps.value = tick
        time.sleep(0.05)
    for writer in writers:
        writer.close()


def memory_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


async def scrapes(url: str, count: int) -> tuple[list[float], bytes]:
    timings, body = [], b""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for _ in range(count):
            started = time.perf_counter()
            async with http.get(url) as response:
                body = await response.read()
            timings.append(time.perf_counter() - started)
    return timings, body


def report(title: str, timings: Sequence[float], body: bytes, pid: int) -> None:
    ms = sorted(t * 1000 for t in timings)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, round(p / 100 * (len(ms) - 1)))]

    samples = series = 0
    for family in text_string_to_metric_families(body.decode()):
        samples += len(family.samples)
        if family.name == "hami_vgpu_memory_used_bytes":
            series += len(family.samples)
    rss, hwm = memory_mb(pid)
    print(
        f"{title:<40} n={len(ms)}  mean={statistics.fmean(ms):6.1f}  p50={pct(50):6.1f}  "
        f"p95={pct(95):6.1f}  p99={pct(99):6.1f}  max={ms[-1]:6.1f} ms "
        f"(target p99 <= {TARGET_P99_MS:.0f})",
        flush=True,
    )
    print(
        f"{'':<40} body={len(body) / 1024:.0f} KiB  samples={samples}  "
        f"container series={series}  VmRSS={rss:.0f} MB  VmHWM={hwm:.0f} MB "
        f"(target <= {TARGET_RSS_MB:.0f})",
        flush=True,
    )


async def run(scenario: Scenario, count: int, *, concurrent: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="monb-"))
    try:
        hook = work / "vgpu"
        devices = work / "gpus.yaml"
        dump_yaml(fake_devices_document(NODE_GPUS), devices)
        async with running_apiserver() as sim:
            await sim.server.create("nodes", NodeSpec(name=NODE).to_object())
            started = time.perf_counter()
            paths = await populate(sim, hook, scenario)
            print(
                f"{scenario.title}: {len(paths)} pods and regions in "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
            port = free_port()
            monitor = ServiceProcess(
                ServiceSpec(
                    name="vgpu-monitor",
                    module="hami_deviceplugin.monitor",
                    args=(
                        f"--node-name={NODE}",
                        f"--hook-path={hook}",
                        f"--kube-url={sim.url}",
                        "--device-backend=fake",
                        f"--fake-devices={devices}",
                        f"--mig-lock-file={work / 'mig.lock'}",
                        f"--metrics-bind-address=127.0.0.1:{port}",
                        "--log-format=json",
                        "--log-level=warning",
                    ),
                    ready_url=f"http://127.0.0.1:{port}/readyz",
                    log_file=work / "monitor.log",
                    ready_timeout=120,
                )
            )
            started = time.perf_counter()
            await monitor.start()
            print(f"  monitor ready in {time.perf_counter() - started:.1f} s", flush=True)
            url = f"http://127.0.0.1:{port}/metrics"
            try:
                await scrapes(url, 5)  # warm-up
                timings, body = await scrapes(url, count)
                pid = monitor.pid or 0
                report("  idle regions", timings, body, pid)
                if concurrent:
                    await _with_writer(paths, url, count, pid)
            finally:
                await monitor.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _with_writer(paths: Sequence[Path], url: str, count: int, pid: int) -> None:
    context = multiprocessing.get_context("spawn")
    stop, sweeps = context.Event(), context.Value("q", 0)
    writer = context.Process(target=rewrite_forever, args=(paths, stop, sweeps), daemon=True)
    writer.start()
    try:

        async def sweeping() -> bool:
            return bool(sweeps.value >= 1)

        await until(sweeping, within=60, what="the region writer's first sweep")
        first, started = sweeps.value, time.perf_counter()
        timings, body = await scrapes(url, count)
        rate = (sweeps.value - first) / (time.perf_counter() - started)
        report(f"  regions rewritten ({rate:.1f} sweeps/s)", timings, body, pid)
    finally:
        stop.set()
        await asyncio.to_thread(writer.join, 10)


async def main(count: int, only: str, concurrent: bool) -> int:
    configure_logging("console", "error")
    print(f"python {sys.version.split()[0]}, {count} sequential scrapes per measurement")
    for scenario in SCENARIOS:
        if only in ("", scenario.key):
            await run(scenario, count, concurrent=concurrent)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--only", choices=("a", "b"), default="")
    parser.add_argument(
        "--no-writer", action="store_true", help="skip the run with the regions being rewritten"
    )
    arguments = parser.parse_args()
    raise SystemExit(asyncio.run(main(arguments.scrapes, arguments.only, not arguments.no_writer)))
