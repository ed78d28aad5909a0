"""Test helpers: polling with a deadline, fake-device files, pods as the scheduler leaves them,
and a node (kubesim's kubelet stand-in plus the plugin) to run them on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import yaml

from hami_deviceplugin.allocation.flow import EVENT_REASON
from hami_deviceplugin.app import RunningPlugin, serving
from hami_deviceplugin.settings import Settings
from hami_kube.config import KubeSettings
from hami_kube.objects import ObjectView, PodView
from hami_kubelet_api.constants import KUBELET_SOCKET_NAME
from hami_kubelet_api.v1beta1 import api_pb2_grpc
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.testing import RunningApiServer, eventually
from hami_protocol.config.node import NodeSettings
from hami_protocol.keys import (
    BIND_PHASE,
    BIND_TIME,
    NODE_LOCK,
    NVIDIA_DEVICES_ALLOCATED,
    NVIDIA_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
)
from hami_protocol.node.lock import NodeLock, encode_node_lock
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices

__all__ = [
    "NODE",
    "RESOURCE",
    "UUIDS",
    "annotations_of",
    "api_server_hung",
    "container",
    "devices_value",
    "events_for",
    "eventually",
    "gpu",
    "http_get",
    "lock_annotation",
    "lock_value",
    "log_lines",
    "named",
    "node_stack",
    "phase",
    "plugin_settings",
    "python_process",
    "registration_server",
    "resource_counts",
    "scheduled_pod",
    "stand_in_settings",
    "submit",
    "terminate",
    "write_atomically",
    "write_devices",
]

NODE = "gpu-node-1"
RESOURCE = "nvidia.com/gpu"
UUIDS = ("GPU-00000000-aaaa-0000-0000-000000000000", "GPU-11111111-bbbb-1111-1111-111111111111")


def gpu(
    uuid: str, index: int, *, memory_mib: int = 16384, healthy: bool = True, **extra: Any
) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "index": index,
        "model": "Tesla T4",
        "memory_mib": memory_mib,
        "healthy": healthy,
        **extra,
    }


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s content as one step (a temporary file renamed over it): a poller never
    reads the empty or half file an in-place write shows between its truncation and its end."""
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text)
    staging.replace(path)


def write_devices(
    path: Path, gpus: Sequence[Mapping[str, Any]], nics: Sequence[Mapping[str, Any]] = ()
) -> None:
    """Write the fake-devices file atomically (a reader never sees half a file)."""
    document = {"gpus": [dict(g) for g in gpus], "nics": [dict(n) for n in nics]}
    write_atomically(path, yaml.safe_dump(document))


def plugin_settings(
    *,
    url: str,
    plugin_dir: Path,
    devices: Path,
    host_root: Path | None,
    node: NodeSettings | None = None,
    **overrides: Any,
) -> Settings:
    values: dict[str, Any] = {
        "node_name": NODE,
        "node": node or NodeSettings(device_split_count=4, enable_numa_topology=True),
        "kubelet_socket": plugin_dir / "kubelet.sock",
        "device_backend": "fake",
        "fake_devices": devices,
        "sysfs_root": plugin_dir / "no-sysfs",
        "host_root": host_root,
        "kube": KubeSettings(kube_url=url, request_timeout_s=10.0, user_agent="hami-deviceplugin"),
        "metrics_bind_address": "127.0.0.1:0",
        "register_interval_s": 30.0,
        "register_retry_interval_s": 0.2,
        "kubelet_poll_interval_s": 0.05,
        "fake_poll_interval_s": 0.05,
        # The product's 3 s, widened: on a loaded 2-core machine the gRPC calls and worker
        # threads of one Allocate can stall for seconds.  Tests of the deadline set their own.
        "allocate_timeout_s": 10.0,
        "pod_resources_socket": None,
    }
    values.update(overrides)
    return Settings(**values)


def devices_value(*containers: Sequence[tuple[str, int, int]]) -> str:
    """The ``-devices-to-allocate`` value for ``(uuid, MiB, cores)`` lists, one per container."""
    return encode_pod_devices(
        tuple(
            tuple(ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid, mem, cores in container)
            for container in containers
        )
    )


def container(name: str, gpus: int = 0, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "image": "cuda"}
    if gpus:
        spec["resources"] = {"limits": {RESOURCE: str(gpus)}}
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return spec


def scheduled_pod(
    name: str,
    containers: Sequence[dict[str, Any]],
    *,
    to_allocate: str,
    init: Sequence[dict[str, Any]] = (),
    bind_time: int | None = None,
    namespace: str = "default",
    extra_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the scheduler leaves it after filter and bind's first patch (not yet bound)."""
    annotations = {
        VGPU_NODE: NODE,
        NVIDIA_DEVICES_TO_ALLOCATE: to_allocate,
        NVIDIA_DEVICES_ALLOCATED: to_allocate,
        BIND_PHASE: "allocating",
        BIND_TIME: str(bind_time if bind_time is not None else int(datetime.now(UTC).timestamp())),
        **(extra_annotations or {}),
    }
    spec: dict[str, Any] = {"containers": list(containers), "schedulerName": "hami-scheduler"}
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations,
            "labels": {VGPU_NODE: NODE},
        },
        "spec": spec,
    }


def lock_value(namespace: str, name: str) -> str:
    return encode_node_lock(NodeLock(datetime.now(UTC), namespace, name))


def lock_annotation(namespace: str, name: str) -> dict[str, str]:
    return {NODE_LOCK: lock_value(namespace, name)}


# --- a node: the kubelet stand-in and the plugin --------------------------------------------------


