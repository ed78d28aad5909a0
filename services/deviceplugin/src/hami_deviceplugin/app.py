"""Wiring: backends, inventories, gRPC servers, kubelet links, registration loop, node watch,
metrics.

Two device plugins run in one process: the GPU plugin and, when enabled, the RDMA NIC plugin
(its own socket, kubelet registration, ListAndWatch and Allocate; the same node lock, pod lookup
and allocation lock as the GPU plugin).

Lifecycle of :func:`run`:

1. open the GPU backend (``--fail-on-init-error=false`` runs with no GPUs when it cannot start),
   the NIC source unless RDMA is off, and the Kubernetes client; serve ``/metrics``,
   ``/healthz``, ``/readyz``;
2. under one TaskGroup: the backend's health updates, the NIC rescans, the kubelet links (each
   serves its plugin socket *before* registering, re-registers after a kubelet restart), the
   registration loop and the node watch, the Event writer, the usage sampler;
3. wait for the stop event (SIGTERM/SIGINT when run as a process);
4. shut down in order: cancel the loops, stop the gRPC server (in-flight calls get a short grace,
   the socket is removed), let cancelled allocations clean up, flush queued Events, stop the
   metrics site, close the backend and the client.

``/readyz`` answers 200 while every plugin serves its socket and is registered with the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from hami_deviceplugin.change_feed import follow_source
from hami_deviceplugin.gpu.allocator import Allocator, AllocatorConfig
from hami_deviceplugin.gpu.backends.base import Backend, BackendError, Gpu, NicSource
from hami_deviceplugin.gpu.backends.fake import FakeBackend
from hami_deviceplugin.gpu.backends.nvml import NvmlBackend
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.plan import AllocateOptions
from hami_deviceplugin.hostdirs import HostDirs
from hami_deviceplugin.kubelet.link import KubeletLink
from hami_deviceplugin.kubelet.server import DevicePluginService, PluginServer
from hami_deviceplugin.metrics import PluginMetrics, plugin_version
from hami_deviceplugin.node.registrar import Registrar
from hami_deviceplugin.rdma.wiring import (
    RunningRdma,
    follow_nics,
    make_nic_source,
    open_nics,
    rdma_plugin,
)
from hami_deviceplugin.settings import Settings
from hami_kube.events import EventRecorder
from hami_kube.rest import open_client
from hami_runtime.embedded import embedded
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, start_site

__all__ = [
    "EVENT_COMPONENT",
    "RunningPlugin",
    "RunningRdma",
    "make_backend",
    "make_nic_source",
    "run",
    "serving",
]

log = structlog.get_logger("hami_deviceplugin")

EVENT_COMPONENT = "hami-device-plugin"


@dataclass(frozen=True, slots=True)
class RunningPlugin:
    """A started service (for tests, the demo and the benchmark)."""

    settings: Settings
    metrics_port: int
    inventory: Inventory
    server: PluginServer
    link: KubeletLink
    registrar: Registrar
    allocator: Allocator
    metrics: PluginMetrics
    rdma: RunningRdma | None = None
    """None when the RDMA plugin does not run."""

    def ready(self) -> bool:
        return _ready(self.server, self.link, self.rdma)


def _ready(server: PluginServer, link: KubeletLink, rdma: RunningRdma | None) -> bool:
    """``/readyz``: every plugin serves its socket and is registered with the kubelet."""
    gpu_ready = server.serving and link.registered
    return gpu_ready and (rdma is None or rdma.ready())


def make_backend(settings: Settings) -> Backend:
    if settings.device_backend == "fake":
        assert settings.fake_devices is not None  # checked by Settings
        return FakeBackend(
            settings.fake_devices,
            sysfs_root=settings.sysfs_root,
            poll_interval=settings.fake_poll_interval_s,
        )
    return NvmlBackend(
        sysfs_root=settings.sysfs_root,
        health=settings.health,
        preconfigured_memory_mib=settings.node.preconfigured_device_memory,
    )


async def _open_backend(backend: Backend, settings: Settings) -> tuple[Gpu, ...]:
    try:
        return await backend.open()
    except BackendError as exc:
        if settings.fail_on_init_error:
            raise
        log.error("GPU backend failed; running with no GPUs", backend=backend.name, error=str(exc))
        return ()


async def _follow_backend(backend: Backend, inventory: Inventory) -> None:
    await follow_source(
        backend.updates(), inventory.replace, event="GPU inventory changed", key=lambda g: g.uuid
    )


async def _sample_usage(
    backend: Backend, inventory: Inventory, metrics: PluginMetrics, interval: float
) -> None:
    while True:
        try:
            metrics.set_usage(inventory.gpus, await backend.usage())
        except BackendError as exc:
            log.warning("GPU usage sample failed", error=str(exc))
        await asyncio.sleep(interval)


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningPlugin], None] | None = None,
    backend: Backend | None = None,
    nic_source: NicSource | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given)."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    for warning in settings.config_warnings:
        log.warning("configuration", note=warning)
    backend = backend or make_backend(settings)
    metrics = PluginMetrics(node=settings.node_name)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(backend.close)
        gpus = await _open_backend(backend, settings)
        nic_source = nic_source or make_nic_source(settings)
        nics = await open_nics(nic_source, settings)
        client = await stack.enter_async_context(open_client(settings.kube))
        allocation_lock = asyncio.Lock()
        node = settings.node
        inventory = Inventory(gpus, filters=node.filter_devices, split=node.device_split_count)
        inventory.subscribe(metrics.set_gpus)
        recorder = EventRecorder(client, component=EVENT_COMPONENT, host=settings.node_name)
        allocator = Allocator(
            client=client,
            inventory=inventory,
            host_dirs=HostDirs(settings.host_root, plugin_version=plugin_version()),
            metrics=metrics,
            recorder=recorder,
            config=AllocatorConfig(
                node_name=settings.node_name,
                hook_path=settings.hook_path,
                timeout_s=settings.allocate_timeout_s,
                options=AllocateOptions(
                    node_name=settings.node_name,
                    memory_scaling=node.device_memory_scaling,
                    disable_core_limit=settings.disable_core_limit,
                    lib_cuda_log_level=node.lib_cuda_log_level,
                    use_kubelet_devices=node.enable_get_preferred_allocation,
                ),
            ),
            lock=allocation_lock,
        )
        rdma = (
            None
            if nics is None
            else rdma_plugin(
                settings,
                source=nic_source,
                nics=nics,
                client=client,
                metrics=metrics,
                recorder=recorder,
                lock=allocation_lock,
            )
        )
        service = DevicePluginService(
            inventory=inventory,
            allocator=allocator,
            split=node.device_split_count,
            numa_topology=node.enable_numa_topology,
            preferred_available=node.enable_get_preferred_allocation,
        )
        server = PluginServer(settings.socket_path, service)
        link = KubeletLink(
            server=server,
            kubelet_socket=settings.kubelet_socket,
            resource_name=settings.resource_name,
            preferred_available=node.enable_get_preferred_allocation,
            metrics=metrics,
            poll_interval=settings.kubelet_poll_interval_s,
        )
        registrar = Registrar(
            client=client,
            node_name=settings.node_name,
            inventory=inventory,
            node=node,
            metrics=metrics,
            interval=settings.register_interval_s,
            retry_interval=settings.register_retry_interval_s,
            nics=None if rdma is None else rdma.inventory,
        )
        metrics_runner, metrics_port = await start_site(
            metrics_app(metrics.registry, ready=lambda: _ready(server, link, rdma)),
            settings.metrics_bind_address,
        )
        stack.push_async_callback(metrics_runner.cleanup)
        running = RunningPlugin(
            settings=settings,
            metrics_port=metrics_port,
            inventory=inventory,
            server=server,
            link=link,
            registrar=registrar,
            allocator=allocator,
            metrics=metrics,
            rdma=rdma,
        )
        await _serve(
            settings,
            running=running,
            backend=backend,
            recorder=recorder,
            stop=stop,
            on_started=on_started,
        )


async def _serve(
    settings: Settings,
    *,
    running: RunningPlugin,
    backend: Backend,
    recorder: EventRecorder,
    stop: asyncio.Event,
    on_started: Callable[[RunningPlugin], None] | None,
) -> None:
    node = settings.node_name
    rdma = running.rdma
    try:
        # Serving before registering: the kubelet dials back inside Register.
        await running.server.start()
        if rdma is not None:
            await rdma.server.start()
        async with asyncio.TaskGroup() as group:
            events = group.create_task(recorder.run(), name="deviceplugin-events")
            loops = [
                group.create_task(
                    _follow_backend(backend, running.inventory), name="deviceplugin-health"
                ),
                group.create_task(running.link.run(), name="deviceplugin-kubelet-link"),
                group.create_task(running.registrar.run(), name="deviceplugin-node-register"),
                group.create_task(
                    running.registrar.node_reflector().run(), name="deviceplugin-node-watch"
                ),
                group.create_task(
                    _sample_usage(
                        backend, running.inventory, running.metrics, settings.usage_interval_s
                    ),
                    name="deviceplugin-usage",
                ),
            ]
            if rdma is not None:
                loops.append(
                    group.create_task(
                        follow_nics(rdma.source, rdma.inventory), name="deviceplugin-rdma-nics"
                    )
                )
                loops.append(
                    group.create_task(rdma.link.run(), name="deviceplugin-rdma-kubelet-link")
                )
            log.info(
                "device plugin started",
                node=node,
                backend=backend.name,
                resource=settings.resource_name,
                socket=str(running.server.socket_path),
                gpus=[g.uuid for g in running.inventory.gpus],
                split=settings.node.device_split_count,
                metrics_port=running.metrics_port,
                rdma_resource=None if rdma is None else settings.rdma_resource_name,
                rdma_nics=None if rdma is None else [n.id for n in rdma.inventory.nics],
            )
            if on_started is not None:
                on_started(running)
            await stop.wait()
            log.info("device plugin stopping", node=node)
            for task in loops:
                task.cancel()
            # No new calls from the kubelet, then let failed allocations finish their clean-up
            # and their Events reach the API server.
            await running.server.stop()
            if rdma is not None:
                await rdma.server.stop()
                await rdma.allocator.drain()
            await running.allocator.drain()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await recorder.flush()
            events.cancel()
    finally:
        await running.server.stop()
        if rdma is not None:
            await rdma.server.stop()
    log.info("device plugin stopped", node=node)


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, *, backend: Backend | None = None, nic_source: NicSource | None = None
) -> AsyncIterator[RunningPlugin]:
    """Run the service in this event loop for the duration of the block."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningPlugin], None]
    ) -> Coroutine[Any, Any, None]:
        return run(
            settings, stop=stop, on_started=on_started, backend=backend, nic_source=nic_source
        )

    async with embedded(start, name="hami-deviceplugin") as running:
        yield running
