"""``python -m hami_scheduler`` as a real process: over HTTPS, called by kubesim's scheduling
loop (the kube-scheduler stand-in) to place and bind pods; and stopped by SIGTERM within its
grace period while its peers hang.

Flag parsing and start-up failures are tested in-process (``test_service_entry``): only what
needs the process boundary — signals, exit status, the last log line — is tested here."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hami_kube.objects import PodView
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.certs import client_ssl_context, generate_ca
from hami_kubesim.scheduler.config import parse_scheduler_config
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.testing import running_apiserver
from hami_protocol import keys
from hami_protocol.node.lock import decode_node_lock
from hami_protocol.pod.devices import decode_pod_devices_canonical

from ..service_helpers import (
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


@dataclass
class SchedulerProcess:
    """A running ``python -m hami_scheduler``: its ``scheduler_started`` line and every JSON
    log line so far."""

    process: asyncio.subprocess.Process
    started: dict[str, Any]
    lines: list[dict[str, Any]]

    def events(self) -> list[str]:
        return [str(line.get("event")) for line in self.lines]

    async def terminate(self) -> float:
        """Send SIGTERM; the seconds until the process has exited."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await self.process.wait()
        return time.monotonic() - began


@contextlib.asynccontextmanager
async def scheduler_process(*args: str) -> AsyncIterator[SchedulerProcess]:
    """Start the process; stop it on exit (if the test has not) and check it exited cleanly."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_scheduler",
        # Never the default :9397 on every interface: tests run side by side.
        "--gpumap-bind-address=127.0.0.1:0",
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
            running = SchedulerProcess(process, await started, lines)
        yield running
    finally:
        if process.returncode is None:
            await SchedulerProcess(process, {}, lines).terminate()
        await reader
        assert process.returncode == 0, lines[-5:]
        assert lines[-1]["event"] == "scheduler_stopped"


async def device_plugin_stand_in(api: ApiServer) -> None:
    """What the device plugin does after Allocate: mark the pod and release the node lock."""
    while True:
        for pod in api.list("pods"):
            notes = annotations_of(pod)
            node = PodView(pod).node_name
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
        ) as scheduler:
            port, metrics_port = scheduler.started["port"], scheduler.started["metrics_port"]
            assert scheduler.started["tls"] is True
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
    events = scheduler.events()
    assert "caches_synced" in events
    assert events.count("bind_succeeded") == 6


class HangingApiProxy:
    """A TCP proxy in front of the API server that can stop answering.

    Until :meth:`hang` it forwards both ways.  After it nothing is forwarded in either direction,
    open connections stay open, and new ones are accepted and never answered: an API server
    that has stopped answering, as seen from its clients.  What clients send after the hang is
    kept in :attr:`unanswered`.
    """

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._hung = False
        self._writers: list[asyncio.StreamWriter] = []
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.unanswered = bytearray()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hang(self) -> None:
        self._hung = True

    async def __aenter__(self) -> HangingApiProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        for writer in self._writers:
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        if self._hung:
            self._spawn(self._pipe(reader, None))
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        self._writers.append(upstream_writer)
        self._spawn(self._pipe(reader, upstream_writer))
        self._spawn(self._pipe(upstream_reader, writer, from_client=False))

    def _spawn(self, pipe: Any) -> None:
        task = asyncio.get_running_loop().create_task(pipe)
        self._pipes.add(task)
        task.add_done_callback(self._pipes.discard)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter | None,
        *,
        from_client: bool = True,
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if self._hung or writer is None:
                    if from_client:
                        self.unanswered += data
                    continue
                writer.write(data)
                await writer.drain()


STEP_OVERRAN = ("shutdown_step_timed_out", "tasks_still_running")
GRACE_S = 3.0
EXIT_SLACK_S = 1.5
"""After the grace period: the event loop's bounded end (leftover tasks, executor) and the
interpreter's exit."""


async def test_sigterm_exits_within_the_grace_period_while_the_api_server_and_a_client_hang() -> (
    None
):
    async with running_apiserver() as sim, HangingApiProxy(sim.host, sim.port) as proxy:
        await sim.server.create("nodes", node_object("n1", register_annotations(gpus("n1", 2))))
        async with (
            scheduler_process(
                f"--kube-url={proxy.url}",
                "--http_bind=127.0.0.1:0",
                "--metrics-bind-address=127.0.0.1:0",
                f"--shutdown-grace-period={GRACE_S:g}s",
                "--leader-elect",
                "--leader-elect-mode=campaign",
                "--leader-elect-identity=sched-a",
                "--leader-elect-resource-namespace=default",
                "--log-format=json",
            ) as scheduler,
            aiohttp.ClientSession() as idle,
            aiohttp.ClientSession() as busy,
        ):
            base = f"http://127.0.0.1:{scheduler.started['port']}"

            async def ready() -> bool:
                async with idle.get(f"{base}/readyz") as response:
                    return response.status == 200

            def leading() -> bool:
                lease = sim.server.try_get("leases", "hami-scheduler", namespace="default")
                holder = (lease or {}).get("spec", {}).get("holderIdentity", "")
                return str(holder).startswith("sched-a_")

            await eventually(ready, within=30, what="caches synced")
            await eventually(leading, within=30, what="the replica leads")
            # A client holding an idle keep-alive connection to the extender...
            async with idle.get(f"{base}/healthz") as response:
                assert response.status == 200
            proxy.hang()
            # ...an Event to flush and a Lease to release towards an API server that no longer
            # answers...
            bad = pod_object("bad", annotations={keys.DEVICE_SCORING_WEIGHTS: "nonsense"})
            async with busy.post(f"{base}/filter", json={"Pod": bad, "NodeNames": ["n1"]}) as r:
                assert (await r.json())["Error"]
            # ...and a bind in flight, waiting for the API server to return the pod.
            args = {"PodName": "stuck", "PodNamespace": "default", "Node": "n1"}
            in_flight = asyncio.create_task(busy.post(f"{base}/bind", json=args))
            await eventually(
                lambda: b"/namespaces/default/pods/stuck" in proxy.unanswered,
                what="the bind waits on the API server",
            )
            seconds = await scheduler.terminate()
            # The bind was cut off, not answered: its handler did not outlive the shutdown.
            with pytest.raises(aiohttp.ClientError):
                await in_flight
    assert scheduler.process.returncode == 0
    assert seconds < GRACE_S + EXIT_SLACK_S, (seconds, scheduler.lines[-8:])
    assert scheduler.lines[-1]["event"] == "scheduler_stopped"
    overran = {line["step"] for line in scheduler.lines if line["event"] in STEP_OVERRAN}
    assert "event-flush" in overran, scheduler.lines[-8:]
