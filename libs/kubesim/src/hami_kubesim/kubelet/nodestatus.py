"""The node status the kubelet stand-in keeps current (``pkg/kubelet/cm/devicemanager`` plus the
status sync), written by :class:`NodeStatusPublisher`.

* Per device-plugin resource, capacity = all devices, allocatable = devices reported
  ``Healthy`` (merge patches on ``nodes/<node>/status``; other resources untouched). It patches
  as soon as a plugin reports a change, where the kubelet waits for its next status sync.
* Extended resources someone else put in capacity (``PATCH nodes/<node>/status``) get the same
  allocatable, and extended allocatable entries without capacity are deleted, as each kubelet
  status sync does (:mod:`.pods.predicate`); the stand-in watches its node and does it as soon as
  capacity changes.
* Freed devices change nothing on the node object: allocatable never subtracts usage.
"""

from __future__ import annotations

import asyncio

import structlog

from hami_kube.backoff import Backoff
from hami_kube.errors import KubeError
from hami_kube.objects import NodeView
from hami_kube.resources import NODES, JsonObject
from hami_kube.rest import KubeClient
from hami_kubesim.access import RECONNECT_BACKOFF
from hami_kubesim.kubelet.deviceplugins.devicemanager import DeviceManager
from hami_kubesim.kubelet.pods.predicate import allocatable_follows_capacity
from hami_kubesim.kubelet.status import capacity_patch

log = structlog.get_logger(__name__)


class NodeStatusPublisher:
    """Patches the node's status each time ``wake`` is set (the device manager sets it when a
    plugin reports a change) and when the node watch shows allocatable lagging capacity."""

    def __init__(self, node_name: str, devices: DeviceManager, wake: asyncio.Event) -> None:
        self.node_name = node_name
        self._devices = devices
        self._wake = wake
        self.node: NodeView | None = None
        """This node as the node watch last showed it (None before it did)."""

    def seen(self, raw: JsonObject) -> None:
        """The node watch's ``on_add``."""
        self.node = NodeView(raw)
        if self._allocatable_changes():
            self._wake.set()

    def changed(self, _: JsonObject, new: JsonObject) -> None:
        """The node watch's ``on_update``."""
        self.seen(new)

    def _allocatable_changes(self) -> dict[str, object | None]:
        """What a kubelet status sync would change in the allocatable of extended resources
        that are not the device plugins' (empty before the node watch delivered the node)."""
        if self.node is None:
            return {}
        return allocatable_follows_capacity(
            self.node.capacity, self.node.allocatable, managed=self._devices.capacity_view()
        )

    async def run(self, client: KubeClient) -> None:
        """Publish until cancelled; a failed patch is retried after a backoff."""
        backoff = Backoff(RECONNECT_BACKOFF)
        while True:
            await self._wake.wait()
            self._wake.clear()
            patch = capacity_patch(self._devices.capacity_view())
            patch["status"]["allocatable"].update(self._allocatable_changes())
            try:
                await client.patch(NODES, self.node_name, patch, subresource="status")
                backoff.reset()
            except KubeError as error:
                log.warning("node status patch failed", node=self.node_name, error=str(error))
                await asyncio.sleep(backoff.next_delay())
                self._wake.set()
