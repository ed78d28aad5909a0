"""Allocate latency of the device plugin against kubesim, as the kubelet sees it.

The plugin runs in-process with the fake backend (4 GPUs, split 10) against an emulated API
server on a real TCP socket; the benchmark is the kubelet: it dials the plugin's unix socket and
calls ``Allocate`` exactly as the kubelet does (one container per call, the device IDs being
free replicas of exactly the GPUs of that container's entry).  Before a pod's first call it is
prepared as the system leaves it, untimed and through kubesim's in-process API (which its
request counters leave out): created unbound as the webhook leaves it, then bound by a Binding
carrying the scheduler's decision (``vgpu-node``, ``vgpu-time``, the device lists, bind-phase
``allocating``, ``bind-time``), taking the node lock first where binds take it; the kubelet then
waits until its watch (the plugin's node-scoped watch stands in for it) holds the pod.  After
its last call the pod runs (phase Running); the node keeps ``--resident`` such pods, the oldest
deleted beyond that, so the fallback's LIST sees a node of a steady size.

Two identity modes, each on a fresh API server and plugin (docs/protocol.md §4.2–4.3):

* **PodResources**: the plugin asks the kubelet's ``v1.PodResourcesLister/List`` (kubesim's
  pod-resources server, fed by the benchmark as the kubelet feeds it: a pod is listed from its
  admission on, a container's devices from the moment its Allocate returned); binds take no
  node lock.  Expected cost: one pod patch per Allocate, no reads.
* **no PodResources**: the plugin identifies the pod by a fresh LIST of the node's pods; binds
  take HAMi's node lock, which the plugin releases with the pod's last Allocate.  Expected cost:
  one LIST and one pod patch per Allocate, and an unlock per pod.

Each mode runs single-container pods (one call each) and two-container pods (two calls each,
the first leaves the pod allocating).  Prints, per mode and pod shape: Allocate latency
(mean/p50/p95/p99/max), throughput (Allocates per second back to back: calls / time spent in
them, the plugin serving one at a time), and the plugin's API requests per Allocate from
kubesim's request counters (``apiserver_request_total``, per client; read in-process, as
``bench/api_cost.py`` does; watches and Events aside), by verb and resource,
with the PodResources ``List`` calls per Allocate.  Asserts nothing.

    uv run --frozen python bench/deviceplugin_bench.py [--pods N] [--warmup N] [--resident N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import grpc
import yaml

from hami_deviceplugin.app import RunningPlugin, serving
from hami_deviceplugin.settings import Settings
from hami_kube.config import KubeSettings
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc
from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.kubelet.podresources import ListedContainer, ListedPod, PodResourcesServer
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver
from hami_protocol.config.node import NodeSettings
from hami_protocol.keys import (
    BIND_PHASE,
    BIND_PHASE_ALLOCATING,
    BIND_PHASE_SUCCESS,
    BIND_TIME,
    NODE_LOCK,
    NVIDIA_DEVICES_ALLOCATED,
    NVIDIA_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
)
from hami_protocol.node.lock import NodeLock, encode_node_lock
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices
from hami_runtime.logs import configure_logging

NODE: Final = "bench-node"
NAMESPACE: Final = "default"
RESOURCE: Final = "nvidia.com/gpu"
CLIENT: Final = "hami-deviceplugin"
SPLIT: Final = 10
UUIDS: Final = tuple(f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(4))
WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
READS: Final = frozenset({"GET", "LIST"})


# --- the kubelet's side -------------------------------------------------------------------------


@dataclass(slots=True)
class Kubelet:
    """What the kubelet knows of this node's pods: the active ones (pod manager order), the
    replicas each container holds; the source of the pod-resources server's answers."""

    active: dict[str, list[str]] = field(default_factory=dict)
    """Pod name → its containers' names, in admission order."""
    held: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    """Pod name → container name → the replicas it was given."""

    def admit(self, name: str, containers: Sequence[str]) -> None:
        self.active[name] = list(containers)
        self.held[name] = {}

    def free_replicas(self, gpu: str, count: int) -> tuple[str, ...]:
        taken = {r for pod in self.held.values() for ids in pod.values() for r in ids}
        free = [f"{gpu}-{n}" for n in range(SPLIT) if f"{gpu}-{n}" not in taken]
        if len(free) < count:
            raise RuntimeError(f"no free replica of {gpu}: lower --resident")
        return tuple(free[:count])

    def record(self, name: str, container: str, replicas: tuple[str, ...]) -> None:
        self.held[name][container] = replicas

    def forget(self, name: str) -> None:
        self.active.pop(name, None)
        self.held.pop(name, None)

    # PodResourcesSource
    def active_pods(self) -> Sequence[ListedPod]:
        return [self._listed(name) for name in self.active]

    def known_pod(self, namespace: str, name: str) -> ListedPod | None:
        return self._listed(name) if namespace == NAMESPACE and name in self.active else None

    def allocatable_devices(self) -> Mapping[str, Sequence[str]]:
        return {RESOURCE: [f"{gpu}-{n}" for gpu in UUIDS for n in range(SPLIT)]}

    def _listed(self, name: str) -> ListedPod:
        held = self.held.get(name, {})
        containers = tuple(
            ListedContainer(c, ((RESOURCE, held[c]),) if c in held else ())
            for c in self.active[name]
        )
        return ListedPod(NAMESPACE, name, containers)


