"""A stand-in for kube-controller-manager's disruption controller.

It follows PodDisruptionBudgets and pods through the API server (``hami_kube`` reflectors) and
keeps each budget's status current, as the real controller does (the decisions are in
:mod:`.budgets`):

* a budget is synced when it is added or changed, when a pod it selects (before or after the
  change) is added, changed or deleted, and again when an entry of its ``status.disruptedPods``
  is due to expire; a changed status is written with ``PUT .../status`` (a 409 retries the sync
  later, any other failure too, with backoff);
* the Events go on the budget (``NoPods``, ``UnmanagedPods``,
  ``CalculateExpectedPodCountFailed``) or the pod (``NotDeleted``), from ``controllermanager``;
* a pod whose ``DisruptionTarget=True`` condition (set by a preemption or an eviction that never
  led to a deletion) is 2 minutes old, while the pod is neither deleted nor ended, gets it reset
  to ``False`` (``PUT pods/<name>/status``).

What the real one has and this one lacks: the scale lookups of workload controllers (kubesim
serves no Deployments, ReplicaSets or StatefulSets; see :mod:`.budgets`), the
``MultiplePodDisruptionBudgets`` Event (a pod's change syncs every budget selecting it, where the
real controller picks the first), and the periodic resync.  ``clock`` gives the wall-clock time
``disruptedPods`` and condition times are compared with; waits are on the event loop's clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import structlog

from hami_kube.errors import ConflictError, NotFoundError
from hami_kube.events import EventRecorder, ObjectReference
from hami_kube.objects import ObjectView, PodView, object_key
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import PODS, JsonObject, Resource
from hami_kube.rest import KubeClient
from hami_kube.store import Store
from hami_kube.timefmt import utc_now
from hami_kubesim.access import connect, reflector_config
from hami_kubesim.background_tasks import BackgroundRunner, RunsInBackground
from hami_kubesim.controllers.budgets import (
    reset_disruption,
    selected_pods,
    stale_disruption_after,
    sync_budget,
)
from hami_kubesim.controllers.workqueue import WorkQueue

__all__ = ["POD_DISRUPTION_BUDGETS", "DisruptionController"]

log = structlog.get_logger(__name__)

POD_DISRUPTION_BUDGETS: Final = Resource(
    "poddisruptionbudgets", "PodDisruptionBudget", group="policy"
)
_COMPONENT: Final = "controllermanager"
Item = tuple[str, str]  # ("budget" | "stale", key): a budget to sync, a pod to check


class DisruptionController(RunsInBackground):
    """Run with ``async with DisruptionController(api_url) as controller:`` (returns once its
    caches are synced) or ``await controller.run()``; cancellation stops it."""

    def __init__(
        self,
        api_url: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        instance: str = "kube-controller-manager",
    ) -> None:
        self.api_url = api_url
        self._clock = clock
        self._instance = instance
        self._budgets: Store | None = None
        self._pods: Store | None = None
        self._queue: WorkQueue[Item] = WorkQueue("disruption controller")
        self.syncs = 0
        """Budget syncs done (for tests and logs)."""
        super().__init__(BackgroundRunner("disruption-controller", what="disruption controller"))

    async def run(self) -> None:
        async with connect(self.api_url, component=self._instance) as client:
            events = EventRecorder(client, component=_COMPONENT)
            budgets = Reflector(
                client,
                POD_DISRUPTION_BUDGETS,
                config=reflector_config(),
                handlers=[
                    EventHandlers(
                        on_add=self._budget_changed,
                        on_update=lambda _old, new: self._budget_changed(new),
                    )
                ],
                name="disruption-controller-pdbs",
            )
            pods = Reflector(
                client,
                PODS,
                config=reflector_config(),
                handlers=[
                    EventHandlers(
                        on_add=lambda pod: self._pod_changed(None, pod),
                        on_update=self._pod_changed,
                        on_delete=lambda pod: self._pod_changed(pod, None),
                    )
                ],
                name="disruption-controller-pods",
            )
            self._budgets, self._pods = budgets.store, pods.store
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(budgets.run(), name="disruption-controller-pdbs")
                    group.create_task(pods.run(), name="disruption-controller-pods")
                    group.create_task(events.run(), name="disruption-controller-events")
                    await budgets.wait_synced()
                    await pods.wait_synced()
                    self.runner.ready.set()
                    await self._queue.run(lambda item: self._sync_item(client, events, item))
            finally:
                self.runner.ready.clear()
                self._queue.close()
                self._budgets = self._pods = None

    # -- the queues ------------------------------------------------------------------------

    def _enqueue(self, key: str) -> None:
        self._queue.add(("budget", key))

    def _enqueue_stale(self, key: str) -> None:
        self._queue.add(("stale", key))

    def _budget_changed(self, pdb: JsonObject) -> None:
        self._enqueue(object_key(pdb))

    def _pod_changed(self, old: JsonObject | None, new: JsonObject | None) -> None:
        for budget in self._budgets_selecting(p for p in (old, new) if p is not None):
            self._enqueue(budget)
        if new is not None and stale_disruption_after(new, self._clock()) is not None:
            self._enqueue_stale(object_key(new))

    def _budgets_selecting(self, pods: Iterable[JsonObject]) -> set[str]:
        if self._budgets is None:
            return set()
        chosen = list(pods)
        return {object_key(pdb) for pdb in self._budgets.objects() if selected_pods(pdb, chosen)}

    # -- the workers -----------------------------------------------------------------------

    async def _sync_item(self, client: KubeClient, events: EventRecorder, item: Item) -> None:
        kind, key = item
        if kind == "budget":
            await self._sync(client, events, key)
        else:
            await self._reset_stale(client, key)

    async def _sync(self, client: KubeClient, events: EventRecorder, key: str) -> None:
        budgets, pods = self._budgets, self._pods
        pdb = None if budgets is None else budgets.get(key)
        if pdb is None or pods is None:
            return  # deleted meanwhile
        self.syncs += 1
        result = sync_budget(pdb, pods.objects(), self._clock())
        for pod, kind, reason, message in result.events:
            target = _budget_ref(pdb) if pod is None else ObjectReference.from_object(pod)
            events.emit(target, kind, reason, message)
        if result.status is not None:
            try:
                await client.replace(
                    POD_DISRUPTION_BUDGETS, {**pdb, "status": result.status}, subresource="status"
                )
            except NotFoundError:
                return
            except ConflictError:
                raise  # a newer version is on its way: sync again, no fail-safe
        if result.recheck_after is not None:
            self._queue.later(result.recheck_after, ("budget", key))

    async def _reset_stale(self, client: KubeClient, key: str) -> None:
        pod = None if self._pods is None else self._pods.get(key)
        if pod is None:
            return
        now = self._clock()
        after = stale_disruption_after(pod, now)
        if after is None:
            return
        if after > 0:
            self._queue.later(after, ("stale", key))
            return
        try:
            await client.replace(
                PODS, {**pod, "status": reset_disruption(pod, now)}, subresource="status"
            )
        except NotFoundError:
            return
        log.info("reset stale DisruptionTarget condition", pod=PodView(pod).key)


def _budget_ref(pdb: Mapping[str, Any]) -> ObjectReference:
    view = ObjectView(pdb)
    return ObjectReference(
        kind="PodDisruptionBudget",
        name=view.name,
        namespace=view.namespace,
        uid=view.uid,
        api_version="policy/v1",
        resource_version=view.resource_version,
    )
