"""The kubelet side of the device-plugin gRPC API.

:class:`RegistrationServer` serves ``v1beta1.Registration`` on ``<plugin dir>/kubelet.sock``. Its
``Register`` handler does what the kubelet does synchronously: checks the version and the resource
name, dials the plugin back at ``<plugin dir>/<endpoint>``, asks for its options, and hands a
connected :class:`PluginEndpoint` to the device manager. :class:`PluginEndpoint` wraps the calls the
kubelet makes to a plugin, turning replies into plain data and failures into
:class:`PluginCallError` carrying the Go-style text the kubelet would print.
:class:`UnixGrpcServer` is the unix-socket gRPC server both kubelet sockets are served with.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from hami_kubelet_api.constants import (
    KUBELET_PRE_START_CONTAINER_RPC_TIMEOUT_SECONDS,
    KUBELET_SOCKET_NAME,
)
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc
from hami_kubesim.kubelet.deviceplugins.devices import ResourceDevices, register_error
from hami_kubesim.kubelet.status import (
    DeviceSpecRecord,
    MountRecord,
    ResourceAllocation,
    grpc_error_text,
)

_CHANNEL_OPTIONS = (("grpc.default_authority", "localhost"),)
_MAX_SOCKET_PATH = 107


_CONNECTION_CLOSING = "rpc error: code = Canceled desc = grpc: the client connection is closing"
"""What the kubelet's gRPC client returns for a call on a connection it closed."""


class PluginCallError(Exception):
    """A call to a plugin failed; ``str()`` is the text the kubelet would report."""


@dataclass(frozen=True, slots=True)
class PluginOptions:
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


def _error_text(error: grpc.aio.AioRpcError) -> str:
    return grpc_error_text(error.code().name, error.details() or "")


