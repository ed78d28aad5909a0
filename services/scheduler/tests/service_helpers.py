"""Builders and harnesses for the service tests: registered nodes, pods, a running scheduler
against the emulated API server, extender calls over HTTP, and polling with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from hami_kube.backoff import BackoffPolicy
from hami_kube.objects import ObjectView
from hami_kube.reflector import ReflectorConfig
from hami_kube.timefmt import utc_now
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver
from hami_kubesim.vendors.inventory import VendorDevices, node_annotations
from hami_protocol import keys
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.node.handshake import format_reported
from hami_protocol.node.registry import (
    DeviceInfo,
    encode_node_devices_colon,
    encode_node_devices_json,
)
from hami_protocol.pod.devices import ContainerDevice, decode_pod_devices_canonical
from hami_protocol.vendor.table import vendor_by_word, vendors_from_config
from hami_scheduler.app import RunningScheduler, serving
from hami_scheduler.settings import Settings

FAST_REFLECTOR = ReflectorConfig(backoff=BackoffPolicy(initial=0.02, factor=2.0, cap=0.5))
T4 = "NVIDIA-Tesla T4"
MLU_CAPACITY: Mapping[str, str] = {
    "cambricon.com/vmlu": "200",
    "cambricon.com/mlu.smlu.vcore": "200",
    "cambricon.com/mlu.smlu.vmemory": "128",
}
"""Node capacity HAMi synthesises two Cambricon MLUs from (64 × 256 MiB each)."""
MTHREADS_CAPACITY: Mapping[str, str] = {
    "mthreads.com/vgpu": "4",
    "mthreads.com/sgpu-core": "32",
    "mthreads.com/sgpu-memory": "96",
}
"""Node capacity HAMi synthesises two Moore Threads GPUs from."""
DEVICE_CONFIG = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
ALL_VENDORS = vendors_from_config(DEVICE_CONFIG, enable_ascend=True, enable_iluvatar=True)
"""Every vendor of the chart's device configuration, Ascend and Iluvatar enabled."""


def gpus(
    node: str,
    count: int = 2,
    *,
    mem: int = 8000,
    cores: int = 100,
    split: int = 10,
    model: str = T4,
    numa: Sequence[int] | None = None,
    mode: str = "hami-core",
    health: bool = True,
) -> list[DeviceInfo]:
    return [
        DeviceInfo(
            id=f"GPU-{node}-{i}",
            index=i,
            count=split,
            devmem=mem,
            devcore=cores,
            type=model,
            numa=numa[i] if numa else 0,
            health=health,
            mode=mode,
        )
        for i in range(count)
    ]


def register_annotations(
    devices: Iterable[DeviceInfo], *, colon: bool = False, reported: bool = True
) -> dict[str, str]:
    listed = list(devices)
    value = encode_node_devices_colon(listed) if colon else encode_node_devices_json(listed)
    annotations = {keys.NVIDIA_REGISTER: value}
    if reported:
        annotations[keys.NVIDIA_HANDSHAKE] = format_reported(datetime.now(UTC))
    return annotations


