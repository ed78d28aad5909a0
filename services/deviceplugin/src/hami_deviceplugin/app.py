"""Wiring: backends, inventories, gRPC servers, kubelet links, registration loop, node and pod
watches, metrics, all on one :class:`~hami_runtime.lifecycle.Lifecycle`.

Two device plugins run in one process: the GPU plugin and, when enabled, the RDMA NIC plugin
(its own socket, kubelet registration, ListAndWatch and Allocate; the same identity rule, pod and
node watches, pod-resources client and allocation lock as the GPU plugin).

:func:`run` enters these steps in dependency order; a shutdown (SIGTERM/SIGINT, the stop event,
or a background loop failing) leaves them in reverse, each under its bound and all within
``--shutdown-grace-period`` (``settings.shutdown_grace_s``):

==================== ========================================= ===============================
step                 entered                                   left (reverse order)
==================== ========================================= ===============================
api-client           the Kubernetes client                     closed
gpu-backend          the GPU backend opened                    closed (NVML shut down)
events, events-flush the Event writer                          queued Events flushed (≤ 2 s),
                                                               then the writer cancelled
pod-resources        — (the kubelet's pod-resources client)    its channel closed
feeds                backend health, NIC rescans               cancelled
node                 registration loop, node watch, and the    cancelled
                     watch of the pods bound to this node
                     (Allocate reads pods and lock there)
metrics-site         ``/metrics``, ``/healthz``, ``/readyz``   stopped
allocation-cleanups  —                                         clean-ups of cut-off Allocates
                                                               finish (bounded)
plugin-servers       each plugin serves its socket             servers stopped: ListAndWatch
                                                               streams ended, in-flight calls
                                                               get 1 s, sockets removed
kubelet-links        each plugin registers (after serving;     cancelled
                     again after a kubelet restart)
==================== ========================================= ===============================

The GPU backend starting with ``--fail-on-init-error=false`` runs with no GPUs when it cannot
start; the NIC source is opened unless RDMA is off.  A step that overruns is logged as
``shutdown_step_timed_out`` with the tasks still running, and left behind, so a peer that hangs
(a kubelet that stops reading its ListAndWatch stream, an API server that stops answering) cannot
keep the daemon from exiting.  The last log line of a clean stop is ``device plugin stopped``
with the node's name.

``/readyz`` answers 200 while every plugin serves its socket and is registered with the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import structlog

from hami_deviceplugin.allocation.flow import FlowConfig
from hami_deviceplugin.allocation.node_pods import NodePods
from hami_deviceplugin.allocation.sources import AllocationSources
from hami_deviceplugin.devices.change_feed import follow_source
from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.gpu.allocator import Allocator, AllocatorConfig
from hami_deviceplugin.gpu.backends.base import CLOSE_WITHIN_S, Backend, Gpu
from hami_deviceplugin.gpu.backends.choice import choose_backend
from hami_deviceplugin.gpu.backends.fake import FakeBackend
from hami_deviceplugin.gpu.hostdirs import HostDirs
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.mig.control import MigControl
from hami_deviceplugin.gpu.mig.manager import MigManager
from hami_deviceplugin.gpu.plan import AllocateOptions
from hami_deviceplugin.gpu.servicer import DevicePluginService
from hami_deviceplugin.kubelet.link import KubeletLink
from hami_deviceplugin.kubelet.podresources import PodResourcesClient
from hami_deviceplugin.kubelet.server import PluginServer
from hami_deviceplugin.metrics import PluginMetrics, plugin_version
from hami_deviceplugin.node.registrar import Registrar
from hami_deviceplugin.rdma.inventory import NicInventory
from hami_deviceplugin.rdma.sources import NicSource
from hami_deviceplugin.rdma.wiring import (
    RunningRdma,
    follow_nics,
    make_nic_source,
    open_nics,
    rdma_plugin,
)
from hami_deviceplugin.settings import Settings
from hami_kube.events import EventRecorder
from hami_kube.rest import KubeClient, open_client
from hami_runtime.embedded import embedded
from hami_runtime.lifecycle import Lifecycle
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, site

__all__ = [
    "COMPONENT",
    "EVENT_COMPONENT",
    "RunningPlugin",
    "allocate_options",
    "follow_backend",
    "make_backend",
    "open_backend",
    "run",
    "serving",
    "starting",
]

log = structlog.get_logger("hami_deviceplugin")

COMPONENT: Final = "deviceplugin"
"""The lifecycle's name: its log lines and task names (``deviceplugin-node-register``, ...)."""

