"""The generated bindings work end to end over a unix socket with grpc.aio."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami_kubelet_api import constants
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc


class _Plugin(api_pb2_grpc.DevicePluginServicer):
    async def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: object
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(
        self, request: api_pb2.Empty, context: object
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        for health in (constants.HEALTHY, constants.UNHEALTHY):
            yield api_pb2.ListAndWatchResponse(
                devices=[
                    api_pb2.Device(
                        ID="gpu-0",
                        health=health,
                        topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=1)]),
                    )
                ]
            )

    async def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: object
    ) -> api_pb2.PreferredAllocationResponse:
        wanted = request.container_requests[0]
        chosen = list(wanted.must_include_deviceIDs)
        for device in wanted.available_deviceIDs:
            if len(chosen) >= wanted.allocation_size:
                break
            if device not in chosen:
                chosen.append(device)
        return api_pb2.PreferredAllocationResponse(
            container_responses=[api_pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen)]
        )

    async def PreStartContainer(
        self,
        request: api_pb2.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> api_pb2.PreStartContainerResponse:
        await context.abort(
            grpc.StatusCode.FAILED_PRECONDITION, "not ready: " + request.devices_ids[0]
        )

    async def Allocate(
        self, request: api_pb2.AllocateRequest, context: object
    ) -> api_pb2.AllocateResponse:
        ids = ",".join(request.container_requests[0].devices_ids)
        return api_pb2.AllocateResponse(
            container_responses=[
                api_pb2.ContainerAllocateResponse(
                    envs={"DEVICES": ids},
                    mounts=[api_pb2.Mount(container_path="/c", host_path="/h", read_only=True)],
                    devices=[api_pb2.DeviceSpec(container_path="/dev/x", permissions="rw")],
                    cdi_devices=[api_pb2.CDIDevice(name="vendor.com/gpu=gpu0")],
                )
            ]
        )


@pytest.fixture
def socket_path() -> Iterator[Path]:
    # A short directory: unix socket paths are limited to about 100 bytes.
    with tempfile.TemporaryDirectory(prefix="dp-") as directory:
        yield Path(directory) / "plugin.sock"


@pytest.fixture
async def channel(socket_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    server = grpc.aio.server()
    api_pb2_grpc.add_DevicePluginServicer_to_server(_Plugin(), server)
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix://{socket_path}") as client:
            yield client
    finally:
        await server.stop(grace=None)


async def test_get_device_plugin_options(channel: grpc.aio.Channel) -> None:
    stub = api_pb2_grpc.DevicePluginStub(channel)
    options = await stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    assert options.get_preferred_allocation_available
    assert not options.pre_start_required


async def test_list_and_watch_streams_every_message(channel: grpc.aio.Channel) -> None:
    stub = api_pb2_grpc.DevicePluginStub(channel)
    healths = [
        (reply.devices[0].ID, reply.devices[0].health, reply.devices[0].topology.nodes[0].ID)
        async for reply in stub.ListAndWatch(api_pb2.Empty(), timeout=5)
    ]
    assert healths == [("gpu-0", "Healthy", 1), ("gpu-0", "Unhealthy", 1)]


async def test_allocate_round_trip(channel: grpc.aio.Channel) -> None:
    stub = api_pb2_grpc.DevicePluginStub(channel)
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=["a", "b"])]
    )
    reply = await stub.Allocate(request, timeout=5)
    container = reply.container_responses[0]
    assert dict(container.envs) == {"DEVICES": "a,b"}
    assert container.mounts[0].read_only
    assert container.devices[0].permissions == "rw"
    assert container.cdi_devices[0].name == "vendor.com/gpu=gpu0"


async def test_get_preferred_allocation_round_trip(channel: grpc.aio.Channel) -> None:
    stub = api_pb2_grpc.DevicePluginStub(channel)
    wanted = api_pb2.ContainerPreferredAllocationRequest(
        available_deviceIDs=["a", "b", "c"], must_include_deviceIDs=["c"], allocation_size=2
    )
    request = api_pb2.PreferredAllocationRequest(container_requests=[wanted])
    reply = await stub.GetPreferredAllocation(request, timeout=5)
    assert list(reply.container_responses[0].deviceIDs) == ["c", "a"]


async def test_servicer_abort_reaches_the_client(channel: grpc.aio.Channel) -> None:
    stub = api_pb2_grpc.DevicePluginStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=["x"]), timeout=5)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.details() == "not ready: x"
