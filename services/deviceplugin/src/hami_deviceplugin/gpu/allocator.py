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

On a ``mig`` node (a :class:`~hami_deviceplugin.gpu.mig.manager.MigManager` given) the containers
are paired with their reservations (:func:`~hami_deviceplugin.gpu.mig.grant.plan_mig_turns`), the
instances are adopted or created, and the runtime ids go into ``hami.io/vgpu-mig-allocations`` in
the same commit patch that consumes the list; a call that fails after creating instances destroys
them (:meth:`_abandon`) before the pod is marked failed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hami_deviceplugin.allocation.decision import (
    AllocationDecision,
    PreferredRequest,
    list_decision,
)
from hami_deviceplugin.allocation.entries import AllocatingPod
from hami_deviceplugin.allocation.flow import FlowConfig, PodAllocationFlow
from hami_deviceplugin.allocation.identity import DeviceList
from hami_deviceplugin.allocation.sources import AllocationSources
from hami_deviceplugin.errors import invalid
from hami_deviceplugin.gpu.hostdirs import HostDirs
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.mig.grant import mig_grant, plan_mig_turns, pod_reservations
from hami_deviceplugin.gpu.mig.manager import MigManager
from hami_deviceplugin.gpu.mig.model import MigInstance
from hami_deviceplugin.gpu.plan import (
    AllocateOptions,
    ContainerGrant,
    HookLayout,
    gpu_device_list,
    plan_allocation,
    preferred_replicas,
)
from hami_deviceplugin.metrics import PluginMetrics
from hami_kube.events import EventRecorder
from hami_kube.rest import KubeClient
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import NVIDIA_DEVICES_TO_ALLOCATE, NVIDIA_MIG_ALLOCATIONS
from hami_protocol.pod.mig import encode_mig_reservations, with_runtime_ids

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
        mig: MigManager | None = None,
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
        self._mig = mig
        self._created: list[MigInstance] = []
        """MIG instances the current call created (the Allocate lock serialises calls)."""

    def _devices(self) -> DeviceList:
        return gpu_device_list(self._config.resource_name, self._inventory.replica_owners)

    def _begin(self) -> None:
        self._created = []

    async def _prepare(self, requests: Sequence[Sequence[str]]) -> _Prepared:
        layout = await self._host.layout(self._config.hook_path)
        return layout, [self._cache_name() for _ in requests]

    async def _decide(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], prepared: _Prepared
    ) -> AllocationDecision[tuple[ContainerGrant, ...]]:
        if self._mig is not None:
            return await self._decide_mig(pod, requests, self._mig)
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

    async def _decide_mig(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], mig: MigManager
    ) -> AllocationDecision[tuple[ContainerGrant, ...]]:
        plan = plan_mig_turns(
            pod, requests, gpus=self._inventory.uuids(), node_name=self._config.flow.node_name
        )
        reservations = pod_reservations(pod)
        wanted = [r for turn in plan.grants for r in turn.reservations]
        runtime = await mig.realise(
            pod, wanted, pod_reservations=reservations, created=self._created
        )
        try:
            merged = encode_mig_reservations(
                with_runtime_ids(reservations, runtime, overwrite=True)
            )
        except ProtocolError as exc:
            raise invalid(str(exc)) from None
        grants = tuple(mig_grant(turn, runtime) for turn in plan.grants)
        return AllocationDecision(
            result=grants,
            writes={NVIDIA_DEVICES_TO_ALLOCATE: plan.remaining, NVIDIA_MIG_ALLOCATIONS: merged},
            done=plan.done,
            summary={
                "containers": [grant.container_name for grant in grants],
                "mig": [grant.envs for grant in grants],
                "created": len(self._created),
            },
        )

    async def _abandon(self) -> None:
        if self._mig is not None and self._created:
            created, self._created = self._created, []
            await self._mig.undo(created)

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
