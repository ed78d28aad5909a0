"""``python -m hami_scheduler`` as a real process, over HTTPS, called by kubesim's scheduling
loop (the kube-scheduler stand-in) to place and bind pods."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.certs import client_ssl_context, generate_ca
from hami_kubesim.scheduler.config import parse_scheduler_config
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.testing import running_apiserver
from hami_protocol import keys
from hami_protocol.node.lock import decode_node_lock
from hami_protocol.pod.devices import decode_pod_devices_canonical

from .service_helpers import (
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    node_object,
    pod_object,
    register_annotations,
)

pytestmark = pytest.mark.timeout(120)

SCHEDULER_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: hami-scheduler
extenders:
  - urlPrefix: "https://127.0.0.1:{port}"
    filterVerb: filter
    bindVerb: bind
    enableHTTPS: true
    tlsConfig:
      caData: {ca}
    nodeCacheCapable: true
    weight: 1
    httpTimeout: 30s
    managedResources:
      - name: nvidia.com/gpu
        ignoredByScheduler: true
      - name: nvidia.com/gpumem
        ignoredByScheduler: true
      - name: nvidia.com/gpucores
        ignoredByScheduler: true
"""


@contextlib.asynccontextmanager
async def scheduler_process(
    *args: str,
) -> AsyncIterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Start the process; yield its ``scheduler_started`` log line and the lines so far."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_scheduler",
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: list[dict[str, Any]] = []
    started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def drain() -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                lines.append(entry)
                if entry.get("event") == "scheduler_started" and not started.done():
                    started.set_result(entry)
        if not started.done():
            started.set_exception(AssertionError(f"exited early: {lines[-3:]}"))

    reader = asyncio.create_task(drain())
    try:
        async with asyncio.timeout(30):
            running = await started
        yield running, lines
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()
        await reader
        assert process.returncode == 0, lines[-5:]
        assert lines[-1]["event"] == "scheduler_stopped"


async def device_plugin_stand_in(api: ApiServer) -> None:
    """What the device plugin does after Allocate: mark the pod and release the node lock."""
    while True:
        for pod in api.list("pods"):
            notes = annotations_of(pod)
            node = (pod.get("spec") or {}).get("nodeName")
            if notes.get(keys.BIND_PHASE) != "allocating" or not node:
                continue
            meta = pod["metadata"]
            await api.patch(
                "pods",
                meta["name"],
                {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}},
                namespace=meta["namespace"],
                patch_type="merge",
            )
            lock = annotations_of(api.get("nodes", node)).get(keys.NODE_LOCK)
            if lock and decode_node_lock(lock).pod == meta["name"]:
                await api.patch(
                    "nodes",
                    node,
                    {"metadata": {"annotations": {keys.NODE_LOCK: None}}},
                    patch_type="merge",
                )
        await asyncio.sleep(0.05)


async def test_process_places_and_binds_pods_driven_by_the_scheduling_loop(tmp_path: Path) -> None:
    certificate = generate_ca("scheduler-test-ca").issue(["127.0.0.1"])
    files = certificate.write(tmp_path / "tls")
    async with running_apiserver() as sim:
        api = sim.server
        for name in ("n1", "n2"):
            await api.create("nodes", node_object(name, register_annotations(gpus(name, 2))))
        async with scheduler_process(
            f"--kube-url={sim.url}",
            "--http_bind=127.0.0.1:0",
            "--metrics-bind-address=127.0.0.1:0",
            f"--cert_file={files.cert}",
            f"--key_file={files.key}",
            "--scheduler-name=hami-scheduler",
            "--log-format=json",
        ) as (started, lines):
            port, metrics_port = started["port"], started["metrics_port"]
            assert started["tls"] is True
            context = client_ssl_context(certificate.ca_pem)
            async with aiohttp.ClientSession() as http:

                async def ready() -> bool:
                    url = f"https://127.0.0.1:{port}/readyz"
                    async with http.get(url, ssl=context) as response:
                        return response.status == 200

                await eventually(ready, within=30, what="ready")
                ca = base64.b64encode(certificate.ca_pem).decode()
                config = parse_scheduler_config(SCHEDULER_CONFIG.format(port=port, ca=ca))
                plugin = asyncio.create_task(device_plugin_stand_in(api))
                try:
                    async with SchedulingLoop(
                        config, api_url=sim.url, initial_backoff=0.2, max_backoff=1.0
                    ):
                        for i in range(6):
                            limits = gpu_limits(1, mem=3000, cores=25)
                            await api.create("pods", pod_object(f"p{i}", container(limits=limits)))
                        await api.create(
                            "pods", pod_object("too-big", container(limits=gpu_limits(3)))
                        )

                        def placed() -> bool:
                            pods = [api.get("pods", f"p{i}", namespace="default") for i in range(6)]
                            return all(p["spec"].get("nodeName") for p in pods)

                        await eventually(placed, within=60, what="all pods bound")

                        def refused() -> bool:
                            return any(
                                e.get("reason") == "FailedScheduling"
                                and e["involvedObject"]["name"] == "too-big"
                                for e in api.list("events")
                            )

                        await eventually(refused, within=30, what="too-big refused")
                finally:
                    plugin.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await plugin
                async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                    metrics = await response.text()
    held: dict[str, int] = {}
    for i in range(6):
        pod = api.get("pods", f"p{i}", namespace="default")
        notes = annotations_of(pod)
        assert notes[keys.VGPU_NODE] == pod["spec"]["nodeName"]
        for device in decode_pod_devices_canonical(notes[keys.NVIDIA_DEVICES_ALLOCATED])[0]:
            assert device.uuid.startswith(f"GPU-{pod['spec']['nodeName']}-")
            held[device.uuid] = held.get(device.uuid, 0) + device.usedmem
    assert all(memory <= 8000 for memory in held.values()), held
    assert "nodeName" not in api.get("pods", "too-big", namespace="default")["spec"]
    assert "hami_gpu_memory_allocated_bytes{" in metrics
    assert 'zone="vGPU"' in metrics
    assert (
        'hami_scheduler_request_duration_seconds_count{outcome="bound",verb="bind"} 6.0' in metrics
    )
    events = [line.get("event") for line in lines]
    assert "caches_synced" in events
    assert events.count("bind_succeeded") == 6


def test_invalid_flags_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hami_scheduler", "--filter-mode=maybe"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "--filter-mode" in result.stderr


def test_startup_failure_exits_1_with_a_log_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hami_scheduler",
            f"--cert_file={tmp_path / 'missing.crt'}",
            f"--key_file={tmp_path / 'missing.key'}",
            "--kube-url=http://127.0.0.1:9",
            "--http_bind=127.0.0.1:0",
            "--metrics-bind-address=127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    line = json.loads(result.stderr.strip().splitlines()[-1])
    assert line["event"] == "scheduler_failed_to_start"
