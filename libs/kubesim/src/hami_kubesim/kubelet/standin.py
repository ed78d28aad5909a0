"""A kubelet stand-in for one simulated node.

It serves the device-plugin ``Registration`` service on ``<plugin dir>/kubelet.sock`` and the
pod-resources API on ``<pod-resources dir>/kubelet.sock`` (:mod:`.podresources`), keeps the
node's device capacity/allocatable current from every plugin's ListAndWatch stream, and admits
the pods bound to its node one at a time, as the kubelet does (:mod:`.admission`: batches sorted
by creation time; a knob pauses or delays admission). No container runs. How it runs (directories,
timeouts, the pod CIDR) is a :class:`~.settings.KubeletSettings`.

What it copies from the kubelet (``pkg/kubelet/cm/devicemanager``):

* Node status: per resource, capacity = all devices, allocatable = devices reported
  ``Healthy`` (merge patches on ``nodes/<node>/status``; other resources untouched). It patches
  as soon as a plugin reports a change, where the kubelet waits for its next status sync.
  Extended resources someone else put in capacity (``PATCH nodes/<node>/status``) get the same
  allocatable, and extended allocatable entries without capacity are deleted, as each kubelet
  status sync does (:mod:`.predicate`); the stand-in watches its node and does it as soon as
  capacity changes.
* A plugin's stream ending: all its devices become unhealthy (capacity kept, allocatable 0);
  after the grace period (5 min) without a new registration the resource is dropped and reported
  with capacity and allocatable 0. A re-registration replaces the old endpoint at once.
* The pod manager: a pod enters it when its admission starts (before any ``Allocate``) and
  leaves it when deleted; the *active* pods (not terminal, not rejected) are what pod-resources
  ``List`` shows, each container with the devices recorded as its ``Allocate`` returned.
* Admission: see :mod:`.devicemanager`. A refusal marks the pod ``Failed`` with reason
  ``UnexpectedAdmissionError`` and message ``Pod was rejected: Allocate failed due to <error>,
  which is unexpected`` and posts a Warning Event, as ``rejectPod`` does. Then the predicate
  check on extended resources the node advertises beyond its device plugins (:mod:`.predicate`):
  a shortfall fails the pod with reason ``OutOf<name>`` and message ``Pod was rejected: Node
  didn't have enough resource: ...``. Pods asking for no device-plugin resource go straight to
  ``Running`` (after that check).
* Devices are freed when a pod is deleted or reaches ``Succeeded``/``Failed``; a pod marked for
  deletion (a graceful DELETE, see ``Store.kubelet_nodes``) counts as stopped at once and is
  deleted with grace period 0, retried on 5xx and lost connections — unless it carries
  ``kubesim.hami.io/ignores-sigterm: "true"``: its containers then stop only when its grace
  period ends (``deletionGracePeriodSeconds``, at most ``stop_wait_cap``), holding their
  devices until then. The real kubelet kills the containers (SIGTERM, then SIGKILL at the end
  of the grace period) and writes a terminal phase before that delete; the phase is not
  written here.
* A pod already ``Running`` when the stand-in first sees it is not admitted again: it joins the
  pod manager with the devices its allocation record names (the kubelet's checkpoint; see below),
  or none when it has no record.
* HAMi-core in the containers (with ``host_root`` set): every running container whose
  ``Allocate`` answer names a shared cache (``CUDA_DEVICE_MEMORY_SHARED_CACHE`` on a host mount)
  keeps its region file under ``host_root`` current, as ``libvgpu.so`` would (:mod:`.workloads`),
  until its pod is deleted or stops; the node's vGPU monitor reads them.
* Restart (:meth:`KubeletStandIn.restart`): every unix socket in the plugin dir is deleted
  (plugin sockets included, other files kept), plugin connections drop, ``kubelet.sock`` is
  created again; pod allocations survive (the kubelet's checkpoint) and device lists stay empty
  until the plugins register again. The pod-resources socket is served anew. Node status is not
  rewritten meanwhile.

* DRA (:mod:`.dra`): DRA drivers register through ``plugins_registry`` (the plugin watcher).
  After admission and before the containers start, a pod's ResourceClaims are prepared
  (NodePrepareResources, batched per driver) and each container gets the CDI devices of the
  claims it lists, applied from the node's CDI spec files (env, mounts, device nodes); a failure
  leaves the pod Pending (``ContainerCreating``) with a ``FailedPrepareDynamicResources`` event
  and is retried every ``dra_retry_interval`` seconds. Claims no pod of the node uses any more
  are unprepared. A restart drops the driver connections (their sockets stay: they register
  again) and keeps the claim cache; a new stand-in prepares a running pod's claims again.

What each container was given (device IDs, envs, mounts, devices, annotations, CDI devices) is
kept in memory (:attr:`KubeletStandIn.allocations`) and, for pods that got any device, written
to the emulator's own pod annotation ``kubesim.hami.io/container-allocations`` (its JSON form is
in :mod:`.status`) in the status write that marks the pod ``Running`` (or records its failed
start): the real kubelet keeps this in a local checkpoint and sends only the status, so each
admission costs the API server one write here too. A failing ``PreStartContainer`` leaves the pod
``Pending`` with that container waiting in ``CreateContainerConfigError`` (no retry). Status
writes are retried on 5xx/429 and lost connections (:mod:`.statusmanager`).

It talks to the API server through :mod:`hami_kube`: a ``Reflector`` follows the node's pods
(``fieldSelector=spec.nodeName=<node>``), writes go through ``KubeClient`` (retried with
``with_retries``), and the rejection Event through ``EventRecorder``, which bumps the count of a
repeated one as the kubelet's recorder does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import structlog

from hami_kube.backoff import Backoff
from hami_kube.errors import KubeError
from hami_kube.events import EventRecorder, EventType
from hami_kube.objects import NodeView, PodView
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import NODES, PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.access import RECONNECT_BACKOFF, connect, reflector_config
from hami_kubesim.background_tasks import BackgroundRunner, RunsInBackground
from hami_kubesim.kubelet.admission import AdmissionQueue
from hami_kubesim.kubelet.devicemanager import AdmissionError, DeviceManager, PreStartError
from hami_kubesim.kubelet.devices import ResourceDevices
from hami_kubesim.kubelet.dra.host import DraHost, uses_claims
from hami_kubesim.kubelet.dra.manager import ClaimState, InjectionError
from hami_kubesim.kubelet.podmanager import PodManager
from hami_kubesim.kubelet.podresources import PodResourcesServer
from hami_kubesim.kubelet.predicate import (
    InsufficientResource,
    allocatable_follows_capacity,
    insufficient_extended,
)
from hami_kubesim.kubelet.registration import RegistrationServer
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.status import (
    ALLOCATIONS_ANNOTATION,
    REASON_CREATE,
    REASON_UNEXPECTED_ADMISSION,
    PodAllocation,
    admission_failure_message,
    capacity_patch,
    next_pod_ip,
    rejected_status,
    running_status,
    start_failed_status,
    stop_delay,
)
from hami_kubesim.kubelet.statusmanager import delete_stopped_pod, patch_pod_status
from hami_kubesim.kubelet.workloads import Workloads
from hami_kubesim.scheduler.predicates import ResourceParseError

log = structlog.get_logger(__name__)

_COMPONENT = "kubelet"


class KubeletStandIn(RunsInBackground):
    """Run with ``async with KubeletStandIn(settings) as kubelet:`` or ``await run()``."""

    def __init__(self, settings: KubeletSettings) -> None:
        self.settings = settings
        self._wake_publisher = asyncio.Event()
        self._devices = DeviceManager(
            node=settings.node_name,
            publish=self._wake_publisher.set,
            grace_period=settings.grace_period,
        )
        self._registration = RegistrationServer(
            plugin_dir=settings.plugin_dir,
            on_register=self._devices.register,
            dial_timeout=settings.dial_timeout,
            call_timeout=settings.call_timeout,
        )
        self._manager = PodManager(self._devices, node=settings.node_name)
        self._pods = self._manager.views  # the latest view of each pod of the node, by UID
        self._pod_resources = PodResourcesServer(
            socket_path=settings.pod_resources_socket, source=self._manager
        )
        self._dra = DraHost(settings)
        self._handled: set[str] = set()
        self._finalizing: set[str] = set()
        self._queue = AdmissionQueue()
        self._queue.delay = settings.admission_delay
        self._admitting: str | None = None
        self.admission_log: list[str] = []
        """``namespace/name`` of every pod whose admission started, in that order."""
        self._allocations: dict[tuple[str, str], PodAllocation] = {}
        self._node_ip: str | None = None
        self._node: NodeView | None = None
        """This node as the node watch last showed it (None before it did)."""
        self._pod_ips: dict[str, str] = {}
        runner = BackgroundRunner(
            f"kubelet-{settings.node_name}", what=f"kubelet {settings.node_name}"
        )
        super().__init__(runner)
        self._client: KubeClient | None = None
        self._group: asyncio.TaskGroup | None = None
        """The serving task group: background pod deletions run in it."""
        self.restarts = 0
        self.workloads = (
            None
            if settings.host_root is None
            else Workloads(
                settings.host_root, node=settings.node_name, interval=settings.workload_interval
            )
        )
        """The containers playing HAMi-core (None without a host root)."""

    # ----- public views ------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return self.settings.node_name

    @property
    def plugin_dir(self) -> Path:
        return self.settings.plugin_dir

    @property
    def kubelet_socket(self) -> Path:
        return self._registration.socket_path

    @property
    def registrations(self) -> Mapping[str, int]:
        """Registrations accepted so far, per resource name."""
        return dict(self._devices.registrations)

    def resources(self) -> dict[str, ResourceDevices]:
        """Devices per registered resource, as last reported by the plugins."""
        return self._devices.resources()

    @property
    def allocations(self) -> Mapping[tuple[str, str], PodAllocation]:
        """What each admitted pod's containers were given, by ``(namespace, name)``."""
        return dict(self._allocations)

    def allocation(self, namespace: str, name: str) -> PodAllocation | None:
        return self._allocations.get((namespace, name))

    def devices_in_use(self, resource: str) -> frozenset[str]:
        """Device IDs held by active pods on this node."""
        return self._devices.in_use(resource)

    @property
    def pod_resources_socket(self) -> Path:
        """Where pod-resources ``v1.PodResourcesLister`` is served."""
        return self._pod_resources.socket_path

    @property
    def pod_resources_calls(self) -> Mapping[str, int]:
        """Pod-resources calls answered so far, by method (``List``, ``Get``, ...)."""
        return dict(self._pod_resources.calls)

    @property
    def dra_drivers(self) -> Mapping[str, Path]:
        """Registered DRA drivers and the endpoint each is called on."""
        return self._dra.watcher.drivers

    @property
    def dra(self) -> DraHost:
        """The DRA side: plugin watcher (``registrations``, ``refusals``) and claim manager."""
        return self._dra

    def prepared_claims(self) -> Mapping[tuple[str, str], ClaimState]:
        """The node's claim cache, by ``(namespace, claim name)``."""
        return self._dra.manager.claims

    @property
    def admitting(self) -> str | None:
        """``namespace/name`` of the pod being admitted right now, if any."""
        return self._admitting

    # ----- the knob ----------------------------------------------------------------------

    def pause(self) -> None:
        """Start no admission until :meth:`resume` (see :mod:`.admission`)."""
        self._queue.pause()
        log.info("kubelet admission paused", node=self.node_name)

    def resume(self) -> None:
        self._queue.resume()
        log.info("kubelet admission resumed", node=self.node_name)

    @property
    def paused(self) -> bool:
        return self._queue.paused

    @property
    def admission_delay(self) -> float:
        return self._queue.delay

    def set_admission_delay(self, seconds: float) -> None:
        """Every admission from now on starts ``seconds`` late (0: none)."""
        self._queue.delay = seconds

    def describe(self) -> dict[str, Any]:
        """The knob's state (``/_sim/kubelets/<node>``)."""
        return {"node": self.node_name, **self._queue.describe(), "admitting": self._admitting}

    # ----- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until cancelled."""
        self.settings.plugin_dir.mkdir(parents=True, exist_ok=True)
        component = f"{_COMPONENT}/{self.node_name}"
        try:
            async with connect(self.settings.api_url, component=component) as client:
                self._client = client
                await self._serve(client)
        finally:
            self.runner.ready.clear()
            self._client = self._group = None
            await self._registration.stop()
            await self._pod_resources.stop()
            await self._devices.aclose()
            await self._dra.watcher.aclose()

    async def _serve(self, client: KubeClient) -> None:
        name = self.node_name
        events = EventRecorder(client, component=_COMPONENT, host=name)
        pods = Reflector(
            client,
            PODS,
            config=reflector_config(field_selector=f"spec.nodeName={name}"),
            handlers=[
                EventHandlers(on_add=self._added, on_update=self._replaced, on_delete=self._gone)
            ],
            name=f"kubelet-{name}-pods",
        )
        node = Reflector(
            client,
            NODES,
            config=reflector_config(field_selector=f"metadata.name={name}"),
            handlers=[EventHandlers(on_add=self._node_seen, on_update=self._node_changed)],
            name=f"kubelet-{name}-node-watch",
        )
        self._remove_sockets()
        await self._registration.start()
        await self._pod_resources.start()
        async with asyncio.TaskGroup() as group:
            self._group = group
            group.create_task(self._publish_loop(client), name=f"kubelet-{name}-node-status")
            group.create_task(node.run(), name=f"kubelet-{name}-node-watch")
            group.create_task(self._dra.watcher.run(), name=f"kubelet-{name}-plugin-watcher")
            group.create_task(self._dra.manager.run(), name=f"kubelet-{name}-dra-unprepare")
            await node.wait_synced()  # admission reads what the node advertises
            group.create_task(self._admit_loop(client, events), name=f"kubelet-{name}-admission")
            group.create_task(pods.run(), name=f"kubelet-{name}-pod-watch")
            if self.workloads is not None:
                group.create_task(self.workloads.run(), name=f"kubelet-{name}-workloads")
            await pods.wait_synced()
            self.runner.ready.set()

    async def restart(self) -> None:
        """Simulate a kubelet restart as the plugins see it.

        The Registration server goes away, every unix socket in the plugin dir is deleted (the
        kubelet's start-up clean-up; other files stay), all plugin connections are dropped and
        ``kubelet.sock`` is created again. Pod allocations survive (the kubelet's checkpoint);
        device lists are empty until each plugin registers again.
        """
        await self._registration.stop()
        await self._pod_resources.stop()
        self._remove_sockets()
        await self._devices.forget_plugins()
        await self._dra.watcher.forget()  # DRA drivers' sockets stay; they register anew
        await self._registration.start()
        await self._pod_resources.start()
        self.restarts += 1
        log.info("kubelet restarted", node=self.node_name)

    def _remove_sockets(self) -> None:
        """The kubelet's start-up clean-up: every unix socket in the plugin dir goes."""
        for entry in self.settings.plugin_dir.iterdir():
            if entry.is_socket():
                entry.unlink(missing_ok=True)

    # ----- node status -------------------------------------------------------------------

    def _node_seen(self, raw: JsonObject) -> None:
        self._node = NodeView(raw)
        if self._allocatable_changes():
            self._wake_publisher.set()

    def _node_changed(self, _: JsonObject, new: JsonObject) -> None:
        self._node_seen(new)

    def _allocatable_changes(self) -> dict[str, object | None]:
        """What a kubelet status sync would change in the allocatable of extended resources
        that are not the device plugins' (empty before the node watch delivered the node)."""
        if self._node is None:
            return {}
        return allocatable_follows_capacity(
            self._node.capacity, self._node.allocatable, managed=self._devices.capacity_view()
        )

    async def _publish_loop(self, client: KubeClient) -> None:
        backoff = Backoff(RECONNECT_BACKOFF)
        while True:
            await self._wake_publisher.wait()
            self._wake_publisher.clear()
            patch = capacity_patch(self._devices.capacity_view())
            patch["status"]["allocatable"].update(self._allocatable_changes())
            try:
                await client.patch(NODES, self.node_name, patch, subresource="status")
                backoff.reset()
            except KubeError as error:
                log.warning("node status patch failed", node=self.node_name, error=str(error))
                await asyncio.sleep(backoff.next_delay())
                self._wake_publisher.set()

    # ----- pods --------------------------------------------------------------------------

    async def _added(self, raw: JsonObject) -> None:
        await self._observe(PodView(raw))

    async def _replaced(self, old: JsonObject, new: JsonObject) -> None:
        old_uid = PodView(old).uid
        pod = PodView(new)
        if old_uid != pod.uid:  # deleted and created again under the same name
            self._forget(old_uid)
        await self._observe(pod)

    def _gone(self, raw: JsonObject) -> None:
        self._forget(PodView(raw).uid)

    async def _observe(self, pod: PodView) -> None:
        uid = pod.uid
        if pod.node_name != self.node_name:
            self._forget(uid)
            return
        self._pods[uid] = pod
        if pod.deleting:
            if not self._stops_late(pod):
                self._free(uid)
            self._finalize(pod)
        elif pod.terminal:
            self._free(uid)
            self._handled.add(uid)
        else:
            if uid not in self._handled:
                self._handled.add(uid)
                if pod.phase == "Running":
                    self._adopt(pod)  # started before this stand-in knew it; nothing to admit
                else:
                    self._queue.put(uid, pod.creation_timestamp)
            self._play(pod)

    def _adopt(self, pod: PodView) -> None:
        allocation = self._manager.adopt(pod)
        if allocation is not None:
            self._allocations[(allocation.namespace, allocation.name)] = allocation
            self._play(pod)
        if uses_claims(pod) and self._client is not None:
            coroutine = self._dra.readopt(self._client, pod.uid, self._active_pod)
            self._background(coroutine, f"kubelet-{self.node_name}-readopt-{pod.key}")

    def _active_pod(self, uid: str) -> PodView | None:
        pod = self._pods.get(uid)
        return None if pod is None or pod.deleting or pod.terminal else pod

    def _background(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coroutine`` in the serving task group, its failures logged (a crash must not
        end the stand-in); dropped when the stand-in is stopping."""

        async def guarded() -> None:
            try:
                await coroutine
            except Exception:
                log.exception("kubelet background task failed", node=self.node_name, task=name)

        if self._group is None:
            coroutine.close()
            return
        task = guarded()
        try:
            self._group.create_task(task, name=name)
        except RuntimeError:  # the stand-in is stopping: its task group takes no more tasks
            task.close()
            coroutine.close()

    def _play(self, pod: PodView) -> None:
        """A running pod's containers start playing HAMi-core (once; no-op without a host
        root or before its allocation is known)."""
        if self.workloads is None or pod.phase != "Running":
            return
        allocation = self._allocations.get((pod.namespace, pod.name))
        if allocation is not None and allocation.uid == pod.uid:
            self.workloads.play(allocation)

    def _free(self, uid: str) -> None:
        # Freed devices change nothing on the node object: allocatable never subtracts usage.
        self._devices.release(uid)
        self._dra.release(uid)
        self._pod_ips.pop(uid, None)
        if self.workloads is not None:
            self.workloads.stop(uid)

    def _forget(self, uid: str) -> None:
        self._free(uid)
        pod = self._manager.forget(uid)
        self._handled.discard(uid)
        self._finalizing.discard(uid)
        if pod is not None:
            found = self._allocations.get((pod.namespace, pod.name))
            if found is not None and found.uid == uid:
                del self._allocations[(pod.namespace, pod.name)]

    def _stops_late(self, pod: PodView) -> bool:
        return stop_delay(pod, cap=self.settings.stop_wait_cap) > 0

    def _finalize(self, pod: PodView) -> None:
        """Confirm a graceful deletion: the containers 'stop' at once (no process runs) — or,
        for a pod that ignores SIGTERM, once its grace period is over, its devices held until
        then — and the pod is deleted with grace 0 in the background, retried, while the pod
        watch goes on."""
        uid, client, group = pod.uid, self._client, self._group
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
            self._free(pod.uid)
        try:
            await delete_stopped_pod(client, pod)
        except KubeError as error:
            # Given up for now: the pod's next event (or a relist) tries again.
            log.warning("pod deletion failed", node=self.node_name, pod=pod.key, error=str(error))
            self._finalizing.discard(pod.uid)

    async def _admit_loop(self, client: KubeClient, events: EventRecorder) -> None:
        while True:
            uid = await self._queue.next()
            pod = self._pods.get(uid)  # the latest view: it may have changed while it waited
            if pod is None or pod.deleting or pod.terminal:
                continue
            if pod.phase == "Running":
                self._adopt(pod)
                continue
            self._manager.enter(uid)  # the pod manager has it before it is admitted
            self._admitting = pod.key
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
                self._admitting = None

    async def _admit(self, client: KubeClient, events: EventRecorder, pod: PodView) -> None:
        uid = pod.uid
        try:
            allocation = await self._devices.admit(pod)
        except AdmissionError as error:
            await self._reject(client, events, pod, admission_failure_message(str(error)))
            return
        if uid not in self._pods:  # deleted while the plugins were answering
            self._free(uid)
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
                    self._forget(uid)
                return
            if extra is None:
                retry = self._retry_start(client, events, uid, allocation)
                self._background(retry, f"kubelet-{self.node_name}-retry-{pod.key}")
                return
            if uid not in self._pods:  # deleted while the drivers answered
                self._free(uid)
                return
            allocation = allocation.with_resources(extra)
        self._allocations[(namespace, name)] = allocation
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
                self._forget(uid)
            return
        host_ip = await self._host_ip(client)
        pod_ip = host_ip if pod.spec.get("hostNetwork") else self._pod_ip(uid)
        status = running_status(pod, host_ip=host_ip, pod_ip=pod_ip, now=format_time(utc_now()))
        if await patch_pod_status(client, pod, status, annotations=record) is not None:
            log.info("pod running", node=self.node_name, pod=f"{namespace}/{name}")
        else:
            self._forget(uid)

    async def _retry_start(
        self, client: KubeClient, events: EventRecorder, uid: str, allocation: PodAllocation
    ) -> None:
        await asyncio.sleep(self.settings.dra_retry_interval)
        pod = self._active_pod(uid)
        if pod is not None:
            await self._start(client, events, pod, allocation)

    def _shortfall(self, pod: PodView) -> InsufficientResource | None:
        """The predicate admit handler's check on extended resources (see :mod:`.predicate`)."""
        if self._node is None:
            return None
        others = [view for view in self._manager.active_views() if view.uid != pod.uid]
        try:
            return insufficient_extended(
                pod, self._node, others, managed=self._devices.capacity_view()
            )
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
        """``rejectPod``: status ``Failed`` with ``reason`` and ``message``, and a Warning Event
        (``event_message``, by default the same text)."""
        log.info("pod rejected", node=self.node_name, pod=pod.key, message=message)
        self._manager.reject(pod.uid)  # no longer active, before its status is written
        await patch_pod_status(client, pod, rejected_status(pod, message, reason=reason))
        await events.record(pod.raw, EventType.WARNING, reason, event_message or message)

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
        if uid not in self._pod_ips:
            taken = frozenset(self._pod_ips.values())
            self._pod_ips[uid] = next_pod_ip(self.settings.pod_cidr, taken, node=self.node_name)
        return self._pod_ips[uid]
