"""Wiring of the RDMA NIC plugin: its NIC source, inventory, allocator, gRPC server and kubelet
link (the GPU plugin's wiring is :mod:`hami_deviceplugin.app`, which runs both).

Whether it runs (``--enable-rdma``): ``false`` never looks for NICs; ``true`` always serves (a
failed discovery stops the daemon under ``--fail-on-init-error``, else it serves no NICs);
``auto`` serves when discovery finds NICs at start.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from hami_deviceplugin.allocation.flow import FlowConfig
from hami_deviceplugin.allocation.sources import AllocationSources
from hami_deviceplugin.devices.change_feed import follow_source
from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.kubelet.link import KubeletLink
from hami_deviceplugin.kubelet.server import PluginServer
from hami_deviceplugin.metrics import PluginMetrics
from hami_deviceplugin.rdma.allocator import RdmaAllocator
from hami_deviceplugin.rdma.inventory import NicInventory
from hami_deviceplugin.rdma.nics import Nic
from hami_deviceplugin.rdma.servicer import RdmaPluginService
from hami_deviceplugin.rdma.sources import FakeNicSource, NicSource, SysfsNicSource
from hami_deviceplugin.settings import Settings
from hami_kube.events import EventRecorder
from hami_kube.rest import KubeClient

__all__ = ["RunningRdma", "follow_nics", "make_nic_source", "open_nics", "rdma_plugin"]

log = structlog.get_logger("hami_deviceplugin")


@dataclass(frozen=True, slots=True)
class RunningRdma:
    """The RDMA NIC plugin of a started service."""

    source: NicSource
    inventory: NicInventory
    server: PluginServer
    link: KubeletLink
    allocator: RdmaAllocator

    def ready(self) -> bool:
        return self.server.serving and self.link.registered


def make_nic_source(settings: Settings) -> NicSource:
    if settings.nic_source == "fake":
        assert settings.fake_devices is not None  # checked by Settings
        return FakeNicSource(
            settings.fake_devices,
            sysfs_root=settings.sysfs_root,
            poll_interval=settings.fake_poll_interval_s,
        )
    return SysfsNicSource(settings.sysfs_root, poll_interval=settings.rdma_poll_interval_s)


async def open_nics(source: NicSource, settings: Settings) -> tuple[Nic, ...] | None:
    """The NICs found at start; None when the RDMA plugin is not to run."""
    if settings.enable_rdma is False:
        return None
    try:
        nics = await source.open()
    except BackendError as exc:
        if settings.enable_rdma and settings.fail_on_init_error:
            raise
        log.error("RDMA NIC discovery failed", source=source.name, error=str(exc))
        nics = ()
    if settings.enable_rdma is None and not nics:
        log.info("no RDMA NICs found; the RDMA plugin does not run", source=source.name)
        return None
    return nics


async def follow_nics(source: NicSource, inventory: NicInventory) -> None:
    await follow_source(
        source.updates(), inventory.replace, event="RDMA NIC inventory changed", key=lambda n: n.id
    )


def rdma_plugin(
    settings: Settings,
    *,
    source: NicSource,
    inventory: NicInventory,
    client: KubeClient,
    sources: AllocationSources,
    metrics: PluginMetrics,
    recorder: EventRecorder,
    lock: asyncio.Lock,
) -> RunningRdma:
    """The RDMA plugin's parts around ``inventory`` (the NICs found at start)."""
    metrics.enable_rdma()
    inventory.subscribe(metrics.set_nics)
    allocator = RdmaAllocator(
        client=client,
        sources=sources,
        inventory=inventory,
        metrics=metrics,
        flow=FlowConfig(node_name=settings.node_name, timeout_s=settings.allocate_timeout_s),
        resource_name=settings.rdma_resource_name,
        recorder=recorder,
        lock=lock,
    )
    service = RdmaPluginService(
        inventory=inventory,
        allocator=allocator,
        numa_topology=settings.node.enable_numa_topology,
    )
    server = PluginServer(settings.rdma_socket_path, service)
    link = KubeletLink(
        server=server,
        kubelet_socket=settings.kubelet_socket,
        resource_name=settings.rdma_resource_name,
        metrics=metrics,
        poll_interval=settings.kubelet_poll_interval_s,
        registrations_counter=metrics.rdma_kubelet_registrations,
    )
    return RunningRdma(
        source=source, inventory=inventory, server=server, link=link, allocator=allocator
    )
