"""The GPU plugin's Allocate path: :class:`~hami_deviceplugin.allocation.flow.PodAllocationFlow`
deciding from ``hami.io/vgpu-devices-to-allocate``.

Per call: the host layout under ``HOOK_PATH`` is read and one fresh shared-cache name is made per
container; :func:`~hami_deviceplugin.gpu.plan.plan_allocation` decides every container's answer;
the containers' host directories are created; the flow commits the consumed list (and
``bind-phase: success`` when no list of any vendor, RDMA included, is left) and unlocks.
``GetPreferredAllocation`` names replicas of the GPUs the next waiting container was given.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from hami_deviceplugin.allocation.entries import AllocatingPod, allocating_pod
from hami_deviceplugin.allocation.flow import (
    AllocationDecision,
    FlowConfig,
    PodAllocationFlow,
    list_decision,
)
from hami_deviceplugin.allocation.lookup import find_pod
from hami_deviceplugin.errors import AllocateError
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.plan import (
    AllocateOptions,
    ContainerGrant,
    HookLayout,
    next_entry_uuids,
    plan_allocation,
    preferred_replicas,
)
from hami_deviceplugin.hostdirs import HostDirs
from hami_deviceplugin.metrics import PluginMetrics
from hami_kube.errors import KubeError
from hami_kube.events import EventRecorder
from hami_kube.resources import NODES
from hami_kube.rest import KubeClient
from hami_protocol.keys import NVIDIA_DEVICES_TO_ALLOCATE

__all__ = ["Allocator", "AllocatorConfig", "PreferredRequest"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    flow: FlowConfig
    """The node, the deadlines and the conflict retries every plugin's Allocate path shares."""
    hook_path: str
    options: AllocateOptions


@dataclass(frozen=True, slots=True)
class PreferredRequest:
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


_Prepared = tuple[HookLayout, list[str]]


class Allocator(PodAllocationFlow[tuple[ContainerGrant, ...], _Prepared]):
    def __init__(
        self,
        *,
        client: KubeClient,
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
            observe=metrics.observe_allocate,
            recorder=recorder,
            lock=lock,
        )
        self._inventory = inventory
        self._host = host_dirs
        self._config = config
        self._cache_name = cache_name

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
            owners=self._inventory.replica_owners,
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
        """Replicas of the GPUs the next waiting container was given (kubelet order otherwise)."""
        async with self._lock:
            uuids: tuple[str, ...] = ()
            try:
                async with asyncio.timeout(self._flow.timeout_s):
                    node = await self._client.get(NODES, self._flow.node_name)
                    found = await find_pod(self._client, node_name=self._flow.node_name, node=node)
                uuids = next_entry_uuids(allocating_pod(found.pod))
            except (AllocateError, KubeError, TimeoutError) as exc:
                log.info("no preference: the pod cannot be read", error=str(exc))
            owners = self._inventory.replica_owners
            return [
                preferred_replicas(
                    uuids,
                    available=request.available,
                    must_include=request.must_include,
                    size=request.size,
                    owners=owners,
                )
                for request in requests
            ]
