"""Admitting and starting the node's pods one at a time, as the kubelet does (:class:`PodStarter`).

* Admission: the pods come in the order :mod:`.admission` gives (a knob pauses or delays it);
  the device manager allocates (:mod:`..deviceplugins.devicemanager`). A refusal marks the pod
  ``Failed`` with reason ``UnexpectedAdmissionError`` and message ``Pod was rejected: Allocate
  failed due to <error>, which is unexpected`` and posts a Warning Event, as ``rejectPod`` does.
  Then the predicate check on extended resources the node advertises beyond its device plugins
  (:mod:`.predicate`): a shortfall fails the pod with reason ``OutOf<name>`` and message ``Pod
  was rejected: Node didn't have enough resource: ...``. Pods asking for no device-plugin
  resource go straight to ``Running`` (after that check).
* Start (SyncPod): the pod's DRA claims are prepared first (:mod:`..dra`; a failure leaves the
  pod ``Pending`` and is retried every ``dra_retry_interval`` seconds), each container gets the
  CDI devices of the claims it lists, then ``PreStartContainer`` (a failure leaves the pod
  ``Pending`` with that container waiting in ``CreateContainerConfigError``, no retry) and the
  ``Running`` status with the pod's IPs.

What each container was given (device IDs, envs, mounts, devices, annotations, CDI devices) is
kept in memory (``NodePods.allocations``) and, for pods that got any device, written to the
emulator's own pod annotation ``kubesim.hami.io/container-allocations`` (its JSON form is in
:mod:`..status`) in the status write that marks the pod ``Running`` (or records its failed
start): the real kubelet keeps this in a local checkpoint and sends only the status, so each
admission costs the API server one write here too. Status writes are retried on 5xx/429 and lost
connections (:mod:`.statusmanager`).
"""

from __future__ import annotations

import asyncio

import structlog

from hami_kube.errors import KubeError
from hami_kube.events import EventRecorder, EventType
from hami_kube.objects import NodeView, PodView
from hami_kube.resources import NODES
from hami_kube.rest import KubeClient
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.kubelet.deviceplugins.devicemanager import (
    AdmissionError,
    DeviceManager,
    PreStartError,
)
from hami_kubesim.kubelet.dra.host import DraHost, uses_claims
from hami_kubesim.kubelet.dra.manager import InjectionError
from hami_kubesim.kubelet.nodestatus import NodeStatusPublisher
from hami_kubesim.kubelet.pods.lifecycle import NodePods
from hami_kubesim.kubelet.pods.predicate import InsufficientResource, insufficient_extended
from hami_kubesim.kubelet.pods.statusmanager import patch_pod_status
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.status import (
    ALLOCATIONS_ANNOTATION,
    REASON_CREATE,
    REASON_UNEXPECTED_ADMISSION,
    PodAllocation,
    admission_failure_message,
    next_pod_ip,
    rejected_status,
    running_status,
    start_failed_status,
)
from hami_kubesim.scheduler.predicates import ResourceParseError

log = structlog.get_logger(__name__)


