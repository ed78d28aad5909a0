"""The GPU plugin's Allocate path: :class:`~hami_deviceplugin.allocation.flow.PodAllocationFlow`
deciding from ``hami.io/vgpu-devices-to-allocate``.

Per call: the host layout under ``HOOK_PATH`` is read and one fresh shared-cache name is made per
container; :func:`~hami_deviceplugin.gpu.plan.plan_allocation` decides every container's answer;
the containers' host directories are created; the flow commits the consumed list (and
``bind-phase: success`` when no list of any vendor, RDMA included, is left) and unlocks.
``GetPreferredAllocation`` names replicas of the GPUs the identified pod's next entry names
(:func:`~hami_deviceplugin.gpu.plan.preferred_replicas`), so the replicas the kubelet then
allocates name those GPUs, as the identity rule requires; when the pod is not known for sure it
answers the kubelet's own order.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hami_deviceplugin.allocation.entries import AllocatingPod
from hami_deviceplugin.allocation.flow import (
    AllocationDecision,
    AllocationSources,
    FlowConfig,
    PodAllocationFlow,
    PreferredRequest,
    list_decision,
)
from hami_deviceplugin.allocation.identity import DeviceList
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.plan import (
    AllocateOptions,
    ContainerGrant,
    HookLayout,
    gpu_device_list,
    plan_allocation,
    preferred_replicas,
)
from hami_deviceplugin.hostdirs import HostDirs
from hami_deviceplugin.metrics import PluginMetrics
from hami_kube.events import EventRecorder
from hami_kube.rest import KubeClient
from hami_protocol.keys import NVIDIA_DEVICES_TO_ALLOCATE

__all__ = ["Allocator", "AllocatorConfig"]


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    flow: FlowConfig
    """The node, the deadlines and the conflict retries every plugin's Allocate path shares."""
    hook_path: str
    options: AllocateOptions
    resource_name: str = "nvidia.com/gpu"


_Prepared = tuple[HookLayout, list[str]]


class Allocator(PodAllocationFlow[tuple[ContainerGrant, ...], _Prepared]):
    def __init__(
        self,
        *,
        client: KubeClient,
        sources: AllocationSources,
        inventory: Inventory,
        host_dirs: HostDirs,
        metrics: PluginMetrics,
        config: AllocatorConfig,
        recorder: EventRecorder | None = None,
        cache_name: Callable[[], str] = lambda: str(uuid.uuid4()),
        lock: asyncio.Lock | None = None,
    ) -> None:
        super().__init__(
            client=client,
            flow=config.flow,
            sources=sources,
            observe=metrics.observe_allocate,
            recorder=recorder,
            lock=lock,
        )
        self._inventory = inventory
        self._host = host_dirs
        self._config = config
        self._cache_name = cache_name

    def _devices(self) -> DeviceList:
        return gpu_device_list(self._config.resource_name, self._inventory.replica_owners)

    async def _prepare(self, requests: Sequence[Sequence[str]]) -> _Prepared:
        layout = await self._host.layout(self._config.hook_path)
        return layout, [self._cache_name() for _ in requests]

    async def _decide(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], prepared: _Prepared
    ) -> AllocationDecision[tuple[ContainerGrant, ...]]:
        layout, names = prepared
        plan = plan_allocation(
            pod,
            requests,
            gpus=self._inventory.uuids(),
            options=self._config.options,
            layout=layout,
            cache_names=names,
        )
        await self._host.prepare(plan.grants)
        return list_decision(
            plan,
            key=NVIDIA_DEVICES_TO_ALLOCATE,
            devices=[[d.uuid for d in grant.devices] for grant in plan.grants],
        )

    # --- GetPreferredAllocation ---------------------------------------------------------------
    async def preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        """Replicas of the GPUs the identified pod's next entries name, one entry per request
        (the kubelet's order when the pod is not known for sure)."""
        entries = await self.preferred_entries(len(requests))
        owners = self._inventory.replica_owners
        return [
            preferred_replicas(
                tuple(device.uuid for device in entries[number]) if number < len(entries) else (),
                available=request.available,
                must_include=request.must_include,
                size=request.size,
                owners=owners,
            )
            for number, request in enumerate(requests)
        ]
