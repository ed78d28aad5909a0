"""One pod's way through kube-scheduler: the scheduling cycle, then the binding cycle.

:class:`SchedulingCycle` is what :class:`~hami_kubesim.scheduler.loop.SchedulingLoop` hands each
key it pops from its queue.  For one pod at a time, the *scheduling cycle*:

1. runs the in-tree filters (:mod:`hami_kubesim.scheduler.predicates`) over every node (the
   pod's nominated node first, alone, with the extenders' filters too, when it has one), with
   the pods nominated to a node with at least its priority counted there
   (``RunFilterPluginsWithNominatedPods``, :mod:`.nominator`);
2. calls each interested extender's filter verb in order on the survivors (``NodeNames`` when
   ``nodeCacheCapable``, else the full ``Nodes``): ``FailedNodes`` are Unschedulable,
   ``FailedAndUnresolvableNodes`` UnschedulableAndUnresolvable, a node left out without either
   has no status (read as UnschedulableAndUnresolvable: never a preemption candidate);
3. no node left (a ``FitError``): the profile's ``DefaultPreemption`` PostFilter runs
   (:mod:`.preemption.evaluator`); its message ends the ``FailedScheduling`` text and the node it
   picks becomes the pod's ``status.nominatedNodeName``; the pod stays pending;
4. with more than one feasible node, calls the prioritize verbs in parallel and adds
   ``Score * weight * 10``; picks the highest total (ties: see ``select_host``);
5. *assumes* the pod on that node: its requests count there at once, for the next pods.

A pod with ``spec.resourceClaims`` also goes through the DynamicResources plugin when the
configuration enables it (:mod:`.dynamic_resources`): PreFilter before 1., Filter after the
in-tree filters of 1., Reserve at 5., and PreBind (the claims' status writes) before the binding.

The *binding cycle* then runs in the background: the extender's bind verb when one is configured
and interested, else a POST of the Binding subresource.  An assumed pod that never shows up bound
within ``assume_timeout`` is forgotten and queued again.

A failure records a ``FailedScheduling`` Warning Event (``0/3 nodes are available: ...``; repeats
bump its count, see ``hami_kube.events.EventRecorder``), sets the pod's ``PodScheduled=False``
condition (reason ``Unschedulable`` when no node fits, ``SchedulerError`` otherwise) and, when
preemption says so, its ``nominatedNodeName`` (one status patch), and reports the pod back to the
queue, which parks or backs it off (see :mod:`.queue`).  An extender filter error is an Error:
no preemption runs.

The per-node accounting (what bound and assumed pods request) lives here too: the loop's watch
handlers tell the cycle when a pod is bound or gone.  Nothing here reads raw pod or node JSON but
through :mod:`hami_kube.objects` views.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final

import structlog

from hami_kube.errors import KubeError
from hami_kube.events import EventRecorder, EventType
from hami_kube.objects import NodeView, PodView
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient, PatchType
from hami_kube.store import Store
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.dra import AllocatorError
from hami_kubesim.dra.podclaims import ClaimsNotReady
from hami_kubesim.scheduler.config import Profile, SchedulerConfig, scheduler_name_of
from hami_kubesim.scheduler.dynamic_resources import ClaimWriteError, DraAttempt, DynamicResources
from hami_kubesim.scheduler.extender import HttpExtender
from hami_kubesim.scheduler.extender_wire import ExtenderError
from hami_kubesim.scheduler.filtering import Attempt, Filtering, Placements, requests_quietly
from hami_kubesim.scheduler.nominator import Nominator
from hami_kubesim.scheduler.predicates import (
    NO_NODES_AVAILABLE,
    ResourceParseError,
    pod_requests,
    select_host,
)
from hami_kubesim.scheduler.preemption.evaluator import PostFilterResult, Preemption
from hami_kubesim.scheduler.preemption.record import PreemptionLog
from hami_kubesim.scheduler.preemption.selection import PlacedPod
from hami_kubesim.scheduler.queue import SchedulingQueue
from hami_kubesim.scheduler.statuses import fit_error_message

__all__ = ["SchedulingCycle", "SchedulingStats", "is_responsible", "scheduler_name_of"]

log = structlog.get_logger(__name__)

_MAX_EXTENDER_PRIORITY: Final = 10
_MAX_NODE_SCORE: Final = 100

Spawn = Callable[[str, Coroutine[Any, Any, None]], None]
"""Starts a named background task of the loop (a bind, a condition write)."""


@dataclass(slots=True)
class SchedulingStats:
    """Counters for tests and logs (not Prometheus metrics)."""

    attempts: int = 0
    scheduled: int = 0
    failed: int = 0
    extender_errors: int = 0
    bind_failures: int = 0


class _Failure(Exception):  # noqa: N818 - internal control flow, not an API error
    def __init__(self, message: str, *, unschedulable: bool, nominate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.unschedulable = unschedulable
        self.nominate = nominate
        """The nomination to write: a node, ``""`` to clear it, ``None`` to leave it."""


def is_responsible(pod: PodView, scheduler_names: frozenset[str]) -> bool:
    """Whether a scheduler serving ``scheduler_names`` must place ``pod`` now."""
    return (
        not pod.node_name
        and scheduler_name_of(pod) in scheduler_names
        and not pod.deleting
        and not pod.terminal
        and not pod.spec.get("schedulingGates")
    )


def queue_position(pod: PodView) -> dict[str, Any]:
    """The queue's ordering keys of ``pod``: ``spec.priority``, then its age."""
    priority = pod.spec.get("priority")
    valid = isinstance(priority, int) and not isinstance(priority, bool)
    return {"priority": priority if valid else 0, "created": pod.creation_timestamp}