class PodStarter:
    """The node's pod worker: admits the queued pods one at a time and starts them."""

    def __init__(
        self,
        settings: KubeletSettings,
        *,
        pods: NodePods,
        devices: DeviceManager,
        dra: DraHost,
        node_status: NodeStatusPublisher,
    ) -> None:
        self.settings = settings
        self.node_name = settings.node_name
        self._pods = pods
        self._devices = devices
        self._dra = dra
        self._node_status = node_status
        self.admitting: str | None = None
        """``namespace/name`` of the pod being admitted right now, if any."""
        self.admission_log: list[str] = []
        """``namespace/name`` of every pod whose admission started, in that order."""
        self._node_ip: str | None = None

    async def run(self, client: KubeClient, events: EventRecorder) -> None:
        """Admit until cancelled."""
        while True:
            uid = await self._pods.queue.next()
            pod = self._pods.views.get(uid)  # the latest view: it may have changed while it waited
            if pod is None or pod.deleting or pod.terminal:
                continue
            if pod.phase == "Running":
                self._pods.adopt(pod)
                continue
            self._pods.manager.enter(uid)  # the pod manager has it before it is admitted
            self.admitting = pod.key
            self.admission_log.append(pod.key)
            try:
                await self._admit(client, events, pod)
            except KubeError as error:
                log.warning("pod admission write failed", node=self.node_name, error=str(error))
            except Exception:
                # One bad pod must not stop the node's pod worker.
                log.exception("pod admission crashed", node=self.node_name)
            except asyncio.CancelledError:
                # A cancellation this task was not sent (a library's, from below) must not end
                # the worker either: a TaskGroup drops a cancelled child without a word.
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise
                log.error("pod admission cancelled from below", node=self.node_name, pod=pod.key)
            finally:
                self.admitting = None

    async def _admit(self, client: KubeClient, events: EventRecorder, pod: PodView) -> None:
        uid = pod.uid
        try:
            allocation = await self._devices.admit(pod)
        except AdmissionError as error:
            await self._reject(client, events, pod, admission_failure_message(str(error)))
            return
        if uid not in self._pods.views:  # deleted while the plugins were answering
            self._pods.free(uid)
            return
        shortfall = self._shortfall(pod)
        if shortfall is not None:
            message = shortfall.message
            await self._reject(
                client,
                events,
                pod,
                f"Pod was rejected: {message}",
                reason=shortfall.reason,
                event_message=message,
            )
            return
        await self._start(client, events, pod, allocation)

    async def _start(
        self, client: KubeClient, events: EventRecorder, pod: PodView, allocation: PodAllocation
    ) -> None:
        """SyncPod for an admitted pod: its DRA claims prepared (else it waits and this runs
        again later), its containers created with their CDI devices, PreStartContainer, and
        the Running status."""
        uid, namespace, name = pod.uid, pod.namespace, pod.name
        if uses_claims(pod):
            try:
                extra = await self._dra.sync_pod(client, events, pod)
            except InjectionError as error:
                await events.record(pod.raw, EventType.WARNING, "Failed", f"Error: {error}")
                status = start_failed_status(pod, error.container, str(error), reason=REASON_CREATE)
                if await patch_pod_status(client, pod, status) is None:
                    self._pods.forget(uid)
                return
            if extra is None:
                retry = self._retry_start(client, events, uid, allocation)
                self._pods.background(retry, f"kubelet-{self.node_name}-retry-{pod.key}")
                return
            if uid not in self._pods.views:  # deleted while the drivers answered
                self._pods.free(uid)
                return
            allocation = allocation.with_resources(extra)
        self._pods.allocations[(namespace, name)] = allocation
        # The record rides in the status write: the real kubelet checkpoints locally and sends
        # the API server only that write, so an admission costs what the kubelet's costs.
        record = (
            {ALLOCATIONS_ANNOTATION: allocation.annotation_value()}
            if allocation.has_devices
            else None
        )
        try:
            await self._devices.pre_start(allocation)
        except PreStartError as error:
            status = start_failed_status(pod, error.container, str(error))
            if await patch_pod_status(client, pod, status, annotations=record) is None:
                self._pods.forget(uid)
            return
        host_ip = await self._host_ip(client)
        pod_ip = host_ip if pod.spec.get("hostNetwork") else self._pod_ip(uid)
        status = running_status(pod, host_ip=host_ip, pod_ip=pod_ip, now=format_time(utc_now()))
        if await patch_pod_status(client, pod, status, annotations=record) is not None:
            log.info("pod running", node=self.node_name, pod=f"{namespace}/{name}")
        else:
            self._pods.forget(uid)

    async def _retry_start(
        self, client: KubeClient, events: EventRecorder, uid: str, allocation: PodAllocation
    ) -> None:
        await asyncio.sleep(self.settings.dra_retry_interval)
        pod = self._pods.active_pod(uid)
        if pod is not None:
            await self._start(client, events, pod, allocation)

    def _shortfall(self, pod: PodView) -> InsufficientResource | None:
        """The predicate admit handler's check on extended resources (see :mod:`.predicate`)."""
        node = self._node_status.node
        if node is None:
            return None
        others = [view for view in self._pods.manager.active_views() if view.uid != pod.uid]
        try:
            return insufficient_extended(pod, node, others, managed=self._devices.capacity_view())
        except ResourceParseError:
            return None  # the API server stores only valid quantities; nothing to check

    async def _reject(
        self,
        client: KubeClient,
        events: EventRecorder,
        pod: PodView,
        message: str,
        *,
        reason: str = REASON_UNEXPECTED_ADMISSION,
        event_message: str | None = None,
    ) -> None:
        """``rejectPod``: a Warning Event (``event_message``, by default the same text), then
        status ``Failed`` with ``reason`` and ``message`` — the kubelet's order, so whoever sees
        the pod Failed finds the Event that says why (the other way round, a reader could see
        the status before the Event existed)."""
        log.info("pod rejected", node=self.node_name, pod=pod.key, message=message)
        self._pods.manager.reject(pod.uid)  # no longer active, before its status is written
        await events.record(pod.raw, EventType.WARNING, reason, event_message or message)
        await patch_pod_status(client, pod, rejected_status(pod, message, reason=reason))

    async def _host_ip(self, client: KubeClient) -> str:
        """The node's InternalIP, read once: the real kubelet knows its own addresses (it
        reports them) and does not ask the API server at each admission."""
        if self._node_ip is not None:
            return self._node_ip
        try:
            node = await client.get(NODES, self.node_name)
        except KubeError:
            return self.settings.host_ip
        for address in NodeView(node).addresses:
            if address.get("type") == "InternalIP" and address.get("address"):
                self._node_ip = str(address["address"])
                return self._node_ip
        return self.settings.host_ip

    def _pod_ip(self, uid: str) -> str:
        pod_ips = self._pods.pod_ips
        if uid not in pod_ips:
            taken = frozenset(pod_ips.values())
            pod_ips[uid] = next_pod_ip(self.settings.pod_cidr, taken, node=self.node_name)
        return pod_ips[uid]
