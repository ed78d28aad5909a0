"""What both plugins' ``v1beta1.DevicePlugin`` servicers share (the GPU one is
:class:`~hami_deviceplugin.gpu.servicer.DevicePluginService`, the RDMA one
:class:`~hami_deviceplugin.rdma.servicer.RdmaPluginService`):

* the plugin options, sent both in ``Register`` and by ``GetDevicePluginOptions``: no
  PreStartContainer, GetPreferredAllocation offered;
* ``ListAndWatch``: the complete device list now and after every change of the plugin's
  inventory, until the server closes the streams;
* ``GetPreferredAllocation``: the kubelet's available / must-include ids and size per container
  in, the plugin's preference out (both plugins offer it: the identity rule needs the kubelet's
  ids to name the devices of the pod's entry);
* ``Allocate``: the kubelet's device IDs per container in, one answer per container out; an
  :class:`~hami_deviceplugin.errors.AllocateError` becomes a gRPC error carrying the reason (the
  kubelet then rejects the pod with ``UnexpectedAdmissionError``);
* the kubelet-facing shape of an advertised device.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from typing import Final, Protocol

import grpc

from hami_deviceplugin.allocation.decision import PreferredRequest
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_deviceplugin.gpu.replicas import PluginDevice
from hami_kubelet_api.constants import HEALTHY, UNHEALTHY
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc

__all__ = [
    "Context",
    "StreamingService",
    "Watched",
    "device_message",
    "plugin_options",
    "status_code",
]

_CODES: Final = {
    FailureKind.NO_POD: grpc.StatusCode.NOT_FOUND,
    FailureKind.INVALID: grpc.StatusCode.FAILED_PRECONDITION,
    FailureKind.API: grpc.StatusCode.UNAVAILABLE,
    FailureKind.HOST: grpc.StatusCode.INTERNAL,
    FailureKind.MIG: grpc.StatusCode.INTERNAL,
    FailureKind.TIMEOUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    FailureKind.INTERNAL: grpc.StatusCode.INTERNAL,
}

Context = grpc.aio.ServicerContext[object, object]


def status_code(kind: FailureKind) -> grpc.StatusCode:
    return _CODES.get(kind, grpc.StatusCode.INTERNAL)


def plugin_options() -> api_pb2.DevicePluginOptions:
    return api_pb2.DevicePluginOptions(
        pre_start_required=False, get_preferred_allocation_available=True
    )


def device_message(device: PluginDevice) -> api_pb2.Device:
    topology = (
        None
        if device.numa is None
        else api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=device.numa)])
    )
    return api_pb2.Device(
        ID=device.id, health=HEALTHY if device.healthy else UNHEALTHY, topology=topology
    )


class Watched(Protocol):
    """An inventory as ListAndWatch sees it
    (:class:`~hami_deviceplugin.devices.change_feed.ChangeFeed`)."""

    @property
    def changed(self) -> asyncio.Event: ...


class StreamingService(api_pb2_grpc.DevicePluginServicer, ABC):
    """A ``v1beta1.DevicePlugin`` servicer whose ListAndWatch streams a server can end.

    A plugin says what its device list is, how it answers containers and what it prefers.
    """

    def __init__(self, *, inventory: Watched) -> None:
        self._watched = inventory
        self._closing = asyncio.Event()

    @abstractmethod
    def device_list(self) -> api_pb2.ListAndWatchResponse:
        """The complete list as the kubelet is to see it now."""

    @abstractmethod
    async def _container_responses(
        self, requests: Sequence[tuple[str, ...]]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        """One answer per container request; raises :class:`AllocateError`."""

    @abstractmethod
    async def _preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        """The preferred ids, one tuple per container request."""

    def open_streams(self) -> None:
        self._closing = asyncio.Event()

    def close_streams(self) -> None:
        """End every ListAndWatch stream (before a stop, so the stop need not wait for them)."""
        self._closing.set()

    async def GetDevicePluginOptions(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: Context
    ) -> api_pb2.DevicePluginOptions:
        return plugin_options()

    async def ListAndWatch(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: Context
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        # The stream ends with the server that opened it, even after the server has been
        # started again (open_streams gives the new streams a new event).
        closing = self._closing
        while not closing.is_set():
            changed = self._watched.changed
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

    async def Allocate(  # noqa: N802 - gRPC method name
        self, request: api_pb2.AllocateRequest, context: Context
    ) -> api_pb2.AllocateResponse:
        requests = [tuple(r.devices_ids) for r in request.container_requests]
        try:
            responses = await self._container_responses(requests)
        except AllocateError as exc:
            await context.abort(status_code(exc.kind), exc.message)
        return api_pb2.AllocateResponse(container_responses=responses)

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
        chosen = await self._preferred(requests)
        return api_pb2.PreferredAllocationResponse(
            container_responses=[
                api_pb2.ContainerPreferredAllocationResponse(deviceIDs=list(ids)) for ids in chosen
            ]
        )

    async def PreStartContainer(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreStartContainerRequest, context: Context
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()
