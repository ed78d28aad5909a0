"""The kubelet stand-in's device manager: registered plugins, their devices, and pod admission.

Keeps, per resource, the current :class:`PluginEndpoint` and the devices it last reported; turns
every ListAndWatch message into a node-status publication; when a stream ends marks every device
of that resource unhealthy (capacity kept, allocatable 0) and, after the grace period with no new
registration, drops the resource (capacity 0), as the kubelet's ``ManagerImpl`` does.

Admission follows ``ManagerImpl.Allocate``: containers in order (init containers first), one
``Allocate`` per container and resource with exactly one ContainerAllocateRequest, devices of
finished init containers offered again to later containers, ``GetPreferredAllocation`` asked when
the plugin's options say it is available.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from hami_kube.objects import PodView
from hami_kubesim.kubelet.deviceplugins.devices import (
    ContainerDemand,
    DeviceAllocationError,
    DeviceLedger,
    ResourceDevices,
    container_demands,
    finish_selection,
    start_selection,
)
from hami_kubesim.kubelet.deviceplugins.registration import PluginCallError, PluginEndpoint
from hami_kubesim.kubelet.status import (
    CLAIM_RESOURCE_PREFIX,
    ContainerAllocation,
    PodAllocation,
    ResourceAllocation,
)

log = structlog.get_logger(__name__)

Publish = Callable[[], None]


class AdmissionError(Exception):
    """The device manager refused a pod; ``str()`` is the error the kubelet would wrap."""


class PreStartError(Exception):
    """``PreStartContainer`` failed for ``container``; ``str()`` is the kubelet's text."""

    def __init__(self, container: str, text: str) -> None:
        super().__init__(text)
        self.container = container


