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
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import structlog

from hami_kube.backoff import BackoffPolicy
from hami_kube.errors import ConflictError, KubeError, NotFoundError
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

__all__ = ["POD_DISRUPTION_BUDGETS", "DisruptionController"]

log = structlog.get_logger(__name__)

POD_DISRUPTION_BUDGETS: Final = Resource(
    "poddisruptionbudgets", "PodDisruptionBudget", group="policy"
)
_COMPONENT: Final = "controllermanager"
_RETRY: Final = BackoffPolicy(initial=0.005, factor=2.0, cap=60.0, jitter=0.0)
"""The controller's per-item rate limiter: from 5 ms, doubling."""


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
        self._due: dict[str, None] = {}  # budget keys to sync, in order, each once
        self._stale: dict[str, None] = {}  # pod keys to check for a stale condition
        self._wake = asyncio.Event()
        self._failures: dict[str, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()
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
                    await self._work(client, events)
            finally:
                self.runner.ready.clear()
                for timer in self._timers:
                    timer.cancel()
                self._timers.clear()
                self._budgets = self._pods = None

    # -- the queues ------------------------------------------------------------------------

    def _enqueue(self, key: str) -> None:
        self._due[key] = None
        self._wake.set()

    def _enqueue_stale(self, key: str) -> None:
        self._stale[key] = None
        self._wake.set()

    def _later(self, seconds: float, callback: Callable[[str], None], key: str) -> None:
        def fire() -> None:
            self._timers.discard(timer)
            callback(key)

        timer = asyncio.get_running_loop().call_later(seconds, fire)
        self._timers.add(timer)

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

    async def _work(self, client: KubeClient, events: EventRecorder) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._due or self._stale:
                if self._due:
                    key = next(iter(self._due))
                    del self._due[key]
                    await self._attempt(key, self._sync(client, events, key), self._enqueue)
                else:
                    key = next(iter(self._stale))
                    del self._stale[key]
                    await self._attempt(key, self._reset_stale(client, key), self._enqueue_stale)

    async def _attempt(
        self, key: str, work: Coroutine[Any, Any, None], again: Callable[[str], None]
    ) -> None:
        try:
            await work
        except Exception as error:
            # One bad object must not stop the controller: retry it later, with backoff.
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            delay = _RETRY.base_delay(failures)
            if isinstance(error, KubeError):
                log.info("disruption controller retries", key=key, error=str(error), after_s=delay)
            else:
                log.exception("disruption controller sync crashed", key=key)
            self._later(delay, again, key)
        else:
            self._failures.pop(key, None)

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
            self._later(result.recheck_after, self._enqueue, key)

    async def _reset_stale(self, client: KubeClient, key: str) -> None:
        pod = None if self._pods is None else self._pods.get(key)
        if pod is None:
            return
        now = self._clock()
        after = stale_disruption_after(pod, now)
        if after is None:
            return
        if after > 0:
            self._later(after, self._enqueue_stale, key)
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
