"""Carry out the steps of one scenario on one running system.

:class:`Player` plays each :data:`~.scenarios.Step` as a client or as the
operator of the simulated machines would: pods are created and deleted in-process; faults go
to the API server's fault plan; services are stopped and started in the background (a start
waits for the stop of the same service); a node's kubelet stand-in is paused and resumed in
process; :class:`~.scenarios.AwaitBound` (:class:`~.scenarios.AwaitNominated`) holds the
timeline until its pod is bound (nominated) — or gone, or ended, or its bound passed; a
:class:`~.scenarios.CreatePriorityClass` creates the class unless it exists;
:class:`~.scenarios.RestoreRunningPods` chooses, when played, GPUs of the node that no pod
holds and kubelet replicas of them that nobody holds, and puts the pods straight into the store
(:func:`~.incidents.preexisting_pod`); the DRA incidents' objects are created and deleted as a
client would, and :class:`~.scenarios.SetGpusHealthy` rewrites the node's fake-devices file.
:meth:`Player.finish` clears the faults, resumes every kubelet it paused, makes every GPU it
turned unhealthy healthy again and brings every service back, ready.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from hami_kube.objects import PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.objects.clock import rfc3339
from hami_kubesim.stack.chaos.incidents import preexisting_pod
from hami_kubesim.stack.chaos.scenarios import (
    AwaitBound,
    AwaitNominated,
    AwaitRunning,
    ClearLatency,
    Compact,
    CreateObject,
    CreatePod,
    CreatePriorityClass,
    DeleteObject,
    DeletePod,
    DropWatches,
    InjectErrors,
    InjectLatency,
    PauseKubelet,
    RestoreRunningPods,
    ResumeKubelet,
    Scenario,
    SetGpusHealthy,
    StartService,
    Step,
    StopService,
    Ungate,
)
from hami_kubesim.stack.checks.invariants import GPU_RESOURCE
from hami_kubesim.stack.state import ClusterState, device_loads, node_devices, replica_gpu
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.processes import ServiceProcess
from hami_kubesim.stack.system.settle import POLL_INTERVAL

__all__ = ["Player"]

log = structlog.get_logger(__name__)


class Player:
    """Plays one scenario's steps on one system; see the module docstring."""

    def __init__(self, system: System, scenario: Scenario) -> None:
        self.system = system
        self.scenario = scenario
        self.faults: Counter[str] = Counter()
        self.rejected = 0
        self.background: list[asyncio.Task[object]] = []
        self._paused: set[str] = set()
        self._unhealthy: set[str] = set()

    def _service(self, name: str) -> ServiceProcess:
        return next(p for p in self.system.services() if p.name == name)

    async def play(self, step: Step) -> None:
        api, namespace = self.system.api, self.scenario.namespace
        if isinstance(step, CreatePod):
            try:
                await self.system.create(step.pod)
            except StatusError:
                self.rejected += 1
        elif isinstance(step, DeletePod):
            await self.system.delete_pod(namespace, step.name)
        elif isinstance(step, InjectErrors):
            api.inject_error(
                step.verb, step.resource, code=step.code, rate=step.rate, times=step.times
            )
        elif isinstance(step, InjectLatency):
            api.inject_latency(step.seconds, step.verb, step.resource)
            self.faults["latency rules"] += 1
        elif isinstance(step, ClearLatency):
            api.faults.clear_latency()
        elif isinstance(step, DropWatches):
            self.faults[f"watches dropped ({step.mode})"] += api.drop_watches(
                step.resource, mode=step.mode
            )
        elif isinstance(step, Compact):
            api.compact()
            self.faults["compactions"] += 1
            self.faults["watches dropped (after compaction)"] += api.drop_watches()
        elif isinstance(step, StopService):
            service = self._service(step.service)
            self.faults["service kills" if step.crash else "service stops"] += 1
            self._spawn(service.kill() if step.crash else service.stop(), f"stop-{service.name}")
        elif isinstance(step, StartService):
            service = self._service(step.service)
            self._spawn(self._start_after_stop(service), f"start-{service.name}")
        else:
            await self._play_incident_step(step)

    async def _play_incident_step(self, step: Step) -> None:
        if isinstance(step, PauseKubelet):
            self.system.kubelet(step.node).pause()
            self._paused.add(step.node)
            self.faults["kubelet pauses"] += 1
        elif isinstance(step, ResumeKubelet):
            self.system.kubelet(step.node).resume()
            self._paused.discard(step.node)
        elif isinstance(step, AwaitBound):
            await self._await(step.name, step.within, "bound")
        elif isinstance(step, AwaitNominated):
            await self._await(step.name, step.within, "nominated")
        elif isinstance(step, CreatePriorityClass):
            await self._priority_class(step)
        elif isinstance(step, Ungate):
            with contextlib.suppress(StatusError):  # gone meanwhile
                await self.system.api.patch(
                    "pods",
                    step.name,
                    {"spec": {"schedulingGates": None}},
                    namespace=self.scenario.namespace,
                    patch_type="merge",
                )
        elif isinstance(step, RestoreRunningPods):
            await self._restore(step)
        else:
            await self._play_dra_step(step)

    async def _play_dra_step(self, step: Step) -> None:
        namespace = self.scenario.namespace
        if isinstance(step, AwaitRunning):
            await self._await(step.name, step.within, "running")
        elif isinstance(step, CreateObject):
            try:
                await self.system.api.create(step.resource, dict(step.obj), namespace=namespace)
            except StatusError:
                self.rejected += 1
        elif isinstance(step, DeleteObject):
            with contextlib.suppress(StatusError):  # gone already
                await self.system.api.delete(step.resource, step.name, namespace=namespace)
            self.faults["DRA objects deleted"] += 1
        elif isinstance(step, SetGpusHealthy):
            self.system.set_gpus_healthy(step.node, step.healthy)
            if step.healthy:
                self._unhealthy.discard(step.node)
                await self._published_healthy(step.node)
            else:
                self._unhealthy.add(step.node)
                self.faults["GPUs vanished"] += 1

    async def _published_healthy(self, node: str, within: float = 15.0) -> None:
        """Until the API shows every GPU of ``node`` healthy again (its ResourceSlice lists them
        all, or its register annotation marks them healthy): the plugin notices a rewritten
        devices file a poll or two later, and until then nothing in the cluster says a parked pod
        may fit — a scenario must not be judged settled in that gap."""
        gpus = len(self.system.node(node).gpus)
        dra = self.system.node(node).dra

        def published(state: ClusterState) -> bool:
            if dra:
                listed = sum(
                    len((one.get("spec") or {}).get("devices") or ())
                    for one in state.slices
                    if (one.get("spec") or {}).get("nodeName") == node
                )
                return listed >= gpus
            registered = node_devices(state.node(node) or {}) or ()
            return len(registered) >= gpus and all(d.health for d in registered)

        with contextlib.suppress(TimeoutError):  # the invariants then say what is wrong
            await self.system.wait_for(
                published, within=within, what=f"{node}'s GPUs published healthy"
            )

    async def _await(self, name: str, within: float, what: str) -> None:
        """Until pod ``name`` is bound (or, ``what="nominated"``, nominated to a node;
        ``what="running"``, Running), gone, ended or being deleted; at most ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while loop.time() < deadline:
            pod = self.system.api.try_get("pods", name, namespace=self.scenario.namespace)
            view = PodView(pod or {})
            if pod is None or view.terminal or view.deleting:
                return
            if view.node_name and (what != "running" or view.phase == "Running"):
                return
            if what == "nominated" and view.nominated_node_name:
                return
            await asyncio.sleep(POLL_INTERVAL)  # polling the in-process store
        log.warning("pod not there in time", pod=name, waited_for=what, seconds=within)

    async def _priority_class(self, step: CreatePriorityClass) -> None:
        if self.system.api.try_get("priorityclasses", step.name) is not None:
            return
        with contextlib.suppress(StatusError):  # created meanwhile
            await self.system.api.create(
                "priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": step.name},
                    "value": step.value,
                },
            )

    async def _restore(self, step: RestoreRunningPods) -> None:
        service = self._service(step.while_stopped) if step.while_stopped else None
        if service is not None:
            self.faults["service stops"] += 1
            await service.stop()
        try:
            for pod in self._preexisting(step):
                self.system.api.restore("pods", pod)
                self.faults["pods restored"] += 1
        finally:
            if service is not None:
                await service.start(wait=False)

    def _preexisting(self, step: RestoreRunningPods) -> list[dict[str, Any]]:
        """Pods for the free GPUs of the node, one each, as many as there are names."""
        state = self.system.state()
        node = state.node(step.node)
        devices = node_devices(node) if node is not None else None
        loads = device_loads(state).get(step.node, {})
        free = [d for d in devices or () if d.health and not loads[d.id].holders]
        kubelet = self.system.kubelet(step.node)
        advertised = kubelet.resources().get(GPU_RESOURCE)
        in_use = kubelet.devices_in_use(GPU_RESOURCE)
        started = rfc3339(datetime.now(UTC) - timedelta(days=1))
        pods = []
        for name, device in zip(step.names, free, strict=False):
            replicas = sorted(
                r
                for r in (advertised.healthy if advertised else ())
                if r not in in_use and replica_gpu(r, [device.id]) == device.id
            )
            if not replicas:
                continue
            pods.append(
                preexisting_pod(
                    name,
                    self.scenario.namespace,
                    node=step.node,
                    device=device,
                    replica=replicas[0],
                    whole=step.whole,
                    started=started,
                )
            )
        if len(pods) < len(step.names):
            log.info("fewer free GPUs than pods to restore", node=step.node, restored=len(pods))
        return pods

    async def _start_after_stop(self, service: ServiceProcess) -> None:
        stops = [t for t in self.background if t.get_name() == f"stop-{service.name}"]
        await asyncio.gather(*stops)
        await service.start(wait=False)

    def _spawn(self, work: Coroutine[Any, Any, object], name: str) -> None:
        self.background.append(asyncio.create_task(work, name=name))

    async def finish(self) -> None:
        """End the faults, resume the kubelets and bring every service back, ready."""
        self.faults["API errors answered"] += sum(
            int(rule.get("fired", 0)) for rule in self.system.api.faults.to_dict()["errors"]
        )
        self.system.api.clear_faults()
        for node in sorted(self._paused):
            self.system.kubelet(node).resume()
        self._paused.clear()
        for node in sorted(self._unhealthy):
            self.system.set_gpus_healthy(node, True)
        for node in sorted(self._unhealthy):
            await self._published_healthy(node)
        self._unhealthy.clear()
        await asyncio.gather(*self.background)
        for service in self.system.services():
            await service.start(wait=False)
        for service in self.system.services():
            await service.wait_ready()
