"""The vendor node agent: every vendor device plugin of one node, played in-process.

For each ``nodes[].vendors[]`` entry it does what that vendor's plugin does (see
:mod:`.profiles`, :mod:`.inventory`):

* every ``report_interval`` (30 s, as HAMi's vendor plugins) it merge-patches the node's
  register annotation and handshake ``Reported …`` — which answers the scheduler's
  ``Requesting_…`` — or the vendor's own annotation, and the labels it sets (AWS's
  instance type); capacity vendors write nothing there;
* it serves each of the vendor's kubelet resources over gRPC (:mod:`.plugin`) and registers it on
  the node's ``kubelet.sock``, so the kubelet stand-in sets node capacity and allocatable and
  calls ``Allocate`` when it admits a pod;
* at ``Allocate`` of the count resource it lists the node's pods, takes the waiting pod's next
  container from the scheduler's annotations, writes back what the plugin writes (the consumed
  list, the marker's done value) and releases the node lock it holds (:mod:`.allocation`).
  Allocations are one at a time per node, as the kubelet admits pods one at a time.

After a kubelet restart (its plugin dir's sockets deleted) each plugin serves and registers
again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path

import grpc
import structlog

from hami_kube.errors import KubeError
from hami_kube.objects import NodeView, PodView
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES, PODS
from hami_kube.rest import KubeClient
from hami_kube.timefmt import utc_now
from hami_kubesim.access import connect
from hami_kubesim.background_tasks import BackgroundRunner, RunsInBackground
from hami_kubesim.vendors.allocation import GIVEN_ANNOTATION, grant_for, lock_release, waiting_pods
from hami_kubesim.vendors.inventory import (
    VendorDevices,
    device_ids,
    kubelet_devices,
    node_annotations,
    node_labels,
)
from hami_kubesim.vendors.plugin import GrantError, ResourcePlugin
from hami_kubesim.vendors.profiles import Profile
from hami_protocol import keys

__all__ = ["VendorAgent"]

log = structlog.get_logger(__name__)

_REGISTER_POLL_S = 0.05
_REGISTER_WITHIN_S = 30.0
_SOCKET_POLL_S = 0.1


class VendorAgent(RunsInBackground):
    """``async with VendorAgent(...)``: the node's vendor plugins, ready once registered."""

    def __init__(
        self,
        *,
        node: str,
        plugin_dir: Path,
        api_url: str,
        vendors: Sequence[VendorDevices],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        super().__init__(BackgroundRunner(f"vendors-{node}", what=f"vendor plugins of {node}"))
        self.node = node
        self.plugin_dir = plugin_dir
        self.api_url = api_url
        self.vendors = tuple(vendors)
        self._clock = clock
        self._allocating = asyncio.Lock()
        self._given: dict[str, dict[str, set[int]]] = {v.vendor: {} for v in self.vendors}
        """Per vendor, pod UID → container indices given (for vendors without a to-allocate
        list: their plugins keep this state themselves)."""
        self.reports = 0
        self.reregistrations = 0
        """Plugins served and registered again after a kubelet restart."""
        self.grants: list[tuple[str, str, int]] = []
        """``(vendor, namespace/pod, container index)`` of every grant, in order."""

    async def run(self) -> None:
        async with connect(self.api_url, component=f"vendor-plugins/{self.node}") as client:
            plugins = self._plugins(client)
            try:
                for plugin in plugins:
                    await plugin.serve()
                await self.report(client)
                for plugin in plugins:
                    await self._register(plugin)
                self.runner.ready.set()
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._report_loop(client), name=f"vendors-{self.node}-report")
                    group.create_task(
                        self._follow_kubelet(plugins), name=f"vendors-{self.node}-kubelet"
                    )
            finally:
                self.runner.ready.clear()
                for plugin in plugins:
                    await plugin.stop()

    async def _report_loop(self, client: KubeClient) -> None:
        interval = min(v.report_interval for v in self.vendors)
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(KubeError):
                await self.report(client)

    async def _follow_kubelet(self, plugins: Sequence[ResourcePlugin]) -> None:
        """A kubelet restart deletes every socket in its plugin dir: serve again and register
        again, as the plugins do when they see their socket go (inotify there, a poll here)."""
        while True:
            await asyncio.sleep(_SOCKET_POLL_S)
            for plugin in plugins:
                if not plugin.socket.exists():
                    await plugin.stop()
                    await plugin.serve()
                    await self._register(plugin)
                    self.reregistrations += 1

    def _plugins(self, client: KubeClient) -> list[ResourcePlugin]:
        plugins: list[ResourcePlugin] = []
        for spec in self.vendors:
            for resource, devices in kubelet_devices(spec, self.node).items():
                counts = resource == spec.profile.count_resource
                plugins.append(
                    ResourcePlugin(
                        plugin_dir=self.plugin_dir,
                        endpoint=f"vd{len(plugins)}.sock",
                        resource=resource,
                        devices=devices,
                        grant=self._granter(client, spec) if counts else None,
                    )
                )
        return plugins

    async def _register(self, plugin: ResourcePlugin) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _REGISTER_WITHIN_S
        while True:
            try:
                await plugin.register()
                return
            except grpc.aio.AioRpcError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(_REGISTER_POLL_S)  # the kubelet's socket is not up yet

    async def report(self, client: KubeClient) -> None:
        """One report of every vendor: annotations and labels on the node."""
        now = self._clock()
        annotations: dict[str, str | None] = {}
        labels: dict[str, str | None] = {}
        for spec in self.vendors:
            annotations.update(node_annotations(spec, self.node, now))
            labels.update(node_labels(spec))
        if annotations or labels:
            await patch_metadata(
                client, NODES, self.node, annotations=annotations or None, labels=labels or None
            )
        self.reports += 1

    def _granter(
        self, client: KubeClient, spec: VendorDevices
    ) -> Callable[[Sequence[str]], Awaitable[dict[str, str]]]:
        # The replica IDs say nothing about the pod: like the vendors' plugins, ignore them.
        async def grant(device_ids: Sequence[str]) -> dict[str, str]:
            async with self._allocating:
                return await self._grant(client, spec)

        return grant

    async def _grant(self, client: KubeClient, spec: VendorDevices) -> dict[str, str]:
        profile, given = spec.profile, self._given[spec.vendor]
        try:
            listed = await client.list(PODS, field_selector=f"spec.nodeName={self.node}")
        except KubeError as error:
            raise GrantError(f"listing the pods of {self.node}: {error}") from error
        waiting = waiting_pods(listed.get("items") or (), profile, node=self.node, given=given)
        if not waiting:
            raise GrantError(f"no pod on {self.node} waits for {spec.vendor} devices")
        pod = waiting[0]
        grant = grant_for(pod, profile, given.get(pod.uid, ()))
        if grant is None:  # waiting_pods chose it for a pending container
            raise GrantError(f"{pod.key} lists no pending {spec.vendor} devices")
        foreign = sorted({d.uuid for d in grant.devices} - set(device_ids(spec, self.node)))
        if foreign:
            # The plugins fail the pod's allocation (bind-phase failed) and free the node.
            await self._fail(client, profile, pod)
            raise GrantError(f"{pod.key}: {', '.join(foreign)} not a {spec.vendor} device here")
        try:
            if grant.pod_annotations:
                await patch_metadata(
                    client,
                    PODS,
                    pod.name,
                    namespace=pod.namespace,
                    annotations=dict(grant.pod_annotations),
                )
            if grant.finished:
                await self._unlock(client, profile, pod)
        except KubeError as error:
            raise GrantError(f"writing {pod.key}: {error}") from error
        given.setdefault(pod.uid, set()).add(grant.index)
        self.grants.append((spec.vendor, pod.key, grant.index))
        log.info(
            "vendor devices given",
            node=self.node,
            vendor=spec.vendor,
            pod=pod.key,
            container=grant.index,
            devices=[d.uuid for d in grant.devices],
        )
        return {GIVEN_ANNOTATION: grant.given_value(spec.vendor)}

    async def _unlock(self, client: KubeClient, profile: Profile, pod: PodView) -> None:
        node = NodeView(await client.get(NODES, self.node))
        release = lock_release(profile, node.annotations, pod)
        if release:
            await patch_metadata(client, NODES, self.node, annotations=release)

    async def _fail(self, client: KubeClient, profile: Profile, pod: PodView) -> None:
        with contextlib.suppress(KubeError):
            if profile.marker is not None and profile.marker.key == keys.BIND_PHASE:
                await patch_metadata(
                    client,
                    PODS,
                    pod.name,
                    namespace=pod.namespace,
                    annotations={keys.BIND_PHASE: keys.BIND_PHASE_FAILED},
                )
            await self._unlock(client, profile, pod)
