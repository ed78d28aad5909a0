"""The kubelet stand-in's DRA side, as its SyncPod uses it: :class:`DraHost` holds the plugin
watcher (:mod:`.watcher`) and the DRA manager (:mod:`.manager`) of one node.

:meth:`DraHost.sync_pod` is the step the kubelet runs before it creates a pod's sandbox: the
claims are prepared and each container's CDI devices applied. When preparing fails the pod does
not start: a Warning Event ``FailedPrepareDynamicResources`` ("Failed to prepare dynamic
resources: ..."), each time, and — once — the status a real kubelet reports for a pod without a
sandbox (Pending, ``PodReadyToStartContainers`` false, containers waiting in
``ContainerCreating``); the caller tries again later, as the kubelet's pod worker does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

import structlog

from hami_kube.events import EventRecorder, EventType
from hami_kube.objects import PodView
from hami_kube.rest import KubeClient
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.kubelet.dra.manager import DraManager, PrepareError
from hami_kubesim.kubelet.dra.watcher import PluginWatcher
from hami_kubesim.kubelet.pods.statusmanager import patch_pod_status
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.status import ResourceAllocation, creating_status

__all__ = ["REASON_FAILED_PREPARE", "DraHost", "uses_claims"]

log = structlog.get_logger(__name__)

REASON_FAILED_PREPARE: Final = "FailedPrepareDynamicResources"


def uses_claims(pod: PodView) -> bool:
    """Whether the pod lists any ResourceClaim (``spec.resourceClaims``)."""
    return bool(pod.spec.get("resourceClaims"))


class DraHost:
    """Plugin watcher and DRA manager of one node; ``run`` both in the stand-in's task group."""

    def __init__(self, settings: KubeletSettings) -> None:
        self.settings = settings
        self.watcher = PluginWatcher(
            settings.registry_dir,
            node=settings.node_name,
            interval=settings.plugin_watch_interval,
            dial_timeout=settings.dial_timeout,
            call_timeout=settings.dra_call_timeout,
        )
        self.manager = DraManager(
            node=settings.node_name,
            plugins=self.watcher,
            cdi_dirs=settings.cdi_dirs,
            retry_interval=settings.dra_retry_interval,
        )
        self._creating: set[str] = set()
        """Pods whose ContainerCreating status is written."""

    async def sync_pod(
        self, client: KubeClient, events: EventRecorder, pod: PodView
    ) -> dict[str, tuple[ResourceAllocation, ...]] | None:
        """The records the pod's containers get from their claims; ``None`` when the claims
        could not be prepared (reported; try again later). Raises
        :class:`~.manager.InjectionError` when a container's CDI devices are unresolvable."""
        try:
            await self.manager.prepare(client, pod)
        except PrepareError as error:
            log.info("pod claims not prepared", pod=pod.key, error=str(error))
            message = f"Failed to prepare dynamic resources: {error}"
            await events.record(pod.raw, EventType.WARNING, REASON_FAILED_PREPARE, message)
            if pod.uid not in self._creating:
                self._creating.add(pod.uid)
                status = creating_status(pod, now=format_time(utc_now()))
                await patch_pod_status(client, pod, status)
            return None
        self._creating.discard(pod.uid)
        return await self.manager.container_resources(pod)

    async def readopt(
        self, client: KubeClient, uid: str, current: Callable[[str], PodView | None]
    ) -> None:
        """A pod running before this stand-in saw it: prepare its claims again (the drivers
        answer as before) so the cache knows them, retried until it works or the pod stops."""
        while (pod := current(uid)) is not None:
            try:
                await self.manager.prepare(client, pod)
            except PrepareError as error:
                log.warning("running pod's claims not prepared", pod=pod.key, error=str(error))
                await asyncio.sleep(self.settings.dra_retry_interval)
                continue
            if current(uid) is None:  # it stopped meanwhile: its reference must go again
                self.manager.release(uid)
            return

    def release(self, uid: str) -> None:
        """The pod stopped or is gone."""
        self._creating.discard(uid)
        self.manager.release(uid)