class PluginEndpoint:
    """A plugin the kubelet stand-in is connected to, for one resource."""

    def __init__(
        self,
        *,
        resource: str,
        socket_path: Path,
        channel: grpc.aio.Channel,
        options: PluginOptions,
        call_timeout: float,
    ) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self.options = options
        self._channel = channel
        self._stub = api_pb2_grpc.DevicePluginStub(channel)
        self._timeout = call_timeout
        self.stopped = False

    @classmethod
    async def connect(
        cls, *, resource: str, socket_path: Path, dial_timeout: float, call_timeout: float
    ) -> PluginEndpoint:
        """Dial the plugin (blocking, like the kubelet) and fetch its options.

        Raises :class:`PluginCallError` with the kubelet's wording on failure.
        """
        channel = grpc.aio.insecure_channel(f"unix:{socket_path}", options=_CHANNEL_OPTIONS)
        try:
            async with asyncio.timeout(dial_timeout):
                await channel.channel_ready()
        except TimeoutError as error:
            await channel.close()
            raise PluginCallError(
                f"failed to dial device plugin: context deadline exceeded ({socket_path})"
            ) from error
        try:
            reply = await api_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                api_pb2.Empty(), timeout=call_timeout
            )
        except grpc.aio.AioRpcError as error:
            await channel.close()
            raise PluginCallError(
                f"failed to get device plugin options: {_error_text(error)}"
            ) from error
        options = PluginOptions(
            pre_start_required=reply.pre_start_required,
            get_preferred_allocation_available=reply.get_preferred_allocation_available,
        )
        return cls(
            resource=resource,
            socket_path=socket_path,
            channel=channel,
            options=options,
            call_timeout=call_timeout,
        )

    async def list_and_watch(self) -> AsyncIterator[ResourceDevices]:
        """Every complete device list the plugin sends; ends when its stream ends or fails."""
        stream = self._stub.ListAndWatch(api_pb2.Empty())
        try:
            async for reply in stream:
                yield ResourceDevices.from_list((d.ID, d.health) for d in reply.devices)
        except grpc.aio.AioRpcError:
            return
        finally:
            stream.cancel()

    async def preferred(
        self, *, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        try:
            reply = await self._stub.GetPreferredAllocation(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise PluginCallError(
                f"device plugin GetPreferredAllocation rpc failed with err: {_error_text(error)}"
            ) from error
        except asyncio.CancelledError:
            self._closed_mid_call("device plugin GetPreferredAllocation rpc failed with err: ")
            raise
        if not reply.container_responses:
            return ()
        return tuple(reply.container_responses[0].deviceIDs)

    async def allocate(self, device_ids: Sequence[str]) -> ResourceAllocation:
        """One ``Allocate`` with exactly one ContainerAllocateRequest, as the kubelet sends."""
        if self.stopped:
            raise PluginCallError(f"endpoint {self.socket_path} is stopped")
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        try:
            reply = await self._stub.Allocate(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise PluginCallError(_error_text(error)) from error
        except asyncio.CancelledError:
            self._closed_mid_call()
            raise
        if not reply.container_responses:
            raise PluginCallError("no containers return in allocation response")
        first = reply.container_responses[0]
        return ResourceAllocation(
            resource=self.resource,
            device_ids=tuple(device_ids),
            envs=dict(first.envs),
            mounts=tuple(
                MountRecord(m.container_path, m.host_path, m.read_only) for m in first.mounts
            ),
            devices=tuple(
                DeviceSpecRecord(d.container_path, d.host_path, d.permissions)
                for d in first.devices
            ),
            annotations=dict(first.annotations),
            cdi_devices=tuple(c.name for c in first.cdi_devices),
        )

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        request = api_pb2.PreStartContainerRequest(devices_ids=list(device_ids))
        try:
            await self._stub.PreStartContainer(
                request, timeout=KUBELET_PRE_START_CONTAINER_RPC_TIMEOUT_SECONDS
            )
        except grpc.aio.AioRpcError as error:
            raise PluginCallError(
                f"device plugin PreStartContainer rpc failed with err: {_error_text(error)}"
            ) from error
        except asyncio.CancelledError:
            self._closed_mid_call("device plugin PreStartContainer rpc failed with err: ")
            raise

    def _closed_mid_call(self, prefix: str = "") -> None:
        """Raise the kubelet's error for a call whose connection :meth:`close` cut.

        grpc.aio cancels the calls of a channel being closed, so the awaiting task sees a
        ``CancelledError`` it was never sent; the kubelet's Go client returns an error instead.
        A task that is itself being cancelled keeps its cancellation."""
        task = asyncio.current_task()
        if self.stopped and (task is None or not task.cancelling()):
            raise PluginCallError(f"{prefix}{_CONNECTION_CLOSING}") from None

    async def close(self) -> None:
        self.stopped = True
        await self._channel.close()


OnRegister = Callable[[PluginEndpoint], Awaitable[None]]


class _Registration(api_pb2_grpc.RegistrationServicer):
    def __init__(
        self,
        *,
        plugin_dir: Path,
        on_register: OnRegister,
        dial_timeout: float,
        call_timeout: float,
    ) -> None:
        self._dir = plugin_dir
        self._on_register = on_register
        self._dial_timeout = dial_timeout
        self._call_timeout = call_timeout

    async def Register(  # noqa: N802 - gRPC method name
        self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.Empty:
        refusal = register_error(version=request.version, resource_name=request.resource_name)
        if refusal is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, refusal)
        try:
            endpoint = await PluginEndpoint.connect(
                resource=request.resource_name,
                socket_path=self._dir / request.endpoint,
                dial_timeout=self._dial_timeout,
                call_timeout=self._call_timeout,
            )
        except PluginCallError as error:
            await context.abort(grpc.StatusCode.UNKNOWN, str(error))
        await self._on_register(endpoint)
        return api_pb2.Empty()


class UnixGrpcServer:
    """A gRPC server on one unix socket: ``start`` (any stale socket file replaced), ``stop``
    (the socket file removed), start again. ``add`` puts the servicers on a new server."""

    def __init__(self, socket_path: Path, add: Callable[[grpc.aio.Server], None]) -> None:
        self.socket_path = socket_path
        self._add = add
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        if len(str(self.socket_path).encode()) > _MAX_SOCKET_PATH:
            raise ValueError(
                f"{self.socket_path} is longer than a unix socket path may be "
                f"({_MAX_SOCKET_PATH} bytes); use a shorter directory"
            )
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.aio.server()
        self._add(server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)
        self.socket_path.unlink(missing_ok=True)


class RegistrationServer(UnixGrpcServer):
    """``v1beta1.Registration`` on ``<plugin_dir>/kubelet.sock``; start, stop, start again."""

    def __init__(
        self,
        *,
        plugin_dir: Path,
        on_register: OnRegister,
        dial_timeout: float,
        call_timeout: float,
    ) -> None:
        servicer = _Registration(
            plugin_dir=plugin_dir,
            on_register=on_register,
            dial_timeout=dial_timeout,
            call_timeout=call_timeout,
        )
        super().__init__(
            plugin_dir / KUBELET_SOCKET_NAME,
            lambda server: api_pb2_grpc.add_RegistrationServicer_to_server(servicer, server),
        )