# --- pods as the system leaves them --------------------------------------------------------------


def entry_gpus(number: int, containers: int) -> tuple[str, ...]:
    """The GPU of each container's entry (one GPU per container)."""
    return tuple(UUIDS[(number + c) % len(UUIDS)] for c in range(containers))


def webhook_pod(name: str, containers: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {"name": f"c{c}", "image": "cuda", "resources": {"limits": {RESOURCE: "1"}}}
                for c in range(containers)
            ],
        },
    }


def decision(gpus: Sequence[str]) -> dict[str, str]:
    """The annotations the scheduler's Binding carries."""
    value = encode_pod_devices(tuple((ContainerDevice(g, "NVIDIA", 1000, 10),) for g in gpus))
    now = str(int(time.time()))
    return {
        VGPU_NODE: NODE,
        VGPU_TIME: now,
        NVIDIA_DEVICES_TO_ALLOCATE: value,
        NVIDIA_DEVICES_ALLOCATED: value,
        BIND_PHASE: BIND_PHASE_ALLOCATING,
        BIND_TIME: now,
    }


async def place(sim: RunningApiServer, name: str, gpus: Sequence[str], *, lock: bool) -> None:
    """Create, lock (where binds lock) and bind ``name`` as webhook and scheduler do."""
    await sim.server.create("pods", webhook_pod(name, len(gpus)))
    if lock:
        value = encode_node_lock(NodeLock(datetime.now(UTC), NAMESPACE, name))
        body = {"metadata": {"annotations": {NODE_LOCK: value}}}
        await sim.server.patch("nodes", NODE, body, patch_type="merge")
    await sim.server.bind(NAMESPACE, name, NODE, annotations=decision(gpus))


async def start_running(sim: RunningApiServer, name: str) -> None:
    body = {"status": {"phase": "Running"}}
    await sim.server.patch(
        "pods", name, body, namespace=NAMESPACE, patch_type="merge", subresource="status"
    )


# --- one scenario --------------------------------------------------------------------------------


@dataclass(slots=True)
class Node:
    sim: RunningApiServer
    plugin: RunningPlugin
    stub: api_pb2_grpc.DevicePluginAsyncStub
    kubelet: Kubelet
    lock: bool
    resident: int
    pod_resources: PodResourcesServer | None
    running: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Result:
    timings: tuple[float, ...]
    requests: Counter[tuple[str, str]]
    """(verb, resource) → the plugin's requests over the timed calls."""
    lists: int
    """PodResources ``List`` calls over the timed calls."""
    failed: float


async def serve_pod(node: Node, name: str, gpus: Sequence[str]) -> list[float]:
    """Place ``name``, admit it as the kubelet does, and time each container's Allocate."""
    await place(node.sim, name, gpus, lock=node.lock)
    containers = [f"c{c}" for c in range(len(gpus))]
    node.kubelet.admit(name, containers)
    key = f"{NAMESPACE}/{name}"
    store = node.plugin.node_pods.reflector.store
    await eventually(lambda: store.get(key) is not None, what=f"{key} watched", interval=0.0005)
    timings: list[float] = []
    for container, gpu in zip(containers, gpus, strict=True):
        replicas = node.kubelet.free_replicas(gpu, 1)
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(replicas))]
        )
        started = time.perf_counter()
        reply = await node.stub.Allocate(request, timeout=10)
        timings.append(time.perf_counter() - started)
        node.kubelet.record(name, container, replicas)
        visible = reply.container_responses[0].envs.get("NVIDIA_VISIBLE_DEVICES")
        if visible != gpu:
            raise RuntimeError(f"{key}/{container} was given {visible!r}, not {gpu}")
    stored = node.sim.server.get("pods", name, namespace=NAMESPACE)
    if stored["metadata"]["annotations"].get(BIND_PHASE) != BIND_PHASE_SUCCESS:
        raise RuntimeError(f"{key} was not marked success")
    if node.lock and NODE_LOCK in (
        node.sim.server.get("nodes", NODE)["metadata"].get("annotations") or {}
    ):
        raise RuntimeError(f"the node lock of {key} was not released")
    await start_running(node.sim, name)
    node.running.append(name)
    while len(node.running) > node.resident:
        gone = node.running.pop(0)
        await node.sim.server.delete("pods", gone, namespace=NAMESPACE)
        node.kubelet.forget(gone)
    return timings


def failures(plugin: RunningPlugin) -> float:
    value: float = plugin.metrics.allocate_requests.labels(outcome="failed")._value.get()
    return value