class SchedulingCycle:
    """Schedules and binds pods for one run of the loop (see the module docstring).

    ``nodes`` and ``pods`` are the loop's caches; ``spawn`` starts the binding cycles and the
    condition writes as the loop's background tasks.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        queue: SchedulingQueue,
        stats: SchedulingStats,
        client: KubeClient,
        events: EventRecorder,
        extenders: Sequence[HttpExtender],
        nodes: Store,
        pods: Store,
        budgets: Store | None = None,
        spawn: Spawn,
        rng: random.Random | None,
        assume_timeout: float,
        preemptions: PreemptionLog | None = None,
        dra: DynamicResources | None = None,
    ) -> None:
        self.config = config
        self.queue = queue
        self.stats = stats
        self._client = client
        self._events = events
        self._extenders = list(extenders)
        self._nodes = nodes
        self._pods = pods
        self._spawn = spawn
        self._rng = rng
        self._assume_timeout = assume_timeout
        self._placements = Placements()
        self._assume_timers: dict[str, asyncio.TimerHandle] = {}
        self.nominator = Nominator()
        self._dra = dra
        self._filtering = Filtering(self._extenders, self.nominator, self._placements, dra)
        self._preemption = Preemption(
            config,
            client=client,
            events=events,
            extenders=self._extenders,
            pods=pods,
            budgets=budgets,
            nominator=self.nominator,
            rng=rng,
            nodes=nodes,
            record=preemptions,
        )

    def close(self) -> None:
        """The loop stops: no assumed pod expires any more."""
        for timer in self._assume_timers.values():
            timer.cancel()
        self._assume_timers.clear()

    # -- accounting, fed by the loop's watch handlers ----------------------------------------

    def is_assumed(self, key: str) -> bool:
        """A binding of this pod is in flight (or done and not yet seen by the watch)."""
        return key in self._placements.assumed

    def pod_bound(self, key: str, pod: PodView) -> bool:
        """``pod`` is bound to ``pod.node_name``: count its requests there from now on.

        Returns whether this freed requests on a node (the pod reached a terminal phase)."""
        self._forget_assumed(key)
        self.nominator.delete(key)
        if pod.terminal:
            return self._placements.bound.pop(key, None) is not None
        self._placements.bound[key] = (
            pod.node_name,
            PlacedPod(pod, requests_quietly(pod, "bound")),
        )
        return False

    def pod_pending(self, key: str, old: PodView | None, new: PodView) -> None:
        """A pod this loop schedules was added or changed: its nomination follows its status."""
        self.nominator.pod_updated(key, old, new, requests_quietly(new, "pending"))

    def pod_gone(self, key: str) -> bool:
        """The pod was deleted (or is no longer this loop's); returns whether this freed
        requests on a node."""
        self._forget_assumed(key)
        self.nominator.delete(key)
        if self._dra is not None:
            self._dra.unreserve(key)
        return self._placements.bound.pop(key, None) is not None

    # -- the scheduling cycle ----------------------------------------------------------------

    async def schedule(self, key: str) -> None:
        """Try to place the pod ``key`` (popped from the queue); report back to the queue."""
        raw = self._pods.get(key)
        pod = None if raw is None else PodView(raw)
        if pod is None or not is_responsible(pod, self.config.scheduler_names):
            self.queue.done(key)
            return
        profile = self.config.profile_for(scheduler_name_of(pod)) or Profile()
        self.stats.attempts += 1
        try:
            requests = _requests_or_fail(pod)
            dra = self._pre_filter(pod)
            host = await self._find_host(Attempt(pod, requests, profile, dra))
        except _Failure as failure:
            self._record_failure(key, pod, failure)
            return
        if dra is not None and self._dra is not None:
            self._dra.reserve(dra, host)
        self._placements.assumed[key] = (host, PlacedPod(pod, requests))
        self.nominator.delete(key)  # assume() drops the nomination
        self._spawn(f"bind-{key}", self._bind(key, pod, host, dra))

    def _pre_filter(self, pod: PodView) -> DraAttempt | None:
        """DynamicResources' PreFilter: a pod whose claims are not ready fits no node."""
        if self._dra is None:
            return None
        try:
            return self._dra.pre_filter(pod)
        except ClaimsNotReady as exc:
            message = f"0/{len(self._nodes)} nodes are available: {exc}."
            raise _Failure(message, unschedulable=True) from exc

    async def _find_host(self, attempt: Attempt) -> str:
        pod, profile = attempt.pod, attempt.profile
        nodes = sorted((NodeView(n) for n in self._nodes.objects()), key=lambda n: n.name)
        if not nodes:
            raise _Failure(NO_NODES_AVAILABLE, unschedulable=True)
        nominated = pod.nominated_node_name or self.nominator.node_of(pod.key)
        nominated_node = self._nodes.get(nominated) if nominated else None
        if nominated_node is not None:
            try:
                feasible, _ = await self._filtering.run(attempt, [NodeView(nominated_node)])
            except (ExtenderError, AllocatorError) as exc:  # evaluateNominatedNode only logs
                log.info("nominated node failed", pod=pod.key, node=nominated, error=str(exc))
                feasible = []
            if feasible:
                return feasible[0].name
        try:
            feasible, statuses = await self._filtering.run(attempt, nodes)
        except ExtenderError as exc:
            self.stats.extender_errors += 1
            raise _Failure(str(exc), unschedulable=False) from exc
        except AllocatorError as exc:
            raise _Failure(str(exc), unschedulable=False) from exc
        if not feasible:
            result = PostFilterResult()
            if profile.preemption:
                snapshot = self._filtering.snapshot(attempt, nodes)
                result = await self._preemption.post_filter(pod, profile, statuses, snapshot)
            message = fit_error_message(len(nodes), statuses, post_filter=result.message)
            raise _Failure(message, unschedulable=True, nominate=result.nominate)
        if len(feasible) == 1:
            return feasible[0].name
        return select_host(await self._prioritize(pod, feasible), self._rng)

    async def _prioritize(self, pod: PodView, feasible: list[NodeView]) -> dict[str, int]:
        scores = {node.name: 0 for node in feasible}
        raw_nodes = [node.raw for node in feasible]
        scorers = [
            e for e in self._extenders if e.config.prioritize_verb and e.is_interested(pod.raw)
        ]
        results = await asyncio.gather(*(self._scores_of(e, pod, raw_nodes) for e in scorers))
        for extender, result in zip(scorers, results, strict=True):
            factor = extender.config.weight * (_MAX_NODE_SCORE // _MAX_EXTENDER_PRIORITY)
            for host, score in result.items():
                if host in scores:
                    scores[host] += score * factor
        return scores

    async def _scores_of(
        self, extender: HttpExtender, pod: PodView, nodes: list[Any]
    ) -> dict[str, int]:
        try:
            return await extender.prioritize(pod.raw, nodes)
        except ExtenderError as exc:
            # kube-scheduler ignores prioritize failures: the extender just adds no score.
            log.warning("extender prioritize failed", extender=extender.url, error=str(exc))
            return {}

    async def _bind(self, key: str, pod: PodView, host: str, dra: DraAttempt | None) -> None:
        binder = next(
            (e for e in self._extenders if e.config.bind_verb and e.is_interested(pod.raw)), None
        )
        try:
            try:
                if dra is not None and self._dra is not None:
                    await self._dra.pre_bind(dra, host)
                if binder is None:
                    await self._default_bind(pod, host)
                else:
                    await binder.bind(pod.raw, host)
            except ExtenderError as exc:
                if binder is None or not binder.config.ignorable:
                    raise
                log.warning("ignorable extender bind failed", extender=binder.url, error=str(exc))
                await self._default_bind(pod, host)
        except (ExtenderError, KubeError, ClaimWriteError) as exc:
            self._placements.assumed.pop(key, None)
            if self._dra is not None:
                self._dra.unreserve(key)
            self.stats.bind_failures += 1
            # A failed binding clears the nomination (clearNominatedNode).
            failure = _Failure(f"binding rejected: {exc}", unschedulable=False, nominate="")
            self._record_failure(key, pod, failure)
            return
        self.stats.scheduled += 1
        if self._dra is not None:
            self._dra.bound(key)
        self.queue.done(key)
        log.info("pod scheduled", pod=key, node=host)
        self._events.emit(
            pod.raw,
            EventType.NORMAL,
            "Scheduled",
            f"Successfully assigned {pod.namespace}/{pod.name} to {host}",
        )
        if key in self._placements.assumed:
            self._assume_timers[key] = asyncio.get_running_loop().call_later(
                self._assume_timeout, self._expire_assumed, key, host
            )

    async def _default_bind(self, pod: PodView, host: str) -> None:
        namespace = pod.namespace or "default"
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": namespace, "uid": pod.meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": host},
        }
        await self._client.post_subresource(PODS, pod.name, "binding", binding, namespace=namespace)

    def _expire_assumed(self, key: str, host: str) -> None:
        self._assume_timers.pop(key, None)
        assumed = self._placements.assumed.get(key)
        if assumed is None or assumed[0] != host:
            return
        # The binder reported success but the pod never showed up bound: forget and retry.
        log.warning("assumed pod never appeared bound; retrying", pod=key, node=host)
        del self._placements.assumed[key]
        raw = self._pods.get(key)
        pod = None if raw is None else PodView(raw)
        if pod is not None and is_responsible(pod, self.config.scheduler_names):
            self.queue.add(key, **queue_position(pod))

    def _forget_assumed(self, key: str) -> None:
        self._placements.assumed.pop(key, None)
        timer = self._assume_timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    # -- failures ----------------------------------------------------------------------------

    def _record_failure(self, key: str, pod: PodView, failure: _Failure) -> None:
        self.stats.failed += 1
        backoff = self.queue.failed(key, unschedulable=failure.unschedulable)
        log.info(
            "unable to schedule pod",
            pod=key,
            reason=failure.message,
            unschedulable=failure.unschedulable,
            backoff_s=backoff,
        )
        # Queued, never awaited: the recorder's own task writes (or bumps) the Event.
        self._events.emit(pod.raw, EventType.WARNING, "FailedScheduling", failure.message)
        if failure.nominate is not None:
            self.nominator.nominate(key, failure.nominate, pod, requests_quietly(pod, "pending"))
        condition_reason = "Unschedulable" if failure.unschedulable else "SchedulerError"
        self._spawn(
            f"condition-{key}",
            self._set_condition(pod, condition_reason, failure.message, failure.nominate),
        )

    async def _set_condition(
        self, pod: PodView, reason: str, message: str, nominate: str | None
    ) -> None:
        """``updatePod``: the ``PodScheduled`` condition and, when preemption set or cleared it,
        ``nominatedNodeName``, in one status patch (none when neither changes)."""
        latest = self._pods.get(pod.key)
        pod = pod if latest is None else PodView(latest)
        patch: dict[str, Any] = {}
        if nominate is not None and nominate != pod.nominated_node_name:
            patch["nominatedNodeName"] = nominate or None
        conditions = [c for c in pod.status.get("conditions") or () if isinstance(c, dict)]
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current and (current.get("status"), current.get("reason"), current.get("message")) == (
            "False",
            reason,
            message,
        ):
            if patch:
                await self._patch_status(pod, patch)
            return
        updated = [c for c in conditions if c.get("type") != "PodScheduled"]
        updated.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": format_time(utc_now()),
            }
        )
        await self._patch_status(pod, {**patch, "conditions": updated})

    async def _patch_status(self, pod: PodView, status: dict[str, Any]) -> None:
        try:
            await self._client.patch(
                PODS,
                pod.name,
                {"status": status},
                namespace=pod.namespace or "default",
                # As kube-scheduler's PatchPodStatus: conditions merge by type, so a condition
                # written meanwhile by another component is kept.
                patch_type=PatchType.STRATEGIC,
                subresource="status",
            )
        except KubeError as exc:
            log.debug("could not update the pod's status", pod=pod.key, error=str(exc))


def _requests_or_fail(pod: PodView) -> dict[str, int]:
    try:
        return pod_requests(pod)
    except ResourceParseError as exc:
        log.warning("pod has an invalid request", pod=pod.key, where=exc.where, value=exc.value)
        raise _Failure(str(exc), unschedulable=True) from exc
