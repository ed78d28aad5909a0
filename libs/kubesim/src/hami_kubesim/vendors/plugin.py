"""One kubelet resource of a vendor plugin stand-in, served over the real device-plugin gRPC API.

The kubelet stand-in sees a vendor's plugin as it sees any: ``Register`` on ``kubelet.sock``,
``ListAndWatch`` for the resource's device IDs (node capacity and allocatable follow), and
``Allocate`` per container.  For the vendor's count resource ``Allocate`` asks ``grant`` for the
pod's devices (see :mod:`.allocation`) and answers with :data:`~.allocation.GIVEN_ANNOTATION`
naming them, so the kubelet's allocation record says what the container got; a failure aborts
the call, which the kubelet turns into the pod's ``UnexpectedAdmissionError``.  Memory and core
resources of capacity vendors answer empty: their plugins only count units.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import grpc

from hami_kubelet_api.constants import KUBELET_SOCKET_NAME
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc

__all__ = ["Grant", "GrantError", "ResourcePlugin"]

Grant = Callable[[Sequence[str]], Awaitable[dict[str, str]]]
"""Container device IDs → the annotations of its ``ContainerAllocateResponse``."""

_Context = grpc.aio.ServicerContext[object, object]
_API_VERSION = "v1beta1"
_REGISTER_TIMEOUT_S = 10.0


class GrantError(Exception):
    """No pod waits for this vendor's devices, or its annotations do not say which."""


class ResourcePlugin(api_pb2_grpc.DevicePluginServicer):
    """Serves ``resource`` at ``<plugin dir>/<endpoint>``."""

    def __init__(
        self,
        *,
        plugin_dir: Path,
        endpoint: str,
        resource: str,
        devices: Sequence[tuple[str, bool]],
        grant: Grant | None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.endpoint = endpoint
        self.resource = resource
        self.devices = tuple(devices)
        self._grant = grant
        self._server: grpc.aio.Server | None = None
        self._stop = asyncio.Event()

    async def GetDevicePluginOptions(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: _Context
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions()

    async def ListAndWatch(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: _Context
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        health = {True: "Healthy", False: "Unhealthy"}
        yield api_pb2.ListAndWatchResponse(
            devices=[api_pb2.Device(ID=i, health=health[ok]) for i, ok in self.devices]
        )
        await self._stop.wait()

    async def GetPreferredAllocation(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreferredAllocationRequest, context: _Context
    ) -> api_pb2.PreferredAllocationResponse:
        return api_pb2.PreferredAllocationResponse()

    async def Allocate(  # noqa: N802 - gRPC method name
        self, request: api_pb2.AllocateRequest, context: _Context
    ) -> api_pb2.AllocateResponse:
        answers = []
        for container in request.container_requests:
            annotations: dict[str, str] = {}
            if self._grant is not None:
                try:
                    annotations = await self._grant(list(container.devices_ids))
                except GrantError as error:
                    await context.abort(grpc.StatusCode.UNKNOWN, str(error))
            answers.append(api_pb2.ContainerAllocateResponse(annotations=annotations))
        return api_pb2.AllocateResponse(container_responses=answers)

    async def PreStartContainer(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreStartContainerRequest, context: _Context
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()

    @property
    def socket(self) -> Path:
        return self.plugin_dir / self.endpoint

    async def serve(self) -> None:
        self._stop.clear()
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        self.socket.unlink(missing_ok=True)
        server.add_insecure_port(f"unix:{self.socket}")
        await server.start()
        self._server = server

    async def register(self) -> None:
        """``Register`` with the kubelet; raises ``grpc.aio.AioRpcError`` while it is away."""
        path = self.plugin_dir / KUBELET_SOCKET_NAME
        async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
            await api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=_API_VERSION,
                    endpoint=self.endpoint,
                    resource_name=self.resource,
                    options=api_pb2.DevicePluginOptions(),
                ),
                timeout=_REGISTER_TIMEOUT_S,
            )

    async def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