EVENT_COMPONENT: Final = "hami-device-plugin"

EVENT_FLUSH_S: Final = 2.0
"""How long queued Events may take to reach the API server on shutdown."""

CLOSE_S: Final = 2.0
"""The bound of the quick exits: the client, the metrics site, the loops' cancellation."""


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
    node_pods: NodePods
    """The pods bound to this node, as Allocate reads them."""
    rdma: RunningRdma | None = None
    """None when the RDMA plugin does not run."""
    mig: MigManager | None = None
    """The MIG manager on a ``mig`` node."""

    def ready(self) -> bool:
        return _ready(self.server, self.link, self.rdma)

    @property
    def servers(self) -> tuple[PluginServer, ...]:
        """Every plugin's server, the GPU plugin's first."""
        return (self.server,) if self.rdma is None else (self.server, self.rdma.server)

    async def drain_allocations(self) -> None:
        """Let the clean-ups of Allocates cut off by the servers' stop finish (bounded)."""
        drains = [self.allocator.drain()]
        if self.rdma is not None:
            drains.append(self.rdma.allocator.drain())
        await asyncio.gather(*drains)


def _ready(server: PluginServer, link: KubeletLink, rdma: RunningRdma | None) -> bool:
    """``/readyz``: every plugin serves its socket and is registered with the kubelet."""
    gpu_ready = server.serving and link.registered
    return gpu_ready and (rdma is None or rdma.ready())


def allocate_options(settings: Settings) -> AllocateOptions:
    """What HAMi-core's env depends on besides the devices (the DRA mode's CDI specs use the
    same, so a claim's container gets what Allocate would give)."""
    node = settings.node
    return AllocateOptions(
        node_name=settings.node_name,
        memory_scaling=node.device_memory_scaling,
        disable_core_limit=settings.disable_core_limit,
        lib_cuda_log_level=node.lib_cuda_log_level,
    )


def starting(
    settings: Settings, stop: asyncio.Event | None, backend: Backend | None
) -> tuple[asyncio.Event, Backend, PluginMetrics]:
    """What every mode starts from: the stop event (SIGTERM/SIGINT set it when none is given),
    the configuration warnings logged, the GPU backend and the metrics."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop, component=COMPONENT)
    for warning in settings.config_warnings:
        log.warning("configuration", note=warning)
    return stop, backend or make_backend(settings), PluginMetrics(node=settings.node_name)


def make_backend(settings: Settings) -> Backend:
    return choose_backend(
        settings.device_backend,
        sysfs_root=settings.sysfs_root,
        fake_devices=settings.fake_devices,
        fake_poll_interval_s=settings.fake_poll_interval_s,
        health=settings.health,
        preconfigured_memory_mib=settings.node.preconfigured_device_memory,
    )


async def open_backend(backend: Backend, settings: Settings) -> tuple[Gpu, ...]:
    try:
        return await backend.open()
    except BackendError as exc:
        if settings.fail_on_init_error:
            raise
        log.error("GPU backend failed; running with no GPUs", backend=backend.name, error=str(exc))
        return ()


def make_mig_control(backend: Backend, fake_state: Path | None = None) -> MigControl | None:
    """The backend's MIG (None: this backend has none); the fake keeps it in ``fake_state``."""
    if isinstance(backend, FakeBackend):
        return backend.mig_control(fake_state)
    mig_control = getattr(backend, "mig_control", None)
    return None if mig_control is None else cast("MigControl", mig_control())


