"""The kubelet-facing gRPC service ``v1beta1.DevicePlugin`` and the unix-socket server that runs it.

* ``GetDevicePluginOptions``: ``get_preferred_allocation_available`` =
  ``enablegetpreferredallocation``; no PreStartContainer.
* ``ListAndWatch``: the complete replica list now and after every inventory change (health),
  until the server stops.
* ``GetPreferredAllocation`` / ``Allocate``: delegated to the :class:`Allocator`; an allocation
  failure is answered with a gRPC error carrying the reason (the kubelet then rejects the pod
  with ``UnexpectedAdmissionError``).

:class:`PluginServer` can be started again after a stop (the kubelet deletes plugin sockets when
it restarts, so the server must come back on a fresh socket).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import grpc
import structlog

from hami_deviceplugin.allocate import AllocateError, ContainerGrant, FailureKind
from hami_deviceplugin.allocator import Allocator, PreferredRequest
from hami_deviceplugin.inventory import Inventory
from hami_deviceplugin.replicas import PluginDevice, plugin_devices
from hami_kube.deviceplugin_api.constants import HEALTHY, UNHEALTHY
from hami_kube.deviceplugin_api.v1beta1 import api_pb2, api_pb2_grpc

__all__ = [
    "DevicePluginService",
    "PluginServer",
    "StreamingService",
    "device_message",
    "grant_response",
    "status_code",
]

log = structlog.get_logger(__name__)

MAX_SOCKET_PATH: Final = 107

_CODES: Final = {
    FailureKind.NO_POD: grpc.StatusCode.NOT_FOUND,
    FailureKind.INVALID: grpc.StatusCode.FAILED_PRECONDITION,
    FailureKind.API: grpc.StatusCode.UNAVAILABLE,
    FailureKind.HOST: grpc.StatusCode.INTERNAL,
    FailureKind.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    FailureKind.INTERNAL: grpc.StatusCode.INTERNAL,
}

Context = grpc.aio.ServicerContext[object, object]


def status_code(kind: FailureKind) -> grpc.StatusCode:
    return _CODES.get(kind, grpc.StatusCode.INTERNAL)


class StreamingService(api_pb2_grpc.DevicePluginServicer):
    """A ``v1beta1.DevicePlugin`` servicer whose ListAndWatch streams a server can end."""

    def open_streams(self) -> None:
        raise NotImplementedError

    def close_streams(self) -> None:
        raise NotImplementedError


def device_message(device: PluginDevice) -> api_pb2.Device:
    topology = (
        None
        if device.numa is None
        else api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=device.numa)])
    )
    return api_pb2.Device(
        ID=device.id, health=HEALTHY if device.healthy else UNHEALTHY, topology=topology
    )


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
        self._inventory = inventory
        self._allocator = allocator
        self._split = split
        self._numa = numa_topology
        self._preferred = preferred_available
        self._closing = asyncio.Event()

    def open_streams(self) -> None:
        self._closing = asyncio.Event()

    def close_streams(self) -> None:
        """End every ListAndWatch stream (before a stop, so the stop need not wait for them)."""
        self._closing.set()

    def device_list(self) -> api_pb2.ListAndWatchResponse:
        devices = plugin_devices(self._inventory.gpus, split=self._split, numa_topology=self._numa)
        return api_pb2.ListAndWatchResponse(devices=[device_message(d) for d in devices])

    async def GetDevicePluginOptions(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: Context
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=self._preferred
        )

    async def ListAndWatch(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: Context
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        closing = self._closing
        while not closing.is_set():
            changed = self._inventory.changed
            yield self.device_list()
            waits = {
                asyncio.ensure_future(changed.wait()),
                asyncio.ensure_future(closing.wait()),
            }
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waits:
                    waiter.cancel()

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

    async def Allocate(  # noqa: N802 - gRPC method name
        self, request: api_pb2.AllocateRequest, context: Context
    ) -> api_pb2.AllocateResponse:
        requests = [tuple(r.devices_ids) for r in request.container_requests]
        try:
            grants = await self._allocator.allocate(requests)
        except AllocateError as exc:
            await context.abort(status_code(exc.kind), exc.message)
        return api_pb2.AllocateResponse(container_responses=[grant_response(g) for g in grants])

    async def PreStartContainer(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreStartContainerRequest, context: Context
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


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
