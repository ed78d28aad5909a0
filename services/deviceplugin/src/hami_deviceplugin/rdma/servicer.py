"""The RDMA plugin's ``v1beta1.DevicePlugin`` service (served by its own
:class:`~hami_deviceplugin.kubelet.server.PluginServer` on its own socket).

* ``GetDevicePluginOptions``: no PreStartContainer; GetPreferredAllocation offered: units of the
  NICs the identified pod's entry names (the pod's annotation says which NIC or VF a container
  gets; the units the kubelet holds then name the same NICs).
* ``ListAndWatch``: 100 units per NIC (:func:`~hami_deviceplugin.rdma.nics.rdma_plugin_devices`) now
  and after every NIC inventory change, until the server stops.
* ``Allocate``: delegated to the :class:`~hami_deviceplugin.rdma.allocator.RdmaAllocator`; the
  answer is device specs only.  A failure is a gRPC error carrying the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_deviceplugin.allocation.decision import PreferredRequest
from hami_deviceplugin.kubelet.servicer import StreamingService, device_message
from hami_deviceplugin.rdma.allocator import RdmaAllocator
from hami_deviceplugin.rdma.inventory import NicInventory
from hami_deviceplugin.rdma.nics import rdma_plugin_devices
from hami_deviceplugin.rdma.plan import RdmaGrant
from hami_kubelet_api.v1beta1 import api_pb2

__all__ = ["RdmaPluginService", "rdma_grant_response"]


def rdma_grant_response(grant: RdmaGrant) -> api_pb2.ContainerAllocateResponse:
    return api_pb2.ContainerAllocateResponse(
        devices=[
            api_pb2.DeviceSpec(
                container_path=spec.container_path,
                host_path=spec.host_path,
                permissions=spec.permissions,
            )
            for spec in grant.devices
        ]
    )


class RdmaPluginService(StreamingService):
    def __init__(
        self, *, inventory: NicInventory, allocator: RdmaAllocator, numa_topology: bool
    ) -> None:
        super().__init__(inventory=inventory)
        self._inventory = inventory
        self._allocator = allocator
        self._numa = numa_topology

    def device_list(self) -> api_pb2.ListAndWatchResponse:
        devices = rdma_plugin_devices(self._inventory.nics, numa_topology=self._numa)
        return api_pb2.ListAndWatchResponse(devices=[device_message(d) for d in devices])

    async def _container_responses(
        self, requests: Sequence[tuple[str, ...]]
    ) -> list[api_pb2.ContainerAllocateResponse]:
        return [rdma_grant_response(g) for g in await self._allocator.allocate(requests)]

    async def _preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        return await self._allocator.preferred(requests)