def node_object(
    name: str,
    annotations: Mapping[str, str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    meta["labels"].update(labels or {})
    if annotations:
        meta["annotations"] = dict(annotations)
    status: dict[str, Any] = {
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", **(allocatable or {})},
        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110", **(allocatable or {})},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": status}


def gpu_limits(
    count: int = 1, *, mem: int | None = None, cores: int | None = None
) -> dict[str, str]:
    limits = {"nvidia.com/gpu": str(count)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return limits


def container(name: str = "main", limits: Mapping[str, str] | None = None) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits is not None:
        ctr["resources"] = {"limits": dict(limits)}
    return ctr


def pod_object(
    name: str,
    *containers: dict[str, Any],
    namespace: str = "default",
    init: Sequence[dict[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: str = "hami-scheduler",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": list(containers) or [container(limits=gpu_limits())],
    }
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@dataclass
class Harness:
    """A scheduler served in-process against an emulated API server."""

    sim: RunningApiServer
    scheduler: RunningScheduler
    http: aiohttp.ClientSession
    ssl_context: ssl.SSLContext | None = None

    @property
    def api(self) -> ApiServer:
        return self.sim.server

    @staticmethod
    def loop_time() -> float:
        return asyncio.get_running_loop().time()

    async def post(self, verb: str, body: Any, *, raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        async with self.http.post(
            f"{self.scheduler.url()}/{verb}",
            data=data,
            headers={"Content-Type": "application/json"},
            ssl=self.ssl_context if self.ssl_context is not None else False,
        ) as response:
            text = await response.read()
            return response.status, json.loads(text) if text else None

    async def filter(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
        status, reply = await self.post(
            "filter", {"Pod": pod, "Nodes": None, "NodeNames": list(nodes)}
        )
        assert status == 200, reply
        assert isinstance(reply, dict)
        return reply

    async def bind(self, pod: Mapping[str, Any], node: str) -> str:
        meta = pod["metadata"]
        status, reply = await self.post(
            "bind",
            {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta.get("uid", ""),
                "Node": node,
            },
        )
        assert status == 200, reply
        return str(reply["Error"])

    async def filtered(self, name: str, node: str = "n", **labels: str) -> dict[str, Any]:
        """A pod asking one GPU (1000 MiB), created and filtered onto ``node`` (single mode)."""
        pod = await self.add_pod(
            pod_object(name, container(limits=gpu_limits(1, mem=1000)), labels=labels or None)
        )
        assert (await self.filter(pod, [node]))["NodeNames"] == [node]
        return pod

    async def schedule(self, pod: Mapping[str, Any], nodes: Sequence[str]) -> dict[str, Any]:
        """Filter, bind to the chosen node and play the device plugin's part (:meth:`allocated`)
        — what kube-scheduler and the node do for a pod; returns the filter's reply."""
        reply = await self.filter(pod, nodes)
        if reply["NodeNames"]:
            node = reply["NodeNames"][0]
            assert await self.bind(pod, node) == ""
            meta = pod["metadata"]
            await self.allocated(meta["name"], node, namespace=meta["namespace"])
        return reply

    async def allocated(self, name: str, node: str, *, namespace: str = "default") -> None:
        """What the device plugin writes once the pod's Allocate is served: ``bind-phase:
        success``, then the node lock released."""
        await self.api.patch(
            "pods",
            name,
            {"metadata": {"annotations": {keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS}}},
            namespace=namespace,
            patch_type="merge",
        )
        await self.api.patch(
            "nodes", node, {"metadata": {"annotations": {keys.NODE_LOCK: None}}}, patch_type="merge"
        )

    async def set_lock(self, value: str, node: str = "n") -> None:
        """Write ``hami.io/mutex.lock`` on ``node`` as another writer would."""
        await self.api.patch(
            "nodes",
            node,
            {"metadata": {"annotations": {keys.NODE_LOCK: value}}},
            patch_type="merge",
        )

    async def add_node(
        self,
        name: str,
        devices: Iterable[DeviceInfo] | None = None,
        *,
        annotations: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        merged = dict(register_annotations(devices)) if devices is not None else {}
        merged.update(annotations or {})
        return await self.api.create("nodes", node_object(name, merged, **extra))

    async def add_vendor_node(
        self,
        name: str,
        spec: VendorDevices,
        *,
        capacity: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """A node as ``spec``'s device plugin stand-in registers it (its annotations, plus
        ``annotations``; its count resource allocatable, plus ``capacity``), once the scheduler
        has it."""
        allocatable = {spec.profile.count_resource: str(spec.devices), **(capacity or {})}
        notes = {**node_annotations(spec, name, datetime.now(UTC)), **(annotations or {})}
        await self.add_node(name, annotations=notes, allocatable=allocatable, labels=labels)
        await self.synced_node(name)

    async def placed(
        self,
        name: str,
        limits: Mapping[str, str],
        nodes: Sequence[str],
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        """Create the pod, filter it among ``nodes`` and bind it where the extender says (as
        :meth:`schedule`); the node."""
        pod = await self.add_pod(
            pod_object(name, container(limits=limits), annotations=annotations)
        )
        reply = await self.schedule(pod, nodes)
        assert len(reply["NodeNames"]) == 1, reply
        return str(reply["NodeNames"][0])

    async def refusal(
        self,
        name: str,
        limits: Mapping[str, str],
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        """Create the pod and filter it onto ``node`` alone; why the node is refused."""
        pod = await self.add_pod(
            pod_object(name, container(limits=limits), annotations=annotations)
        )
        reply = await self.filter(pod, [node])
        assert not reply["NodeNames"], reply
        return str(refused(reply)[node])

    def grants(self, name: str, word: str, namespace: str = "default") -> list[ContainerDevice]:
        """The devices of vendor ``word`` the pod's allocation annotation grants, in order."""
        row = vendor_by_word(ALL_VENDORS, word)
        assert row is not None
        assert row.devices_allocated_key is not None
        notes = annotations_of(self.pod(name, namespace))
        per_container = decode_pod_devices_canonical(notes[row.devices_allocated_key])
        return [granted for container in per_container for granted in container]

    def granted(self, name: str, word: str, namespace: str = "default") -> list[str]:
        """The device IDs of vendor ``word`` the pod's allocation annotation names, in order."""
        return [granted.uuid for granted in self.grants(name, word, namespace)]

    async def add_pod(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        return await self.api.create("pods", dict(pod))

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.api.get("pods", name, namespace=namespace)

    def node(self, name: str) -> dict[str, Any]:
        return self.api.get("nodes", name)

    async def synced_node(self, name: str) -> None:
        await eventually(lambda: name in self.scheduler.cache.nodes, what=f"{name} registered")

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.api.list("events") if e.get("reason") == reason]


def pinned(word: str, *uuids: str) -> dict[str, str]:
    """The pod annotation that pins a request of vendor ``word`` to devices ``uuids``."""
    row = vendor_by_word(ALL_VENDORS, word)
    assert row is not None
    assert row.use_uuid_key is not None
    return {row.use_uuid_key: ",".join(uuids)}


def settings_for(url: str, **overrides: Any) -> Settings:
    base = Settings(
        http_bind="127.0.0.1:0",
        metrics_bind_address="127.0.0.1:0",
        scheduler_name="hami-scheduler",
    )
    kube = dataclasses.replace(base.kube, kube_url=url, user_agent="hami-scheduler")
    return dataclasses.replace(base, kube=kube, **overrides)


EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def loop_now() -> datetime:
    """UTC time that follows the running loop's clock: under ``@pytest.mark.looptime`` the
    scheduler's handshakes and locks then age in virtual time, as its timers do."""
    return EPOCH + timedelta(seconds=asyncio.get_running_loop().time())


@contextlib.asynccontextmanager
async def scheduler_on(
    sim: RunningApiServer, *, now: Callable[[], datetime] = utc_now, **overrides: Any
) -> AsyncIterator[RunningScheduler]:
    settings = settings_for(sim.url, **overrides)
    async with serving(settings, reflector_config=FAST_REFLECTOR, now=now) as s:
        await eventually(s.ready, what="scheduler caches synced")
        yield s


def vendor_harness(**overrides: Any) -> contextlib.AbstractAsyncContextManager[Harness]:
    """:func:`harness` with :data:`ALL_VENDORS` and the chart's device configuration."""
    return harness(vendors=ALL_VENDORS, device_config=DEVICE_CONFIG, **overrides)


@contextlib.asynccontextmanager
async def harness(
    *, now: Callable[[], datetime] = utc_now, **overrides: Any
) -> AsyncIterator[Harness]:
    async with (
        running_apiserver() as sim,
        scheduler_on(sim, now=now, **overrides) as scheduler,
        aiohttp.ClientSession() as http,
    ):
        yield Harness(sim, scheduler, http)


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(ObjectView(obj).annotations)


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(ObjectView(obj).labels)


def metric(h: Harness, name: str, **labels: str) -> float:
    """A sample of the scheduler's own registry (0 when absent)."""
    value = h.scheduler.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def refused(reply: Mapping[str, Any]) -> dict[str, str]:
    """Every node a filter reply refused, with its reason: ``FailedNodes`` (eviction could
    help) and ``FailedAndUnresolvableNodes`` (it could not) together."""
    return {
        **(reply.get("FailedNodes") or {}),
        **(reply.get("FailedAndUnresolvableNodes") or {}),
    }