def resource_counts(kubelet: KubeletStandIn, resource: str = RESOURCE) -> tuple[int, int]:
    """``(capacity, allocatable)`` of ``resource`` as the kubelet stand-in sees it."""
    devices = kubelet.resources().get(resource)
    return (0, 0) if devices is None else (devices.capacity, devices.allocatable)


def stand_in_settings(sim: RunningApiServer, plugin_dir: Path) -> KubeletSettings:
    """The kubelet stand-in of this suite's node: ``plugin_dir`` plays the device-plugin
    directory, ``<plugin_dir>/pod-resources`` the pod-resources one.  It dials a plugin within the
    kubelet's own 10 s (a unix socket, but a loaded machine can stall a gRPC connect for seconds)
    and gives an Allocate 30 s, well beyond the plugin's own deadline."""
    return KubeletSettings(
        node_name=NODE,
        plugin_dir=plugin_dir,
        api_url=sim.url,
        call_timeout=30,
        pod_resources_dir=plugin_dir / "pod-resources",
    )


@contextlib.asynccontextmanager
async def node_stack(
    sim: RunningApiServer,
    plugin_dir: Path,
    host_root: Path | None,
    devices: Path,
    *,
    pod_resources: bool = True,
    **overrides: Any,
) -> AsyncIterator[tuple[KubeletStandIn, RunningPlugin]]:
    """The kubelet stand-in and the plugin (``overrides``: Settings fields), registered and
    advertising its GPUs.  ``pod_resources``: the plugin asks the stand-in's pod-resources API
    (False: it identifies pods without it)."""
    kubelet_settings = stand_in_settings(sim, plugin_dir)
    kubelet = KubeletStandIn(kubelet_settings)
    if pod_resources:
        overrides.setdefault("pod_resources_socket", kubelet_settings.pod_resources_socket)
    settings = plugin_settings(
        url=sim.url, plugin_dir=plugin_dir, devices=devices, host_root=host_root, **overrides
    )
    async with kubelet, serving(settings) as plugin:
        await eventually(plugin.ready, what="plugin registered with the kubelet")
        # The scheduler binds only to nodes whose allocatable shows the devices.
        await eventually(lambda: resource_counts(kubelet)[1] > 0, what="kubelet knows the GPUs")
        yield kubelet, plugin


def annotations_of(sim: RunningApiServer, kind: str, name: str) -> dict[str, str]:
    namespace = "default" if kind == "pods" else None
    return dict(ObjectView(sim.server.get(kind, name, namespace=namespace)).annotations)


def phase(sim: RunningApiServer, name: str) -> str | None:
    pod = sim.server.try_get("pods", name, namespace="default")
    return None if pod is None else PodView(pod).phase


def events_for(sim: RunningApiServer, name: str) -> list[dict[str, Any]]:
    """The plugin's ``AllocateFailed`` Events about the object ``name``."""
    return [
        event
        for event in sim.server.list("events")
        if event.get("reason") == EVENT_REASON
        and (event.get("involvedObject") or {}).get("name") == name
    ]


async def submit(sim: RunningApiServer, pod: dict[str, Any], *, lock: bool = True) -> None:
    """Create the pod, take the node lock for it (as Bind does), then bind it."""
    await sim.server.create("pods", pod)
    name = PodView(pod).name
    if lock:
        await sim.server.patch(
            "nodes",
            NODE,
            {"metadata": {"annotations": lock_annotation("default", name)}},
            patch_type="merge",
        )
    await sim.server.bind("default", name, NODE)


@contextlib.asynccontextmanager
async def registration_server(
    plugin_dir: Path, servicer: api_pb2_grpc.RegistrationServicer
) -> AsyncIterator[None]:
    """``servicer`` as the kubelet's ``Registration`` service on ``<plugin_dir>/kubelet.sock``
    (a kubelet that misbehaves in the way the servicer says)."""
    server = grpc.aio.server()
    api_pb2_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{plugin_dir / KUBELET_SOCKET_NAME}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(None)


@contextlib.asynccontextmanager
async def log_lines(stream: asyncio.StreamReader) -> AsyncIterator[list[dict[str, Any]]]:
    """A child process's JSON log lines, as they arrive."""
    lines: list[dict[str, Any]] = []

    async def follow() -> None:
        async for raw in stream:
            with contextlib.suppress(ValueError):
                lines.append(json.loads(raw))

    task = asyncio.create_task(follow(), name="test-process-logs")
    try:
        yield lines
    finally:
        async with asyncio.timeout(10):
            await task  # ends with the process's stderr


@contextlib.asynccontextmanager
async def python_process(
    *args: str,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[dict[str, Any]]]]:
    """``python <args>`` and its JSON log lines (stderr); killed on the way out if it still
    runs."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    async with log_lines(process.stderr) as lines:
        try:
            yield process, lines
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@contextlib.contextmanager
def api_server_hung(sim: RunningApiServer) -> Iterator[None]:
    """Within the block kubesim's API server stops answering: every request waits an hour."""
    sim.server.inject_latency(3600.0)
    try:
        yield
    finally:
        sim.server.clear_faults()


async def terminate(process: asyncio.subprocess.Process, *, within: float) -> float:
    """SIGTERM, then wait at most ``within`` seconds for the exit; the seconds it took."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(within):
        await process.wait()
    return time.monotonic() - started


def named(lines: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == event]


async def http_get(port: int, path: str) -> tuple[int, str]:
    """``GET http://127.0.0.1:<port><path>``: the status and the body (the metrics site)."""
    url = f"http://127.0.0.1:{port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()
