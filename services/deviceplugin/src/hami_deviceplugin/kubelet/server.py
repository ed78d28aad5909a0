"""The GPU plugin's ``v1beta1.DevicePlugin`` service and the unix-socket server that runs either
plugin's service.

* ``GetDevicePluginOptions``: ``get_preferred_allocation_available`` =
  ``enablegetpreferredallocation``; no PreStartContainer.
* ``ListAndWatch``: the complete replica list now and after every inventory change (health),
  until the server stops.
* ``GetPreferredAllocation`` / ``Allocate``: delegated to the :class:`Allocator`; an allocation
  failure is answered with a gRPC error carrying the reason (the kubelet then rejects the pod
  with ``UnexpectedAdmissionError``).

What the two plugins' services share is :mod:`hami_deviceplugin.kubelet.servicer`.
:class:`PluginServer` can be started again after a stop (the kubelet deletes plugin sockets when
it restarts, so the server must come back on a fresh socket).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import grpc
import structlog

from hami_deviceplugin.gpu.allocator import Allocator, PreferredRequest
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.plan import ContainerGrant
from hami_deviceplugin.gpu.replicas import plugin_devices
from hami_deviceplugin.kubelet.servicer import (
    Context,
    StreamingService,
    device_message,
    status_code,
)
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc

__all__ = [
    "Context",
    "DevicePluginService",
    "PluginServer",
    "StreamingService",
    "device_message",
    "grant_response",
    "status_code",
]

log = structlog.get_logger(__name__)

MAX_SOCKET_PATH: Final = 107


def grant_response(grant: ContainerGrant) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        envs=dict(grant.envs),
        mounts=[
            api_pb2.Mount(
                container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
            )
            for m in grant.mounts
        ],
    )


class DevicePluginService(StreamingService):
    def __init__(
        self,
        *,
        inventory: Inventory,
        allocator: Allocator,
        split: int,
        numa_topology: bool,
        preferred_available: bool,
    ) -> None:
        super().__init__(inventory=inventory, preferred_available=preferred_available)
        self._inventory = inventory
        self._allocator = allocator
        self._split = split
        self._numa = numa_topology

    def device_list(self) -> api_pb2.ListAndWatchResponse:
        devices = plugin_devices(self._inventory.gpus, split=self._split, numa_topology=self._numa)
        return api_pb2.ListAndWatchResponse(devices=[device_message(d) for d in devices])

    async def _container_responses(
        self, requests: Sequence[tuple[str, ...]]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        return [grant_response(g) for g in await self._allocator.allocate(requests)]

    async def GetPreferredAllocation(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreferredAllocationRequest, context: Context
    ) -> api_pb2.PreferredAllocationResponse:
        requests = [
            PreferredRequest(
                available=tuple(r.available_deviceIDs),
                must_include=tuple(r.must_include_deviceIDs),
                size=int(r.allocation_size),
            )
            for r in request.container_requests
        ]
        chosen = await self._allocator.preferred(requests)
        return api_pb2.PreferredAllocationResponse(
            container_responses=[
                api_pb2.ContainerPreferredAllocationResponse(deviceIDs=list(ids)) for ids in chosen
            ]
        )


class PluginServer:
    """``v1beta1.DevicePlugin`` on ``socket_path``; start, stop, start again."""

    def __init__(self, socket_path: Path, service: StreamingService) -> None:
        if len(str(socket_path).encode()) > MAX_SOCKET_PATH:
            raise ValueError(
                f"{socket_path} is longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes)"
            )
        self.socket_path = socket_path
        self._service = service
        self._server: grpc.aio.Server | None = None
        self._inode: int | None = None
        self.starts = 0

    @property
    def serving(self) -> bool:
        return self._server is not None

    def socket_present(self) -> bool:
        """Our socket file is still there (the kubelet deletes it when it restarts)."""
        try:
            return os.stat(self.socket_path).st_ino == self._inode
        except OSError:
            return False

    async def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._service.open_streams()
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self._service, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server
        self._inode = os.stat(self.socket_path).st_ino
        self.starts += 1
        log.info("device plugin serving", socket=str(self.socket_path))

    async def stop(self, grace: float | None = 1.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._service.close_streams()
        await server.stop(grace)
        if self.socket_present():
            self.socket_path.unlink(missing_ok=True)
        self._inode = None
        log.info("device plugin stopped", socket=str(self.socket_path))

    async def restart(self) -> None:
        await self.stop(grace=None)
        await self.start()
