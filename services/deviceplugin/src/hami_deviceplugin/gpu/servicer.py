"""The GPU plugin's ``v1beta1.DevicePlugin`` service (served by a
:class:`~hami_deviceplugin.kubelet.server.PluginServer` on the GPU plugin's socket).

* ``GetDevicePluginOptions``: GetPreferredAllocation offered (always: the identity rule needs the
  kubelet's replicas to name the GPUs of the pod's entry, so ``enablegetpreferredallocation`` no
  longer switches it off); no PreStartContainer.
* ``ListAndWatch``: the complete replica list now and after every inventory change (health),
  until the server stops.
* ``GetPreferredAllocation`` / ``Allocate``: delegated to the
  :class:`~hami_deviceplugin.gpu.allocator.Allocator`; an allocation failure is answered with a
  gRPC error carrying the reason (the kubelet then rejects the pod with
  ``UnexpectedAdmissionError``).

What it shares with the RDMA plugin's service is :mod:`hami_deviceplugin.kubelet.servicer`.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_deviceplugin.allocation.decision import PreferredRequest
from hami_deviceplugin.gpu.allocator import Allocator
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.plan import ContainerGrant
from hami_deviceplugin.gpu.replicas import plugin_devices
from hami_deviceplugin.kubelet.servicer import StreamingService, device_message
from hami_kubelet_api.v1beta1 import api_pb2

__all__ = ["DevicePluginService", "grant_response"]


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
    ) -> None:
        super().__init__(inventory=inventory)
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

    async def _preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        return await self._allocator.preferred(requests)