async def scenario(node: Node, *, prefix: str, pods: int, containers: int, warmup: int) -> Result:
    for number in range(warmup):
        await serve_pod(node, f"{prefix}-w{number}", entry_gpus(number, containers))
    counts = node.sim.server.requests.counts()
    lists = node.pod_resources.calls["List"] if node.pod_resources is not None else 0
    failed = failures(node.plugin)
    timings: list[float] = []
    for number in range(pods):
        timings += await serve_pod(node, f"{prefix}-{number}", entry_gpus(number, containers))
    spent = node.sim.server.requests.counts().since(counts)
    by = spent.by("verb", "resource", client=CLIENT)
    requests = Counter(
        {
            (verb, resource): n
            for (verb, resource), n in by.items()
            if verb != "WATCH" and resource != "events"
        }
    )
    listed = node.pod_resources.calls["List"] if node.pod_resources is not None else 0
    return Result(tuple(timings), requests, listed - lists, failures(node.plugin) - failed)


# --- report --------------------------------------------------------------------------------------


def report(title: str, result: Result) -> None:
    ms = sorted(t * 1000 for t in result.timings)
    calls = len(ms)

    def pct(p: float) -> float:
        return ms[min(calls - 1, round(p / 100 * (calls - 1)))]

    rate = calls / (sum(ms) / 1000)
    print(
        f"  {title:<28} n={calls:4d}  mean={statistics.fmean(ms):6.2f}  p50={pct(50):6.2f}  "
        f"p95={pct(95):6.2f}  p99={pct(99):6.2f}  max={ms[-1]:6.2f} ms  {rate:6.0f} Allocate/s"
    )
    writes = sum(n for (verb, _), n in result.requests.items() if verb in WRITES) / calls
    reads = sum(n for (verb, _), n in result.requests.items() if verb in READS) / calls
    detail = ", ".join(
        f"{verb} {resource} {n / calls:.2f}"
        for (verb, resource), n in sorted(result.requests.items())
    )
    print(
        f"  {'':<28} API per Allocate: {writes:.2f} writes, {reads:.2f} reads ({detail or 'none'});"
        f" PodResources List {result.lists / calls:.2f}; failed {result.failed:g}"
    )


# --- a node per mode -----------------------------------------------------------------------------


def write_devices(path: Path) -> None:
    gpus = [
        {"uuid": u, "index": i, "model": "Tesla T4", "memory_mib": 15360}
        for i, u in enumerate(UUIDS)
    ]
    path.write_text(yaml.safe_dump({"gpus": gpus}))


async def run_mode(title: str, *, pod_resources: bool, arguments: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="dpb-") as directory:
        await serve_mode(title, Path(directory), pod_resources=pod_resources, arguments=arguments)


async def serve_mode(
    title: str, work: Path, *, pod_resources: bool, arguments: argparse.Namespace
) -> None:
    devices = work / "gpus.yaml"
    write_devices(devices)
    kubelet = Kubelet()
    server = (
        PodResourcesServer(socket_path=work / "pod-resources" / "kubelet.sock", source=kubelet)
        if pod_resources
        else None
    )
    async with running_apiserver() as sim:
        await sim.server.create("nodes", NodeSpec(name=NODE).to_object())
        settings = Settings(
            node_name=NODE,
            node=NodeSettings(device_split_count=SPLIT),
            kubelet_socket=work / "kubelet.sock",  # no kubelet: the benchmark plays it
            pod_resources_socket=None if server is None else server.socket_path,
            device_backend="fake",
            fake_devices=devices,
            host_root=work / "host",
            kube=KubeSettings(kube_url=sim.url, user_agent=CLIENT),
            metrics_bind_address="127.0.0.1:0",
            kubelet_poll_interval_s=3600.0,
            register_interval_s=3600.0,
            register_retry_interval_s=3600.0,
        )
        if server is not None:
            await server.start()
        try:
            async with (
                serving(settings) as plugin,
                grpc.aio.insecure_channel(f"unix:{plugin.server.socket_path}") as channel,
            ):
                node = Node(
                    sim=sim,
                    plugin=plugin,
                    stub=api_pb2_grpc.DevicePluginStub(channel),
                    kubelet=kubelet,
                    lock=not pod_resources,
                    resident=arguments.resident,
                    pod_resources=server,
                )
                print(f"== {title}")
                for label, prefix, containers in (
                    ("one container", "one", 1),
                    ("two containers (2 calls)", "two", 2),
                ):
                    result = await scenario(
                        node,
                        prefix=prefix,
                        pods=arguments.pods,
                        containers=containers,
                        warmup=arguments.warmup,
                    )
                    report(label, result)
        finally:
            if server is not None:
                await server.stop()


async def main(arguments: argparse.Namespace) -> int:
    configure_logging("console", "error")
    print(
        f"device plugin Allocate against kubesim: {arguments.pods} pods per shape after "
        f"{arguments.warmup} warm-up pods, {arguments.resident} running pods kept on the node"
    )
    await run_mode("PodResources (no node lock)", pod_resources=True, arguments=arguments)
    await run_mode(
        "no PodResources: LIST fallback (node lock)", pod_resources=False, arguments=arguments
    )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=300, help="timed pods per pod shape")
    parser.add_argument("--warmup", type=int, default=10, help="untimed pods first")
    parser.add_argument(
        "--resident",
        type=int,
        default=16,
        help="running pods kept on the node (a GPU has 10 replicas: at most 18)",
    )
    raise SystemExit(asyncio.run(main(parser.parse_args())))