class DeviceManager:
    """State and decisions for every device-plugin resource of one node."""

    def __init__(self, *, node: str, publish: Publish, grace_period: float) -> None:
        self._node = node
        self._publish = publish
        self._grace = grace_period
        self._endpoints: dict[str, PluginEndpoint] = {}
        self._devices: dict[str, ResourceDevices] = {}
        self._removed: set[str] = set()
        self._ledger = DeviceLedger()
        self._tasks: set[asyncio.Task[None]] = set()
        self.registrations: dict[str, int] = {}
        """How many times each resource registered (tests poll this after a restart)."""

    # ----- plugins -----------------------------------------------------------------------

    async def register(self, endpoint: PluginEndpoint) -> None:
        """Adopt a newly registered plugin, replacing any older one for the same resource."""
        resource = endpoint.resource
        old = self._endpoints.get(resource)
        self._endpoints[resource] = endpoint
        self._devices.setdefault(resource, ResourceDevices())
        self._removed.discard(resource)
        self.registrations[resource] = self.registrations.get(resource, 0) + 1
        if old is not None:
            await old.close()
        self._spawn(self._consume(endpoint), f"kubelet-{self._node}-listandwatch-{resource}")

    async def _consume(self, endpoint: PluginEndpoint) -> None:
        async for devices in endpoint.list_and_watch():
            if self._endpoints.get(endpoint.resource) is not endpoint:
                return
            self._devices[endpoint.resource] = devices
            self._publish()
        await self._disconnected(endpoint)

    async def _disconnected(self, endpoint: PluginEndpoint) -> None:
        resource = endpoint.resource
        # A plugin that re-registered has already replaced this endpoint; its stream ending
        # must not touch the new one's devices (kubelet compares endpoints the same way).
        if self._endpoints.get(resource) is not endpoint:
            return
        await endpoint.close()
        self._devices[resource] = self._devices.get(resource, ResourceDevices()).all_unhealthy()
        self._publish()
        self._spawn(self._expire(resource, endpoint), f"kubelet-{self._node}-grace-{resource}")

    async def _expire(self, resource: str, endpoint: PluginEndpoint | None) -> None:
        await asyncio.sleep(self._grace)
        if self._endpoints.get(resource) is endpoint and (endpoint is None or endpoint.stopped):
            self._endpoints.pop(resource, None)
            self._devices.pop(resource, None)
            self._removed.add(resource)
            self._publish()

    async def forget_plugins(self) -> None:
        """Kubelet restart: every plugin connection is lost; devices are unknown until plugins
        register again (checkpointed pod allocations are kept), and each resource gets the grace
        period before it is dropped."""
        endpoints = list(self._endpoints.items())
        for resource, endpoint in endpoints:
            await endpoint.close()
            self._devices[resource] = ResourceDevices()
            self._endpoints.pop(resource)
            self._spawn(self._expire(resource, None), f"kubelet-{self._node}-grace-{resource}")

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "device manager task failed",
                task=task.get_name(),
                error=repr(task.exception()),
            )

    async def aclose(self) -> None:
        """Cancel stream and grace tasks and close every plugin connection."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for endpoint in list(self._endpoints.values()):
            await endpoint.close()

    # ----- views -------------------------------------------------------------------------

    def resources(self) -> dict[str, ResourceDevices]:
        """Current devices per registered resource."""
        return dict(self._devices)

    def capacity_view(self) -> dict[str, ResourceDevices | None]:
        """What the node status should say: ``None`` for resources dropped after the grace."""
        view: dict[str, ResourceDevices | None] = dict.fromkeys(self._removed)
        view.update(self._devices)
        return view

    def is_device_resource(self, name: str) -> bool:
        return name in self._devices or bool(self._ledger.in_use(name))

    def in_use(self, resource: str) -> frozenset[str]:
        return self._ledger.in_use(resource)

    # ----- pods --------------------------------------------------------------------------

    def release(self, pod_uid: str) -> bool:
        """Free every device of a pod that terminated or was deleted."""
        return self._ledger.release(pod_uid)

    def holds(self, pod_uid: str) -> bool:
        return pod_uid in self._ledger.pod_uids()

    def pod_devices(self, pod_uid: str) -> dict[str, dict[str, tuple[str, ...]]]:
        """What each container of a pod holds so far (recorded as each Allocate returns)."""
        return self._ledger.pod_devices(pod_uid)

    def restore(self, allocation: PodAllocation) -> None:
        """Take a pod's devices from the checkpoint (a pod started before this kubelet ran)."""
        for container in allocation.containers:
            for given in container.resources:
                if given.resource.startswith(CLAIM_RESOURCE_PREFIX):
                    continue  # a DRA claim's record: the DRA manager's, not a plugin device
                self._ledger.record(
                    allocation.uid, container.name, given.resource, given.device_ids
                )

    async def admit(self, pod: PodView) -> PodAllocation:
        """Allocate devices to every container of ``pod``; :class:`AdmissionError` on refusal.

        On refusal the devices given to earlier containers are freed (the rejected pod is no
        longer active, so the kubelet frees them at its next garbage collection).
        """
        uid = pod.uid
        try:
            demands = container_demands(pod, self.is_device_resource)
            containers: list[ContainerAllocation] = []
            reusable: dict[str, set[str]] = {}
            for demand in demands:
                containers.append(await self._admit_container(uid, demand, reusable))
        except (DeviceAllocationError, PluginCallError) as error:
            self._ledger.release(uid)
            raise AdmissionError(str(error)) from error
        return PodAllocation(
            namespace=pod.namespace or "default",
            name=pod.name,
            uid=uid,
            node=self._node,
            containers=tuple(containers),
        )

    async def _admit_container(
        self, uid: str, demand: ContainerDemand, reusable: dict[str, set[str]]
    ) -> ContainerAllocation:
        given: list[ResourceAllocation] = []
        for resource, count in demand.resources:
            endpoint = self._endpoints.get(resource)
            if endpoint is None:
                raise DeviceAllocationError(f"unknown Device Plugin {resource}")
            ids = await self._choose(endpoint, uid, resource, count, reusable.get(resource, set()))
            given.append(await endpoint.allocate(ids))
            self._ledger.record(uid, demand.name, resource, ids)
            if demand.kind == "init":
                reusable.setdefault(resource, set()).update(ids)
            else:
                reusable.get(resource, set()).difference_update(ids)
        return ContainerAllocation(demand.name, demand.kind, tuple(given))

    async def _choose(
        self,
        endpoint: PluginEndpoint,
        uid: str,
        resource: str,
        count: int,
        reusable: set[str],
    ) -> tuple[str, ...]:
        devices = self._devices.get(resource, ResourceDevices())
        start = start_selection(
            resource=resource,
            required=count,
            healthy=devices.healthy,
            in_use=self._ledger.in_use(resource),
            reusable=sorted(reusable),
        )
        if start.done:
            return start.chosen
        preferred: tuple[str, ...] = ()
        if endpoint.options.get_preferred_allocation_available:
            preferred = await endpoint.preferred(
                available=sorted({*start.available, *start.chosen}),
                must_include=start.chosen,
                size=count,
            )
        return finish_selection(start, preferred)

    async def pre_start(self, allocation: PodAllocation) -> None:
        """``PreStartContainer`` for every container and resource whose plugin asks for it."""
        for container in allocation.containers:
            for given in container.resources:
                endpoint = self._endpoints.get(given.resource)
                if endpoint is None or not endpoint.options.pre_start_required:
                    continue
                try:
                    await endpoint.pre_start(given.device_ids)
                except PluginCallError as error:
                    raise PreStartError(container.name, str(error)) from error
