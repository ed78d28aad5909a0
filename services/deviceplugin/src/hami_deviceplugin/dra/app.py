"""Wiring of the DRA mode (``--mode dra``): the node agent as a DRA kubelet plugin, on one
:class:`~hami_runtime.lifecycle.Lifecycle`.

In this mode the process runs neither the device plugin (no ``nvidia.com/gpu`` socket, no
``Register`` with the kubelet) nor the node registration loop: it removes the device-plugin
path's node annotations (``hami.io/node-nvidia-register`` and its handshake, score, identity and
RDMA register; :data:`~hami_deviceplugin.node.register.WITHDRAWN_IN_DRA_MODE`) so the HAMi
extender finds no GPUs on the node and cannot count them a second time.  Instead:

==================== ========================================= ===============================
step                 entered                                   left (reverse order)
==================== ========================================= ===============================
api-client           the Kubernetes client                     closed
gpu-backend          the GPU backend opened                    closed
feeds                backend health → inventory                cancelled
dra-checkpoint       prepared claims read from the state dir   —
metrics-site         ``/metrics``, ``/healthz``, ``/readyz``   stopped
dra-sockets          ``dra.sock`` then the registration socket both stopped, files removed
node                 slice publisher, annotation withdrawal    cancelled
==================== ========================================= ===============================

``/readyz`` answers 200 while both sockets serve and the kubelet has confirmed the registration.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from hami_deviceplugin.app import (
    CLOSE_S,
    COMPONENT,
    allocate_options,
    follow_backend,
    open_backend,
    starting,
)
from hami_deviceplugin.dra.driver import DraDriver, DriverConfig
from hami_deviceplugin.dra.publisher import SlicePublisher
from hami_deviceplugin.dra.slices import SliceOptions
from hami_deviceplugin.dra.sockets import DraSockets
from hami_deviceplugin.gpu.backends.base import CLOSE_WITHIN_S, Backend
from hami_deviceplugin.gpu.hostdirs import HostDirs
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.metrics import plugin_version
from hami_deviceplugin.node.register import annotations_to_withdraw
from hami_deviceplugin.settings import Settings
from hami_kube.errors import KubeError
from hami_kube.objects import NodeView
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES
from hami_kube.rest import KubeClient, open_client
from hami_runtime.embedded import embedded
from hami_runtime.lifecycle import Lifecycle
from hami_runtime.sites import metrics_app, site

__all__ = ["RunningDra", "run_dra", "serving_dra", "withdraw_device_plugin_annotations"]

log = structlog.get_logger("hami_deviceplugin")


@dataclass(frozen=True, slots=True)
class RunningDra:
    """A started DRA-mode service (for tests and the demo)."""

    settings: Settings
    metrics_port: int
    inventory: Inventory
    sockets: DraSockets
    driver: DraDriver
    publisher: SlicePublisher

    def ready(self) -> bool:
        return self.sockets.serving and self.sockets.state.registered


async def withdraw_device_plugin_annotations(
    client: KubeClient, node_name: str, *, retry_interval: float
) -> None:
    """Remove the device-plugin path's annotations from the node (retried until done)."""
    while True:
        try:
            node = await client.get(NODES, node_name)
            removals = annotations_to_withdraw(NodeView(node).annotations)
            if removals:
                await patch_metadata(client, NODES, node_name, annotations=removals)
                log.info("device-plugin annotations removed (DRA mode)", keys=sorted(removals))
            return
        except KubeError as exc:
            log.warning("device-plugin annotations not removed yet", error=str(exc))
            await asyncio.sleep(retry_interval)


def _parts(
    settings: Settings, client: KubeClient, inventory: Inventory
) -> tuple[DraDriver, DraSockets, SlicePublisher]:
    node = settings.node
    driver = DraDriver(
        client=client,
        inventory=inventory,
        host_dirs=HostDirs(settings.host_root, plugin_version=plugin_version()),
        config=DriverConfig(
            node_name=settings.node_name,
            cdi_dir=settings.cdi_dir,
            state_dir=settings.dra_state_dir,
            hook_path=settings.hook_path,
            options=allocate_options(settings),
            memory_scaling=node.device_memory_scaling,
        ),
    )
    publisher = SlicePublisher(
        client=client,
        inventory=inventory,
        options=SliceOptions(
            node_name=settings.node_name,
            shared=node.device_split_count > 1,
            memory_scaling=node.device_memory_scaling,
            core_scaling=node.device_core_scaling,
        ),
        interval=settings.slice_resync_interval_s,
        retry_interval=settings.register_retry_interval_s,
    )
    return driver, DraSockets(settings.kubelet_dir, driver), publisher


@contextlib.asynccontextmanager
async def _served(sockets: DraSockets) -> AsyncIterator[None]:
    try:
        await sockets.start()
        yield
    finally:
        await sockets.stop()


async def run_dra(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningDra], None] | None = None,
    backend: Backend | None = None,
) -> None:
    """Serve the DRA mode until ``stop`` is set (or SIGTERM/SIGINT)."""
    stop, backend, metrics = starting(settings, stop, backend)
    async with Lifecycle(COMPONENT, grace_s=settings.shutdown_grace_s) as life:
        client = await life.enter("api-client", open_client(settings.kube), within=CLOSE_S)
        life.on_exit("gpu-backend", backend.close, within=CLOSE_WITHIN_S)
        gpus = await open_backend(backend, settings)
        node = settings.node
        inventory = Inventory(gpus, filters=node.filter_devices, split=node.device_split_count)
        inventory.subscribe(metrics.set_gpus)
        feeds = await life.tasks("feeds", within=CLOSE_S)
        feeds.spawn("health", follow_backend(backend, inventory.replace))
        driver, sockets, publisher = _parts(settings, client, inventory)
        await driver.load()
        metrics_port = await life.enter(
            "metrics-site",
            site(
                metrics_app(
                    metrics.registry,
                    ready=lambda: sockets.serving and sockets.state.registered,
                ),
                settings.metrics_bind_address,
                within=CLOSE_S,
            ),
            within=CLOSE_S,
        )
        await life.enter("dra-sockets", _served(sockets))
        loops = await life.tasks("node", within=CLOSE_S)
        loops.spawn("slice-publisher", publisher.run())
        loops.spawn(
            "withdraw-annotations",
            withdraw_device_plugin_annotations(
                client, settings.node_name, retry_interval=settings.register_retry_interval_s
            ),
        )
        running = RunningDra(
            settings=settings,
            metrics_port=metrics_port,
            inventory=inventory,
            sockets=sockets,
            driver=driver,
            publisher=publisher,
        )
        log.info(
            "DRA plugin started",
            node=settings.node_name,
            backend=backend.name,
            gpus=[g.uuid for g in inventory.gpus],
            registration=str(sockets.registration_path),
            endpoint=str(sockets.dra_path),
            cdi_dir=str(settings.cdi_dir),
            state_dir=str(settings.dra_state_dir),
        )
        if on_started is not None:
            on_started(running)
        await life.run_until(stop)
        log.info("DRA plugin stopping", node=settings.node_name)
    log.info("DRA plugin stopped", node=settings.node_name)


@contextlib.asynccontextmanager
async def serving_dra(
    settings: Settings, *, backend: Backend | None = None
) -> AsyncIterator[RunningDra]:
    """Run the DRA mode in this event loop for the duration of the block."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningDra], None]
    ) -> Coroutine[Any, Any, None]:
        return run_dra(settings, stop=stop, on_started=on_started, backend=backend)

    async with embedded(
        start, name="hami-deviceplugin-dra", grace_s=settings.shutdown_grace_s
    ) as r:
        yield r
