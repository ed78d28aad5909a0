"""The kube-scheduler stand-in's queue pump: follow the cluster, feed the queue, pop pods.

``SchedulingLoop`` follows nodes, pods and PodDisruptionBudgets (preemption ranks its victims by
them) through the API server (``hami_kube`` reflectors) and keeps
:class:`~hami_kubesim.scheduler.queue.SchedulingQueue` current from their events, as
kube-scheduler's event handlers do:

- a pending pod whose ``spec.schedulerName`` is one of its profiles is added (again when its
  metadata or spec change; status-only updates do not requeue it); its
  ``status.nominatedNodeName`` feeds the nominator, and a pod bound or deleted leaves it;
- a pod bound to a node counts there (:meth:`SchedulingCycle.pod_bound`); one that ends or is
  deleted frees what it requested, and every pod parked as unschedulable is moved back (it may
  fit now);
- a node added, or changed in its labels, annotations, spec or allocatable, moves every parked
  pod back too.

The pump pops one key at a time and hands it to :class:`~.cycle.SchedulingCycle` (filters,
extenders, assume, then the binding cycle in the background).  Binds and condition writes run as
named tasks of one :class:`hami_runtime.lifecycle.TaskSet`, stopped within a bound when the loop
stops.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any, Final

import aiohttp
import structlog

from hami_kube.events import EventRecorder
from hami_kube.objects import NodeView, ObjectView, PodView
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import (
    DEVICE_CLASSES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    JsonObject,
)
from hami_kube.rest import KubeClient
from hami_kube.store import Store
from hami_kubesim.access import connect, reflector_config
from hami_kubesim.background_tasks import STOP_WITHIN_S, BackgroundRunner, RunsInBackground
from hami_kubesim.controllers.disruption import POD_DISRUPTION_BUDGETS
from hami_kubesim.scheduler.config import DEFAULT_SCHEDULER_NAME, SchedulerConfig
from hami_kubesim.scheduler.cycle import (
    SchedulingCycle,
    SchedulingStats,
    is_responsible,
    queue_position,
)
from hami_kubesim.scheduler.dynamic_resources import DynamicResources
from hami_kubesim.scheduler.extender import HttpExtender
from hami_kubesim.scheduler.preemption.record import PreemptionLog
from hami_kubesim.scheduler.queue import SchedulingQueue
from hami_runtime.lifecycle import TaskSet

__all__ = ["SchedulingLoop", "SchedulingStats"]

log = structlog.get_logger(__name__)

_COMPONENT: Final = "kubesim-scheduler"
_IGNORED_POD_METADATA: Final = frozenset({"resourceVersion", "managedFields", "generation"})


class SchedulingLoop(RunsInBackground):
    """Schedules the pods of ``config``'s profiles against the API server at ``api_url``.

    Run it with ``async with SchedulingLoop(...) as loop:`` (returns once its caches are synced)
    or ``await loop.run()`` in a task group; cancellation stops it cleanly.  ``initial_backoff``
    and ``max_backoff`` override the configuration's pod backoff (seconds).  ``rng`` breaks score
    ties at random as kube-scheduler does; without it the alphabetically first node wins.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        api_url: str,
        initial_backoff: float | None = None,
        max_backoff: float | None = None,
        unschedulable_timeout: float = 60.0,
        assume_timeout: float = 30.0,
        rng: random.Random | None = None,
        instance: str = "kubesim-scheduler",
        ready_timeout: float = 30.0,
    ) -> None:
        self.config = config
        self.api_url = api_url
        self.stats = SchedulingStats()
        self.queue = SchedulingQueue(
            initial_backoff=initial_backoff or config.pod_initial_backoff,
            max_backoff=max_backoff or config.pod_max_backoff,
            unschedulable_timeout=unschedulable_timeout,
        )
        self._assume_timeout = assume_timeout
        self._rng = rng
        self._instance = instance
        runner = BackgroundRunner(_COMPONENT, what="scheduling loop", ready_within=ready_timeout)
        super().__init__(runner)
        self._cycle: SchedulingCycle | None = None
        self._background: TaskSet | None = None
        self._caches: tuple[Store, Store] | None = None
        self.preemptions = PreemptionLog()
        """Every preemption carried out (the latest, bounded), for the invariant checker."""

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the cluster and schedule until cancelled."""
        async with (
            connect(self.api_url, component=self._instance) as client,
            aiohttp.ClientSession() as http,
        ):
            events = EventRecorder(client, component=self._component_name(), host=self._instance)
            nodes = Reflector(
                client,
                NODES,
                config=reflector_config(),
                handlers=[
                    EventHandlers(on_add=self._on_node_added, on_update=self._on_node_updated)
                ],
                name=f"{_COMPONENT}-nodes",
            )
            pods = Reflector(
                client,
                PODS,
                config=reflector_config(),
                handlers=[
                    EventHandlers(
                        on_add=self._on_pod_added,
                        on_update=self._on_pod_updated,
                        on_delete=self._on_pod_deleted,
                    )
                ],
                name=f"{_COMPONENT}-pods",
            )
            budgets = Reflector(
                client, POD_DISRUPTION_BUDGETS, config=reflector_config(), name=f"{_COMPONENT}-pdbs"
            )
            dra_reflectors = self._dra_reflectors(client) if self.config.dynamic_resources else []
            dra = (
                DynamicResources(
                    client,
                    slices=dra_reflectors[0].store,
                    classes=dra_reflectors[1].store,
                    claims=dra_reflectors[2].store,
                )
                if dra_reflectors
                else None
            )
            background = TaskSet(_COMPONENT)
            self._background = background
            self._caches = (nodes.store, pods.store)
            cycle = self._cycle = SchedulingCycle(
                self.config,
                queue=self.queue,
                stats=self.stats,
                client=client,
                events=events,
                extenders=[HttpExtender(c, session=http) for c in self.config.ordered_extenders()],
                nodes=nodes.store,
                pods=pods.store,
                budgets=budgets.store,
                spawn=self._spawn,
                rng=self._rng,
                assume_timeout=self._assume_timeout,
                preemptions=self.preemptions,
                dra=dra,
            )
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(nodes.run(), name=f"{_COMPONENT}-nodes")
                    group.create_task(pods.run(), name=f"{_COMPONENT}-pods")
                    group.create_task(budgets.run(), name=f"{_COMPONENT}-pdbs")
                    group.create_task(events.run(), name=f"{_COMPONENT}-events")
                    for reflector in dra_reflectors:
                        group.create_task(reflector.run(), name=reflector.name)
                    await nodes.wait_synced()
                    await pods.wait_synced()
                    await budgets.wait_synced()
                    for reflector in dra_reflectors:
                        await reflector.wait_synced()
                    self.runner.ready.set()
                    log.info("scheduling loop ready", profiles=sorted(self.config.scheduler_names))
                    await self._pump(cycle)
            finally:
                self.runner.ready.clear()
                cycle.close()
                self._cycle = self._background = None
                self._caches = None
                await background.stop(within=STOP_WITHIN_S)

    def will_retry(
        self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
    ) -> frozenset[str]:
        """Keys of the pods it will try again without a new cluster event.

        ``nodes`` and ``pods`` are the API server's objects now.  The queue's active, backing
        off and in-flight pods are retried; so is every unbound pod while the loop's caches have
        not yet caught up with those objects, as the events on their way may wake a parked pod
        (a node whose device plugin came back, a pod that freed resources).
        """
        pods = list(pods)
        caches = self._caches
        if caches is None or not (_seen(caches[0], nodes) and _seen(caches[1], pods)):
            return frozenset(view.key for view in map(PodView, pods) if not view.node_name)
        return self.queue.retrying()

    def nominations(self) -> dict[str, str]:
        """Pending pods nominated to a node (by preemption): pod key -> node."""
        cycle = self._cycle
        return {} if cycle is None else cycle.nominator.nominations()

    async def _pump(self, cycle: SchedulingCycle) -> None:
        while True:
            key = await self.queue.pop()
            await cycle.schedule(key)

    def _spawn(self, name: str, coroutine: Coroutine[Any, Any, None]) -> None:
        # A failing bind is logged by the task set and must not stop the loop.
        if self._background is None:
            coroutine.close()
            return
        self._background.spawn(name, coroutine)

    def _dra_reflectors(self, client: KubeClient) -> list[Reflector]:
        """Slices, classes and claims for the DynamicResources plugin; any change to them may
        make a parked pod with claims schedulable (kube-scheduler's queueing hints, coarsely)."""
        handlers = EventHandlers(
            on_add=lambda _obj: self.queue.move_all_unschedulable(),
            on_update=lambda _old, _new: self.queue.move_all_unschedulable(),
            on_delete=lambda _obj: self.queue.move_all_unschedulable(),
        )
        return [
            Reflector(
                client,
                resource,
                config=reflector_config(),
                handlers=[handlers],
                name=f"{_COMPONENT}-{resource.plural}",
            )
            for resource in (RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS)
        ]

    # -- watch handlers --------------------------------------------------------------------

    def _on_node_added(self, _node: JsonObject) -> None:
        self.queue.move_all_unschedulable()

    def _on_node_updated(self, old: JsonObject, new: JsonObject) -> None:
        if _node_changed(NodeView(old), NodeView(new)):
            self.queue.move_all_unschedulable()

    def _on_pod_deleted(self, raw: JsonObject) -> None:
        key = PodView(raw).key
        self.queue.delete(key)
        if self._cycle is not None and self._cycle.pod_gone(key):
            self.queue.move_all_unschedulable()

    def _on_pod_added(self, raw: JsonObject) -> None:
        self._on_pod(None, PodView(raw))

    def _on_pod_updated(self, old: JsonObject, new: JsonObject) -> None:
        self._on_pod(PodView(old), PodView(new))

    def _on_pod(self, old: PodView | None, new: PodView) -> None:
        key = new.key
        cycle = self._cycle
        if new.node_name:
            self.queue.delete(key)
            if cycle is not None and cycle.pod_bound(key, new):
                self.queue.move_all_unschedulable()
            return
        if not is_responsible(new, self.config.scheduler_names):
            self.queue.delete(key)
            if cycle is not None:
                cycle.nominator.delete(key)
            return
        if cycle is not None and cycle.is_assumed(key):
            return  # binding in flight; the outcome decides what happens next
        if cycle is not None:
            cycle.pod_pending(key, old, new)
        if old is None or key not in self.queue or _pod_changed(old, new):
            self.queue.add(key, **queue_position(new))

    def _component_name(self) -> str:
        names = sorted(self.config.scheduler_names)
        return names[0] if len(names) == 1 else DEFAULT_SCHEDULER_NAME


def _node_changed(old: NodeView, new: NodeView) -> bool:
    """A node change that may make a parked pod schedulable."""
    return (
        old.labels != new.labels
        or old.annotations != new.annotations
        or old.spec != new.spec
        or old.allocatable != new.allocatable
    )


def _pod_changed(old: PodView, new: PodView) -> bool:
    """A change that may make a pending pod schedulable (status-only updates are not)."""
    return _relevant_metadata(old.meta) != _relevant_metadata(new.meta) or old.spec != new.spec


def _seen(cache: Store, objects: Iterable[Mapping[str, Any]]) -> bool:
    """Whether ``cache`` holds exactly ``objects``, each at its resourceVersion."""
    count = 0
    for view in map(ObjectView, objects):
        count += 1
        cached = cache.get(view.key)
        if cached is None or ObjectView(cached).resource_version != view.resource_version:
            return False
    return count == len(cache)


def _relevant_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in _IGNORED_POD_METADATA}
