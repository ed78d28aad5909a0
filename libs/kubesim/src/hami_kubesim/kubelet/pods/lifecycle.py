"""The pods bound to one node as the kubelet stand-in's pod watch shows them (:class:`NodePods`):
what each pod event does, short of admitting the pod (that is :mod:`.start`).

* A new pod is queued for admission (:mod:`.admission`: batches sorted by creation time).
* A pod already ``Running`` when the stand-in first sees it is not admitted again: it joins the
  pod manager with the devices its allocation record names (the kubelet's checkpoint, see
  :mod:`..status`), or none when it has no record; its DRA claims are prepared again.
* Devices are freed when a pod is deleted or reaches ``Succeeded``/``Failed``; a pod marked for
  deletion (a graceful DELETE, see ``Store.kubelet_nodes``) counts as stopped at once and is
  deleted with grace period 0, retried on 5xx and lost connections — unless it carries
  ``kubesim.hami.io/ignores-sigterm: "true"``: its containers then stop only when its grace
  period ends (``deletionGracePeriodSeconds``, at most ``stop_wait_cap``), holding their
  devices until then. The real kubelet kills the containers (SIGTERM, then SIGKILL at the end
  of the grace period) and writes a terminal phase before that delete; the phase is not
  written here.
* HAMi-core in the containers (with ``host_root`` set): every running container whose
  ``Allocate`` answer names a shared cache (``CUDA_DEVICE_MEMORY_SHARED_CACHE`` on a host mount)
  keeps its region file under ``host_root`` current, as ``libvgpu.so`` would (:mod:`.workloads`),
  until its pod is deleted or stops; the node's vGPU monitor reads them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from hami_kube.errors import KubeError
from hami_kube.objects import PodView
from hami_kube.resources import JsonObject
from hami_kube.rest import KubeClient
from hami_kubesim.kubelet.deviceplugins.devicemanager import DeviceManager
from hami_kubesim.kubelet.dra.host import DraHost, uses_claims
from hami_kubesim.kubelet.pods.admission import AdmissionQueue
from hami_kubesim.kubelet.pods.podmanager import PodManager
from hami_kubesim.kubelet.pods.statusmanager import delete_stopped_pod
from hami_kubesim.kubelet.pods.workloads import Workloads
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.status import PodAllocation, stop_delay

log = structlog.get_logger(__name__)


class NodePods:
    """What the stand-in knows of its node's pods; its handlers follow the pod watch."""

    def __init__(
        self,
        settings: KubeletSettings,
        *,
        devices: DeviceManager,
        manager: PodManager,
        dra: DraHost,
        queue: AdmissionQueue,
        workloads: Workloads | None,
    ) -> None:
        self.settings = settings
        self.node_name = settings.node_name
        self._devices = devices
        self.manager = manager
        self._dra = dra
        self.queue = queue
        self.workloads = workloads
        self.views = manager.views
        """The latest view of each pod of the node, by UID."""
        self.allocations: dict[tuple[str, str], PodAllocation] = {}
        """What each admitted pod's containers were given, by ``(namespace, name)``."""
        self.pod_ips: dict[str, str] = {}
        self._handled: set[str] = set()
        self._finalizing: set[str] = set()
        self.client: KubeClient | None = None
        self.group: asyncio.TaskGroup | None = None
        """The serving task group: background pod deletions run in it."""

    # ----- the pod watch's handlers ------------------------------------------------------

    async def added(self, raw: JsonObject) -> None:
        await self._observe(PodView(raw))

    async def replaced(self, old: JsonObject, new: JsonObject) -> None:
        old_uid = PodView(old).uid
        pod = PodView(new)
        if old_uid != pod.uid:  # deleted and created again under the same name
            self.forget(old_uid)
        await self._observe(pod)

    def gone(self, raw: JsonObject) -> None:
        self.forget(PodView(raw).uid)

    async def _observe(self, pod: PodView) -> None:
        uid = pod.uid
        if pod.node_name != self.node_name:
            self.forget(uid)
            return
        self.views[uid] = pod
        if pod.deleting:
            if not self._stops_late(pod):
                self.free(uid)
            self._finalize(pod)
        elif pod.terminal:
            self.free(uid)
            self._handled.add(uid)
        else:
            if uid not in self._handled:
                self._handled.add(uid)
                if pod.phase == "Running":
                    self.adopt(pod)  # started before this stand-in knew it; nothing to admit
                else:
                    self.queue.put(uid, pod.creation_timestamp)
            self._play(pod)

    # ----- what happens to a pod ---------------------------------------------------------

    def adopt(self, pod: PodView) -> None:
        allocation = self.manager.adopt(pod)
        if allocation is not None:
            self.allocations[(allocation.namespace, allocation.name)] = allocation
            self._play(pod)
        if uses_claims(pod) and self.client is not None:
            coroutine = self._dra.readopt(self.client, pod.uid, self.active_pod)
            self.background(coroutine, f"kubelet-{self.node_name}-readopt-{pod.key}")

    def active_pod(self, uid: str) -> PodView | None:
        pod = self.views.get(uid)
        return None if pod is None or pod.deleting or pod.terminal else pod

    def background(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coroutine`` in the serving task group, its failures logged (a crash must not
        end the stand-in); dropped when the stand-in is stopping."""

        async def guarded() -> None:
            try:
                await coroutine
            except Exception:
                log.exception("kubelet background task failed", node=self.node_name, task=name)

        if self.group is None:
            coroutine.close()
            return
        task = guarded()
        try:
            self.group.create_task(task, name=name)
        except RuntimeError:  # the stand-in is stopping: its task group takes no more tasks
            task.close()
            coroutine.close()

    def _play(self, pod: PodView) -> None:
        """A running pod's containers start playing HAMi-core (once; no-op without a host
        root or before its allocation is known)."""
        if self.workloads is None or pod.phase != "Running":
            return
        allocation = self.allocations.get((pod.namespace, pod.name))
        if allocation is not None and allocation.uid == pod.uid:
            self.workloads.play(allocation)

    def free(self, uid: str) -> None:
        # Freed devices change nothing on the node object: allocatable never subtracts usage.
        self._devices.release(uid)
        self._dra.release(uid)
        self.pod_ips.pop(uid, None)
        if self.workloads is not None:
            self.workloads.stop(uid)

    def forget(self, uid: str) -> None:
        self.free(uid)
        pod = self.manager.forget(uid)
        self._handled.discard(uid)
        self._finalizing.discard(uid)
        if pod is not None:
            found = self.allocations.get((pod.namespace, pod.name))
            if found is not None and found.uid == uid:
                del self.allocations[(pod.namespace, pod.name)]

    def _stops_late(self, pod: PodView) -> bool:
        return stop_delay(pod, cap=self.settings.stop_wait_cap) > 0

    def _finalize(self, pod: PodView) -> None:
        """Confirm a graceful deletion: the containers 'stop' at once (no process runs) — or,
        for a pod that ignores SIGTERM, once its grace period is over, its devices held until
        then — and the pod is deleted with grace 0 in the background, retried, while the pod
        watch goes on."""
        uid, client, group = pod.uid, self.client, self.group
        if uid in self._finalizing or client is None or group is None:
            return
        name = f"kubelet-{self.node_name}-delete-{pod.key}"
        coroutine = self._delete_stopped(client, pod)
        try:
            group.create_task(coroutine, name=name)
        except RuntimeError:  # the stand-in is stopping: its task group takes no more tasks
            coroutine.close()
            return
        self._finalizing.add(uid)

    async def _delete_stopped(self, client: KubeClient, pod: PodView) -> None:
        delay = stop_delay(pod, cap=self.settings.stop_wait_cap)
        if delay > 0:
            await asyncio.sleep(delay)  # the containers ignore SIGTERM: killed at the deadline
            self.free(pod.uid)
        try:
            await delete_stopped_pod(client, pod)
        except KubeError as error:
            # Given up for now: the pod's next event (or a relist) tries again.
            log.warning("pod deletion failed", node=self.node_name, pod=pod.key, error=str(error))
            self._finalizing.discard(pod.uid)
