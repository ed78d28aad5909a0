"""The kube-scheduler stand-in: schedules pending pods and calls HTTP extenders.

``SchedulingLoop`` follows nodes and pods through the API server (``hami_kube`` reflectors), queues
pending pods whose ``spec.schedulerName`` is one of its profiles, and for each, one at a time:

1. runs the in-tree filters (:mod:`hami_kubesim.scheduler.predicates`) over every node;
2. calls each interested extender's filter verb in order on the survivors (``NodeNames`` when
   ``nodeCacheCapable``, else the full ``Nodes``), recording ``FailedNodes`` reasons;
3. with more than one feasible node, calls the prioritize verbs in parallel and adds
   ``Score * weight * 10``; picks the highest total (ties: see ``select_host``);
4. assumes the pod on that node (its requests count there at once) and binds it in the
   background, through the extender's bind verb when one is configured and interested, else by
   POSTing the Binding subresource.

A failure records a ``FailedScheduling`` Warning Event (``0/3 nodes are available: ...``; repeats
bump its count, see ``hami_kube.events.EventRecorder``), sets the pod's ``PodScheduled=False``
condition and puts the pod back into the queue with exponential backoff; pods no node fits wait
for a node or pod change (see :mod:`scheduling_queue`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import aiohttp
import structlog

from hami_kube.errors import KubeError
from hami_kube.events import EventRecorder, EventType
from hami_kube.reflector import EventHandlers, Reflector
from hami_kube.resources import NODES, PODS, JsonObject, object_key
from hami_kube.rest import KubeClient, PatchType
from hami_kube.store import Store
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.access import connect, reflector_config
from hami_kubesim.background_tasks import start, stop
from hami_kubesim.scheduler.config import DEFAULT_SCHEDULER_NAME, Profile, SchedulerConfig
from hami_kubesim.scheduler.extender import HttpExtender
from hami_kubesim.scheduler.extender_wire import ExtenderError
from hami_kubesim.scheduler.predicates import (
    NO_NODES_AVAILABLE,
    NodeUsage,
    ResourceParseError,
    check_node,
    fit_error_message,
    pod_requests,
    select_host,
)
from hami_kubesim.scheduler.queue import SchedulingQueue

__all__ = ["SchedulingLoop", "SchedulingStats"]

log = structlog.get_logger(__name__)

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_MAX_EXTENDER_PRIORITY = 10
_MAX_NODE_SCORE = 100


@dataclass(slots=True)
class SchedulingStats:
    """Counters for tests and logs (not Prometheus metrics)."""

    attempts: int = 0
    scheduled: int = 0
    failed: int = 0
    extender_errors: int = 0
    bind_failures: int = 0


class _Failure(Exception):  # noqa: N818 - internal control flow, not an API error
    def __init__(self, message: str, *, unschedulable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.unschedulable = unschedulable


class SchedulingLoop:
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
        self._ready_timeout = ready_timeout
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._group: asyncio.TaskGroup | None = None
        self._client: KubeClient | None = None
        self._events: EventRecorder | None = None
        self._extenders: list[HttpExtender] = []
        self._nodes = Store()
        self._pods = Store()
        self._bound: dict[str, tuple[str, dict[str, int]]] = {}
        self._assumed: dict[str, tuple[str, dict[str, int]]] = {}
        self._assume_timers: dict[str, asyncio.TimerHandle] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._task = await start(
            self.run(),
            self._ready,
            name="kubesim-scheduler",
            limit=self._ready_timeout,
            what="scheduling loop",
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None
        await stop(task)

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def run(self) -> None:
        """Follow the cluster and schedule until cancelled."""
        async with (
            connect(self.api_url, component=self._instance) as client,
            aiohttp.ClientSession() as http,
        ):
            events = EventRecorder(client, component=self._component_name(), host=self._instance)
            self._client, self._events = client, events
            self._extenders = [
                HttpExtender(c, session=http) for c in self.config.ordered_extenders()
            ]
            nodes = Reflector(
                client,
                NODES,
                config=reflector_config(),
                handlers=[
                    EventHandlers(on_add=self._on_node_added, on_update=self._on_node_updated)
                ],
                name="kubesim-scheduler-nodes",
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
                name="kubesim-scheduler-pods",
            )
            self._nodes, self._pods = nodes.store, pods.store
            self._bound.clear()
            self._assumed.clear()
            try:
                async with asyncio.TaskGroup() as group:
                    self._group = group
                    group.create_task(nodes.run(), name="kubesim-scheduler-nodes")
                    group.create_task(pods.run(), name="kubesim-scheduler-pods")
                    group.create_task(events.run(), name="kubesim-scheduler-events")
                    await nodes.wait_synced()
                    await pods.wait_synced()
                    self._ready.set()
                    log.info("scheduling loop ready", profiles=sorted(self.config.scheduler_names))
                    while True:
                        key = await self.queue.pop()
                        await self._schedule_one(key)
            finally:
                self._ready.clear()
                self._group = None
                self._client = self._events = None
                for timer in self._assume_timers.values():
                    timer.cancel()
                self._assume_timers.clear()

    # -- watch handlers --------------------------------------------------------------------

    def _on_node_added(self, _node: JsonObject) -> None:
        self.queue.move_all_unschedulable()

    def _on_node_updated(self, old: JsonObject, new: JsonObject) -> None:
        if _node_changed(old, new):
            self.queue.move_all_unschedulable()

    def _on_pod_deleted(self, pod: JsonObject) -> None:
        key = object_key(pod)
        self.queue.delete(key)
        self._forget_assumed(key)
        if self._bound.pop(key, None) is not None:
            self.queue.move_all_unschedulable()

    def _on_pod_added(self, pod: JsonObject) -> None:
        self._on_pod(None, pod)

    def _on_pod_updated(self, old: JsonObject, new: JsonObject) -> None:
        self._on_pod(old, new)

    def _on_pod(self, old: JsonObject | None, new: JsonObject) -> None:
        key = object_key(new)
        node_name = (new.get("spec") or {}).get("nodeName")
        if node_name:
            self._on_assigned_pod(key, str(node_name), new)
            return
        if not self._responsible(new):
            self.queue.delete(key)
            return
        if key in self._assumed:
            return  # binding in flight; the outcome decides what happens next
        if old is None or key not in self.queue or _pod_changed(old, new):
            self.queue.add(key, priority=_priority(new), created=_created(new))

    def _on_assigned_pod(self, key: str, node_name: str, pod: dict[str, Any]) -> None:
        self.queue.delete(key)
        self._forget_assumed(key)
        if (pod.get("status") or {}).get("phase") in _TERMINAL_PHASES:
            if self._bound.pop(key, None) is not None:
                self.queue.move_all_unschedulable()
            return
        try:
            requests = pod_requests(pod)
        except ResourceParseError as exc:
            log.warning(
                "bound pod has an invalid request", pod=key, where=exc.where, value=exc.value
            )
            requests = {}
        self._bound[key] = (node_name, requests)

    # -- one scheduling cycle --------------------------------------------------------------

    async def _schedule_one(self, key: str) -> None:
        pod = self._pods.get(key)
        if pod is None or not self._responsible(pod):
            self.queue.done(key)
            return
        profile = self.config.profile_for(_scheduler_name(pod)) or Profile()
        self.stats.attempts += 1
        try:
            requests = _requests_or_fail(pod)
            host = await self._find_host(pod, requests, profile)
        except _Failure as failure:
            self._record_failure(key, pod, failure)
            return
        self._assumed[key] = (host, requests)
        self._spawn(self._bind(key, pod, host), name=f"kubesim-bind-{key}")

    async def _find_host(
        self, pod: dict[str, Any], requests: dict[str, int], profile: Profile
    ) -> str:
        nodes = sorted(self._nodes.objects(), key=_name)
        if not nodes:
            raise _Failure(NO_NODES_AVAILABLE, unschedulable=True)
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        nominated_node = self._nodes.get(nominated) if isinstance(nominated, str) else None
        if nominated_node is not None:
            feasible, _ = await self._filter(pod, requests, profile, [nominated_node])
            if feasible:
                return _name(nominated_node)
        feasible, reasons = await self._filter(pod, requests, profile, nodes)
        if not feasible:
            raise _Failure(fit_error_message(len(nodes), reasons), unschedulable=True)
        if len(feasible) == 1:
            return _name(feasible[0])
        return select_host(await self._prioritize(pod, feasible), self._rng)

    async def _filter(
        self,
        pod: dict[str, Any],
        requests: dict[str, int],
        profile: Profile,
        nodes: list[dict[str, Any]],
    ) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
        usage = self._usage_by_node()
        reasons: dict[str, list[str]] = {}
        feasible: list[dict[str, Any]] = []
        for node in nodes:
            name = _name(node)
            try:
                rejected = check_node(
                    pod,
                    requests,
                    node,
                    usage.get(name, NodeUsage()),
                    ignored_resources=profile.ignored_resources,
                    ignored_resource_groups=profile.ignored_resource_groups,
                )
            except ResourceParseError as exc:
                log.warning(
                    "node has an invalid allocatable", node=name, where=exc.where, value=exc.value
                )
                rejected = ("node(s) had invalid allocatable resources",)
            if rejected:
                reasons[name] = list(rejected)
            else:
                feasible.append(node)
        for extender in self._extenders:
            if not feasible:
                break
            if not extender.config.filter_verb or not extender.is_interested(pod):
                continue
            try:
                outcome = await extender.filter(pod, feasible)
            except ExtenderError as exc:
                if extender.config.ignorable:
                    log.warning(
                        "ignorable extender filter failed", extender=extender.url, error=str(exc)
                    )
                    continue
                self.stats.extender_errors += 1
                raise _Failure(str(exc), unschedulable=False) from exc
            for node_name, reason in {**outcome.failed, **outcome.failed_unresolvable}.items():
                reasons.setdefault(node_name, []).append(reason)
            by_name = {_name(node): node for node in feasible}
            feasible = [by_name[name] for name in outcome.survivors]
        return feasible, reasons

    async def _prioritize(
        self, pod: dict[str, Any], feasible: list[dict[str, Any]]
    ) -> dict[str, int]:
        scores = {_name(node): 0 for node in feasible}
        scorers = [e for e in self._extenders if e.config.prioritize_verb and e.is_interested(pod)]
        results = await asyncio.gather(*(self._scores_of(e, pod, feasible) for e in scorers))
        for extender, result in zip(scorers, results, strict=True):
            factor = extender.config.weight * (_MAX_NODE_SCORE // _MAX_EXTENDER_PRIORITY)
            for host, score in result.items():
                if host in scores:
                    scores[host] += score * factor
        return scores

    async def _scores_of(
        self, extender: HttpExtender, pod: dict[str, Any], feasible: list[dict[str, Any]]
    ) -> dict[str, int]:
        try:
            return await extender.prioritize(pod, feasible)
        except ExtenderError as exc:
            # kube-scheduler ignores prioritize failures: the extender just adds no score.
            log.warning("extender prioritize failed", extender=extender.url, error=str(exc))
            return {}

    # -- binding ---------------------------------------------------------------------------

    async def _bind(self, key: str, pod: dict[str, Any], host: str) -> None:
        binder = next(
            (e for e in self._extenders if e.config.bind_verb and e.is_interested(pod)), None
        )
        try:
            try:
                if binder is None:
                    await self._default_bind(pod, host)
                else:
                    await binder.bind(pod, host)
            except ExtenderError as exc:
                if binder is None or not binder.config.ignorable:
                    raise
                log.warning("ignorable extender bind failed", extender=binder.url, error=str(exc))
                await self._default_bind(pod, host)
        except (ExtenderError, KubeError) as exc:
            self._assumed.pop(key, None)
            self.stats.bind_failures += 1
            self._record_failure(
                key, pod, _Failure(f"binding rejected: {exc}", unschedulable=False)
            )
            return
        self.stats.scheduled += 1
        self.queue.done(key)
        metadata = pod.get("metadata") or {}
        log.info("pod scheduled", pod=key, node=host)
        self._emit_event(
            pod,
            EventType.NORMAL,
            "Scheduled",
            f"Successfully assigned {metadata.get('namespace')}/{metadata.get('name')} to {host}",
        )
        if key in self._assumed:
            self._assume_timers[key] = asyncio.get_running_loop().call_later(
                self._assume_timeout, self._expire_assumed, key, host
            )

    async def _default_bind(self, pod: dict[str, Any], host: str) -> None:
        assert self._client is not None
        metadata = pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name"))
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": metadata.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": host},
        }
        await self._client.post_subresource(PODS, name, "binding", binding, namespace=namespace)

    def _expire_assumed(self, key: str, host: str) -> None:
        self._assume_timers.pop(key, None)
        assumed = self._assumed.get(key)
        if assumed is None or assumed[0] != host:
            return
        # The binder reported success but the pod never showed up bound: forget and retry.
        log.warning("assumed pod never appeared bound; retrying", pod=key, node=host)
        del self._assumed[key]
        pod = self._pods.get(key)
        if pod is not None and self._responsible(pod):
            self.queue.add(key, priority=_priority(pod), created=_created(pod))

    def _forget_assumed(self, key: str) -> None:
        self._assumed.pop(key, None)
        timer = self._assume_timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    # -- failure handling ------------------------------------------------------------------

    def _record_failure(self, key: str, pod: dict[str, Any], failure: _Failure) -> None:
        self.stats.failed += 1
        backoff = self.queue.failed(key, unschedulable=failure.unschedulable)
        log.info(
            "unable to schedule pod",
            pod=key,
            reason=failure.message,
            unschedulable=failure.unschedulable,
            backoff_s=backoff,
        )
        self._emit_event(pod, EventType.WARNING, "FailedScheduling", failure.message)
        condition_reason = "Unschedulable" if failure.unschedulable else "SchedulerError"
        self._spawn(
            self._set_condition(pod, condition_reason, failure.message),
            name=f"kubesim-scheduler-condition-{key}",
        )

    async def _set_condition(self, pod: dict[str, Any], reason: str, message: str) -> None:
        if self._client is None:
            return
        metadata = pod.get("metadata") or {}
        conditions = list((pod.get("status") or {}).get("conditions") or [])
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current and (current.get("status"), current.get("reason"), current.get("message")) == (
            "False",
            reason,
            message,
        ):
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
        try:
            await self._client.patch(
                PODS,
                str(metadata.get("name")),
                {"status": {"conditions": updated}},
                namespace=str(metadata.get("namespace") or "default"),
                patch_type=PatchType.MERGE,
                subresource="status",
            )
        except KubeError as exc:
            log.debug(
                "could not update PodScheduled condition", pod=object_key(pod), error=str(exc)
            )

    def _emit_event(
        self, pod: Mapping[str, Any], event_type: EventType, reason: str, message: str
    ) -> None:
        # Queued, never awaited: the recorder's own task writes (or bumps) the Event.
        if self._events is not None:
            self._events.emit(pod, event_type, reason, message)

    # -- helpers ---------------------------------------------------------------------------

    def _spawn(self, coroutine: Coroutine[Any, Any, None], *, name: str) -> None:
        if self._group is None:
            coroutine.close()
            return
        self._group.create_task(_guarded(coroutine, name), name=name)

    def _responsible(self, pod: Mapping[str, Any]) -> bool:
        spec = pod.get("spec") or {}
        metadata = pod.get("metadata") or {}
        return (
            not spec.get("nodeName")
            and _scheduler_name(pod) in self.config.scheduler_names
            and not metadata.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in _TERMINAL_PHASES
            and not spec.get("schedulingGates")
        )

    def _usage_by_node(self) -> dict[str, NodeUsage]:
        usage: dict[str, NodeUsage] = {}
        for node, requests in [*self._bound.values(), *self._assumed.values()]:
            usage[node] = usage.get(node, NodeUsage()).plus(requests)
        return usage

    def _component_name(self) -> str:
        names = sorted(self.config.scheduler_names)
        return names[0] if len(names) == 1 else DEFAULT_SCHEDULER_NAME


async def _guarded(coroutine: Coroutine[Any, Any, None], name: str) -> None:
    # A bug in one background task must not tear down the whole loop's task group.
    try:
        await coroutine
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("scheduler background task failed", task=name)


def _requests_or_fail(pod: Mapping[str, Any]) -> dict[str, int]:
    try:
        return pod_requests(pod)
    except ResourceParseError as exc:
        log.warning(
            "pod has an invalid request", pod=object_key(pod), where=exc.where, value=exc.value
        )
        raise _Failure(str(exc), unschedulable=True) from exc


def _node_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    if old is None or new is None:
        return True
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return (
        old_meta.get("labels") != new_meta.get("labels")
        or old_meta.get("annotations") != new_meta.get("annotations")
        or old.get("spec") != new.get("spec")
        or (old.get("status") or {}).get("allocatable")
        != (new.get("status") or {}).get("allocatable")
    )


def _pod_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """A change that may make a pending pod schedulable (status-only updates are not)."""
    if old is None:
        return True
    ignored = {"resourceVersion", "managedFields", "generation"}
    old_meta = {k: v for k, v in (old.get("metadata") or {}).items() if k not in ignored}
    new_meta = {k: v for k, v in (new.get("metadata") or {}).items() if k not in ignored}
    return old_meta != new_meta or old.get("spec") != new.get("spec")


def _scheduler_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER_NAME)


def _priority(pod: Mapping[str, Any]) -> int:
    priority = (pod.get("spec") or {}).get("priority")
    return priority if isinstance(priority, int) and not isinstance(priority, bool) else 0


def _created(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("creationTimestamp") or "")


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")