async def follow_backend(backend: Backend, replace: Callable[[tuple[Gpu, ...]], bool]) -> None:
    await follow_source(
        backend.updates(), replace, event="GPU inventory changed", key=lambda g: g.uuid
    )


async def _start_mig(
    settings: Settings,
    backend: Backend,
    *,
    inventory: Inventory,
    sources: AllocationSources,
    lock: asyncio.Lock,
) -> MigManager | None:
    """On a ``mig`` node: the MIG manager, its start-up pass done (None on other nodes)."""
    if settings.node.operating_mode != "mig":
        return None
    control = make_mig_control(backend, settings.fake_mig_state)
    if control is None:
        raise BackendError(f"the {backend.name} backend cannot drive MIG")
    mig = MigManager(
        control=control,
        inventory=inventory,
        allowlist=settings.mig_allowlist,
        pods=sources.pods,
        lock=lock,
        lock_file=settings.mig_lock_file,
        interval=settings.mig_reconcile_interval_s,
    )
    await mig.start()
    return mig


@contextlib.asynccontextmanager
async def _plugin_servers(servers: tuple[PluginServer, ...]) -> AsyncIterator[None]:
    """Serve every plugin's socket for the block (before any registers: the kubelet dials back
    inside ``Register``); stop them all on the way out, whatever ends it."""
    try:
        for server in servers:
            await server.start()
        yield
    finally:
        for server in servers:
            await server.stop()


