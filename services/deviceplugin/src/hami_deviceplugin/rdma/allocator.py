"""The RDMA plugin's Allocate path: :class:`~hami_deviceplugin.allocation.flow.PodAllocationFlow`
deciding from ``hami.io/rdma-devices-to-allocate`` with
:func:`~hami_deviceplugin.rdma.plan.plan_rdma_allocation`.

It shares the GPU plugin's lock, identity rule, commit, unlock and failure handling; it prepares
no host directories (device nodes are the container runtime's business).  ``GetPreferredAllocation``
names units of the NICs the identified pod's next entry names
(:func:`~hami_deviceplugin.rdma.plan.preferred_units`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hami_deviceplugin.allocation.decision import (
    AllocationDecision,
    PreferredRequest,
    list_decision,
)
from hami_deviceplugin.allocation.entries import AllocatingPod
from hami_deviceplugin.allocation.flow import FlowConfig, PodAllocationFlow
from hami_deviceplugin.allocation.identity import DeviceList
from hami_deviceplugin.allocation.sources import AllocationSources
from hami_deviceplugin.metrics import PluginMetrics
from hami_deviceplugin.rdma.inventory import NicInventory
from hami_deviceplugin.rdma.plan import (
    RdmaGrant,
    plan_rdma_allocation,
    preferred_units,
    rdma_device_list,
)
from hami_kube.events import EventRecorder
from hami_kube.rest import KubeClient
from hami_protocol.keys import RDMA_DEVICES_TO_ALLOCATE

__all__ = ["RdmaAllocator"]


class RdmaAllocator(PodAllocationFlow[tuple[RdmaGrant, ...], None]):
    def __init__(
        self,
        *,
        client: KubeClient,
        sources: AllocationSources,
        inventory: NicInventory,
        metrics: PluginMetrics,
        flow: FlowConfig,
        resource_name: str,
        recorder: EventRecorder | None = None,
        lock: asyncio.Lock | None = None,
    ) -> None:
        super().__init__(
            client=client,
            flow=flow,
            sources=sources,
            observe=metrics.observe_rdma_allocate,
            recorder=recorder,
            lock=lock,
        )
        self._inventory = inventory
        self._resource = resource_name

    def _devices(self) -> DeviceList:
        return rdma_device_list(self._resource, self._inventory.functions)

    async def _prepare(self, requests: Sequence[Sequence[str]]) -> None:
        return None

    async def _decide(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], prepared: None
    ) -> AllocationDecision[tuple[RdmaGrant, ...]]:
        plan = plan_rdma_allocation(
            pod,
            requests,
            functions=self._inventory.functions,
            resource_name=self._resource,
            node_name=self._flow.node_name,
        )
        return list_decision(
            plan,
            key=RDMA_DEVICES_TO_ALLOCATE,
            rdma=[[f.bus_id for f in grant.functions] for grant in plan.grants],
        )

    async def preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        """Units of the NICs the identified pod's next entries name, one entry per request (the
        kubelet's order when the pod is not known for sure)."""
        entries = await self.preferred_entries(len(requests))
        functions = self._inventory.functions
        return [
            preferred_units(
                entries[number] if number < len(entries) else (),
                available=request.available,
                must_include=request.must_include,
                size=request.size,
                functions=functions,
            )
            for number, request in enumerate(requests)
        ]
