"""A kubelet stand-in for one simulated node (:class:`KubeletStandIn`).

It serves the device-plugin ``Registration`` service on ``<plugin dir>/kubelet.sock`` and the
pod-resources API on ``<pod-resources dir>/kubelet.sock`` (:mod:`.podresources`), keeps the
node's device capacity/allocatable current from every plugin's ListAndWatch stream
(:mod:`.nodestatus`), follows the pods bound to its node (:mod:`.pods.lifecycle`) and admits and
starts them one at a time, as the kubelet does (:mod:`.pods.start`; a knob pauses or delays
admission). No container runs. How it runs (directories, timeouts, the pod CIDR) is a
:class:`~.settings.KubeletSettings`.

What else it copies from the kubelet (``pkg/kubelet/cm/devicemanager``):

* A plugin's stream ending: all its devices become unhealthy (capacity kept, allocatable 0);
  after the grace period (5 min) without a new registration the resource is dropped and reported
  with capacity and allocatable 0. A re-registration replaces the old endpoint at once.
* The pod manager: a pod enters it when its admission starts (before any ``Allocate``) and
  leaves it when deleted; the *active* pods (not terminal, not rejected) are what pod-resources
  ``List`` shows, each container with the devices recorded as its ``Allocate`` returned.
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

It talks to the API server through :mod:`hami_kube`: a ``Reflector`` follows the node's pods
(``fieldSelector=spec.nodeName=<node>``), writes go through ``KubeClient`` (retried with
``with_retries``), and the rejection Event through ``EventRecorder``, which bumps the count of a
repeated one as the kubelet's recorder does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from hami_kube.events import EventRecorder
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import NODES, PODS
from hami_kube.rest import KubeClient
from hami_kubesim.access import connect, reflector_config
from hami_kubesim.background_tasks import BackgroundRunner, RunsInBackground
from hami_kubesim.kubelet.deviceplugins.devicemanager import DeviceManager
from hami_kubesim.kubelet.deviceplugins.devices import ResourceDevices
from hami_kubesim.kubelet.deviceplugins.registration import RegistrationServer
from hami_kubesim.kubelet.dra.host import DraHost
from hami_kubesim.kubelet.dra.manager import ClaimState
from hami_kubesim.kubelet.nodestatus import NodeStatusPublisher
from hami_kubesim.kubelet.podresources import PodResourcesServer
from hami_kubesim.kubelet.pods.admission import AdmissionQueue
from hami_kubesim.kubelet.pods.lifecycle import NodePods
from hami_kubesim.kubelet.pods.podmanager import PodManager
from hami_kubesim.kubelet.pods.start import PodStarter
from hami_kubesim.kubelet.pods.workloads import Workloads
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.status import PodAllocation

log = structlog.get_logger(__name__)

_COMPONENT = "kubelet"


class KubeletStandIn(RunsInBackground):
    """Run with ``async with KubeletStandIn(settings) as kubelet:`` or ``await run()``."""

    def __init__(self, settings: KubeletSettings) -> None:
        self.settings = settings
        wake_publisher = asyncio.Event()
        self._devices = DeviceManager(
            node=settings.node_name,
            publish=wake_publisher.set,
            grace_period=settings.grace_period,
        )
        self._node_status = NodeStatusPublisher(settings.node_name, self._devices, wake_publisher)
        self._registration = RegistrationServer(
            plugin_dir=settings.plugin_dir,
            on_register=self._devices.register,
            dial_timeout=settings.dial_timeout,
            call_timeout=settings.call_timeout,
        )
        manager = PodManager(self._devices, node=settings.node_name)
        self._pod_resources = PodResourcesServer(
            socket_path=settings.pod_resources_socket, source=manager
        )
        self._dra = DraHost(settings)
        self._queue = AdmissionQueue()
        self._queue.delay = settings.admission_delay
        runner = BackgroundRunner(
            f"kubelet-{settings.node_name}", what=f"kubelet {settings.node_name}"
        )
        super().__init__(runner)
        self.restarts = 0
        self.workloads = (
            None
            if settings.host_root is None
            else Workloads(
                settings.host_root, node=settings.node_name, interval=settings.workload_interval
            )
        )
        """The containers playing HAMi-core (None without a host root)."""
        self._pods = NodePods(
            settings,
            devices=self._devices,
            manager=manager,
            dra=self._dra,
            queue=self._queue,
            workloads=self.workloads,
        )
        self._starter = PodStarter(
            settings,
            pods=self._pods,
            devices=self._devices,
            dra=self._dra,
            node_status=self._node_status,
        )

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
        return dict(self._pods.allocations)

    def allocation(self, namespace: str, name: str) -> PodAllocation | None:
        return self._pods.allocations.get((namespace, name))

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
        return self._starter.admitting

    @property
    def admission_log(self) -> list[str]:
        """``namespace/name`` of every pod whose admission started, in that order."""
        return self._starter.admission_log

    # ----- the knob ----------------------------------------------------------------------

    def pause(self) -> None:
        """Start no admission until :meth:`resume` (see :mod:`.pods.admission`)."""
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
        return {
            "node": self.node_name,
            **self._queue.describe(),
            "admitting": self._starter.admitting,
        }

    # ----- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until cancelled."""
        self.settings.plugin_dir.mkdir(parents=True, exist_ok=True)
        component = f"{_COMPONENT}/{self.node_name}"
        try:
            async with connect(self.settings.api_url, component=component) as client:
                self._pods.client = client
                await self._serve(client)
        finally:
            self.runner.ready.clear()
            self._pods.client = self._pods.group = None
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
                EventHandlers(
                    on_add=self._pods.added,
                    on_update=self._pods.replaced,
                    on_delete=self._pods.gone,
                )
            ],
            name=f"kubelet-{name}-pods",
        )
        node = Reflector(
            client,
            NODES,
            config=reflector_config(field_selector=f"metadata.name={name}"),
            handlers=[
                EventHandlers(on_add=self._node_status.seen, on_update=self._node_status.changed)
            ],
            name=f"kubelet-{name}-node-watch",
        )
        self._remove_sockets()
        await self._registration.start()
        await self._pod_resources.start()
        async with asyncio.TaskGroup() as group:
            self._pods.group = group
            group.create_task(self._node_status.run(client), name=f"kubelet-{name}-node-status")
            group.create_task(node.run(), name=f"kubelet-{name}-node-watch")
            group.create_task(self._dra.watcher.run(), name=f"kubelet-{name}-plugin-watcher")
            group.create_task(self._dra.manager.run(), name=f"kubelet-{name}-dra-unprepare")
            await node.wait_synced()  # admission reads what the node advertises
            group.create_task(self._starter.run(client, events), name=f"kubelet-{name}-admission")
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