def _gpu_plugin(
    settings: Settings,
    *,
    client: KubeClient,
    sources: AllocationSources,
    recorder: EventRecorder,
    inventory: Inventory,
    metrics: PluginMetrics,
    lock: asyncio.Lock,
    mig: MigManager | None = None,
) -> tuple[Allocator, PluginServer, KubeletLink]:
    """The GPU plugin's parts (the RDMA plugin's are
    :func:`~hami_deviceplugin.rdma.wiring.rdma_plugin`)."""
    node = settings.node
    allocator = Allocator(
        client=client,
        sources=sources,
        inventory=inventory,
        host_dirs=HostDirs(settings.host_root, plugin_version=plugin_version()),
        metrics=metrics,
        recorder=recorder,
        config=AllocatorConfig(
            flow=FlowConfig(node_name=settings.node_name, timeout_s=settings.allocate_timeout_s),
            hook_path=settings.hook_path,
            options=allocate_options(settings),
            resource_name=settings.resource_name,
        ),
        lock=lock,
        mig=mig,
    )
    service = DevicePluginService(
        inventory=inventory,
        allocator=allocator,
        split=node.device_split_count,
        numa_topology=node.enable_numa_topology,
    )
    server = PluginServer(settings.socket_path, service)
    link = KubeletLink(
        server=server,
        kubelet_socket=settings.kubelet_socket,
        resource_name=settings.resource_name,
        metrics=metrics,
        poll_interval=settings.kubelet_poll_interval_s,
    )
    return allocator, server, link


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningPlugin], None] | None = None,
    backend: Backend | None = None,
    nic_source: NicSource | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given); the steps are
    described in the module docstring."""
    stop, backend, metrics = starting(settings, stop, backend)
    nic_source = nic_source or make_nic_source(settings)
    node_name = settings.node_name
    async with Lifecycle(COMPONENT, grace_s=settings.shutdown_grace_s) as life:
        client = await life.enter("api-client", open_client(settings.kube), within=CLOSE_S)
        life.on_exit("gpu-backend", backend.close, within=CLOSE_WITHIN_S)
        gpus = await open_backend(backend, settings)
        nics = await open_nics(nic_source, settings)

        recorder = EventRecorder(client, component=EVENT_COMPONENT, host=node_name)
        events = await life.tasks("events", within=CLOSE_S)
        events.spawn("events", recorder.run())
        life.on_exit("events-flush", recorder.flush, within=EVENT_FLUSH_S)

        node = settings.node
        inventory = Inventory(gpus, filters=node.filter_devices, split=node.device_split_count)
        inventory.subscribe(metrics.set_gpus)
        nic_inventory = None if nics is None else NicInventory(nics)
        pod_resources = PodResourcesClient(settings.pod_resources_socket)
        registrar = Registrar(
            client=client,
            node_name=node_name,
            inventory=inventory,
            node=node,
            metrics=metrics,
            interval=settings.register_interval_s,
            retry_interval=settings.register_retry_interval_s,
            nics=nic_inventory,
            identity=pod_resources.identity,
            links=backend.links if settings.enable_topology_score else None,
            recorder=recorder,
            mig_allowlist=settings.mig_allowlist,
            capacity_totals=settings.advertise_capacity_totals,
        )
        life.on_exit("pod-resources", pod_resources.close, within=CLOSE_S)
        life.on_exit("allocate-identity", registrar.withdraw_identity, within=CLOSE_S)
        sources = AllocationSources(
            pods=NodePods(client, node_name),
            node=registrar.cached_node,
            pod_resources=pod_resources,
        )
        lock = asyncio.Lock()  # one allocation at a time, GPU and RDMA alike
        mig = await _start_mig(settings, backend, inventory=inventory, sources=sources, lock=lock)
        rdma = (
            None
            if nic_inventory is None
            else rdma_plugin(
                settings,
                source=nic_source,
                inventory=nic_inventory,
                client=client,
                sources=sources,
                metrics=metrics,
                recorder=recorder,
                lock=lock,
            )
        )
        allocator, server, link = _gpu_plugin(
            settings,
            client=client,
            sources=sources,
            recorder=recorder,
            inventory=inventory,
            metrics=metrics,
            lock=lock,
            mig=mig,
        )

        feeds = await life.tasks("feeds", within=CLOSE_S)
        feeds.spawn(
            "health", follow_backend(backend, inventory.replace if mig is None else mig.apply)
        )
        if rdma is not None:
            feeds.spawn("rdma-nics", follow_nics(rdma.source, rdma.inventory))

        node_loops = await life.tasks("node", within=CLOSE_S)
        node_loops.spawn("node-register", registrar.run())
        node_loops.spawn("node-watch", registrar.node_watch.run())
        node_loops.spawn("pod-watch", sources.pods.reflector.run())
        if mig is not None:
            node_loops.spawn("mig-reconcile", mig.run())

        metrics_port = await life.enter(
            "metrics-site",
            site(
                metrics_app(metrics.registry, ready=lambda: _ready(server, link, rdma)),
                settings.metrics_bind_address,
                within=CLOSE_S,
            ),
            within=CLOSE_S,
        )
        running = RunningPlugin(
            settings=settings,
            metrics_port=metrics_port,
            inventory=inventory,
            server=server,
            link=link,
            registrar=registrar,
            allocator=allocator,
            metrics=metrics,
            node_pods=sources.pods,
            rdma=rdma,
            mig=mig,
        )
        life.on_exit("allocation-cleanups", running.drain_allocations)
        await life.enter("plugin-servers", _plugin_servers(running.servers))
        links = await life.tasks("kubelet-links", within=CLOSE_S)
        links.spawn("kubelet-link", link.run())
        if rdma is not None:
            links.spawn("rdma-kubelet-link", rdma.link.run())

        log.info(
            "device plugin started",
            node=node_name,
            backend=backend.name,
            resource=settings.resource_name,
            socket=str(server.socket_path),
            gpus=[g.uuid for g in inventory.gpus],
            split=settings.node.device_split_count,
            metrics_port=metrics_port,
            rdma_resource=None if rdma is None else settings.rdma_resource_name,
            rdma_nics=None if rdma is None else [n.id for n in rdma.inventory.nics],
            topology_score=settings.enable_topology_score,
            operating_mode=settings.node.operating_mode,
        )
        if on_started is not None:
            on_started(running)
        await life.run_until(stop)
        log.info("device plugin stopping", node=node_name)
    log.info("device plugin stopped", node=node_name)


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

    async with embedded(
        start,
        name="hami-deviceplugin",
        grace_s=settings.shutdown_grace_s,
    ) as running:
        yield running
