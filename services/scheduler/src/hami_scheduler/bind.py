"""Bind: node lock, bind-phase, Binding — and on any failure, undo and say why.

:meth:`BindService.bind`, as HAMi's ``Bind``:

1. not the leader → ``Error``; the pod read fresh from the API server (gone → its reservation is
   dropped, ``Error``; a different UID than asked → ``Error``; already bound to that node → done,
   to another → ``Error``, its reservation untouched; in single mode, filtered onto another
   node or not at all → ``Error``); the node read (gone → ``BindingFailed`` Event, reservation
   dropped, ``Error``);
2. the node lock (:class:`~hami_scheduler.locks.NodeLocker`) when the pod's app containers ask a
   vendor that uses ``hami.io/mutex.lock``, or any container asks ``koordinator.sh/rdma`` (the
   device plugin finds the pod through the lock for NICs too, also for pods that get only
   NICs); PodGroup members retry a contended lock;
3. ``--filter-mode all`` only: the decision for the node kube-scheduler chose is made now from
   the cache (the pod's previous reservation dropped first) and assumed at once — HAMi's or the
   joint GPU + NIC one by the filter's own rule (:mod:`hami_scheduler.core.joint.route`);
4. one merge patch on the pod: ``hami.io/bind-phase: allocating``, ``hami.io/bind-time`` (and in
   ``all`` mode the decision's annotations and the ``hami.io/vgpu-node`` label);
5. POST ``pods/<name>/binding``.

Any failure after the lock releases the lock and the pod's reservation, records
``BindingFailed`` and answers ``Error``; success records ``BindingSucceed``.  Binds for one node
are serialised in this process (HAMi's per-node mutex) so they meet the lock one at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import structlog

from hami_kube.errors import KubeError, NotFoundError
from hami_kube.objects import PodView
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES, PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.request.containers import PodDeviceRequests
from hami_scheduler.cache.pods import AllocationKey
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.joint.hints import KoordRequests, koord_requests
from hami_scheduler.core.joint.route import decide_on
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import not_leader_message
from hami_scheduler.leader import AlwaysLeader, LeaderView
from hami_scheduler.locks import LockContendedError, LockError, NodeLocker
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.joint_plan import joint_request, managed, wants_rdma
from hami_scheduler.selection.plan import Planner
from hami_scheduler.selection.select import node_refusal, record_of
from hami_scheduler.settings import FilterMode
from hami_scheduler.wire import BindingArgs

__all__ = ["BindService"]

log = structlog.get_logger("hami_scheduler")

_MISSING_ARGS: Final = "extender binding args missing PodName, PodNamespace or Node"


class _BindError(Exception):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class _NodeGates:
    """One asyncio lock per node, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._gates: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, node: str) -> AsyncIterator[None]:
        gate, users = self._gates.get(node, (asyncio.Lock(), 0))
        self._gates[node] = (gate, users + 1)
        try:
            async with gate:
                yield
        finally:
            gate, users = self._gates[node]
            if users <= 1:
                del self._gates[node]
            else:
                self._gates[node] = (gate, users - 1)


class BindService:
    """Answers ``/bind`` (see the module docstring)."""

    def __init__(
        self,
        *,
        client: KubeClient,
        cache: SchedulerCache,
        planner: Planner,
        locker: NodeLocker,
        events: SchedulerEvents,
        metrics: SchedulerMetrics,
        mode: FilterMode = "single",
        leadership: LeaderView | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``leadership``: who may bind (none: this process always does)."""
        self._client = client
        self._cache = cache
        self._planner = planner
        self._locker = locker
        self._events = events
        self._metrics = metrics
        self._mode = mode
        self._leadership = leadership or AlwaysLeader()
        self._clock = clock
        self._gates = _NodeGates()

    async def bind(self, args: BindingArgs) -> str:
        """Bind the pod; returns ``""`` on success, else the error text."""
        started = time.perf_counter()
        outcome, reason, error = "bound", "", ""
        try:
            await self._bind(args)
        except _BindError as exc:
            outcome, reason, error = "error", exc.reason, exc.message
            log.info(
                "bind_failed",
                pod=f"{args.pod_namespace}/{args.pod_name}",
                node=args.node,
                error=error,
            )
        self._metrics.observe("bind", outcome, time.perf_counter() - started, reason)
        return error

    async def _bind(self, args: BindingArgs) -> None:
        if not (args.pod_name and args.pod_namespace and args.node):
            raise _BindError(_MISSING_ARGS, "bad_request")
        if not self._leadership.is_leader:
            raise _BindError(not_leader_message(self._leadership.leader), "not_leader")
        pod = await self._read_pod(args)
        bound = pod.node_name
        if bound == args.node:
            # A retried bind of a pod that is already there: nothing to do, nothing to undo.
            log.info("bind_already_bound", pod=pod.key, node=args.node)
            return
        if bound:
            # Never release what a running pod holds.
            raise _BindError(f"pod {pod.key} is already bound to node {bound}", "already_bound")
        node_obj = await self._read_node(args, pod)
        try:
            requests = self._planner.requests(pod.raw)
            koord = koord_requests(pod.raw)
        except ProtocolError as exc:
            message = f"cannot read the pod's device requests: {exc}"
            raise self._failed(pod, message, "bad_pod") from None
        chosen = pod.annotations.get(keys.VGPU_NODE)
        if self._mode == "single" and managed(requests, koord) and chosen != args.node:
            # The device plugin on another node could not serve this pod's device list.
            message = (
                f"pod {pod.key} was filtered onto node {chosen}, not {args.node}"
                if chosen
                else f"pod {pod.key} carries no {keys.VGPU_NODE} decision; filter it first"
            )
            raise self._failed(pod, message, "not_filtered")
        async with self._gates.hold(args.node):
            await self._locked_bind(args, pod, node_obj, (requests, koord))
        self._events.binding_succeeded(pod, args.node)
        log.info("bind_succeeded", pod=pod.key, node=args.node)

    async def _read_pod(self, args: BindingArgs) -> PodView:
        try:
            pod_obj = await self._client.get(PODS, args.pod_name, namespace=args.pod_namespace)
        except NotFoundError:
            if args.pod_uid:
                self._cache.release(args.pod_uid)
            raise _BindError(
                f"pod {args.pod_namespace}/{args.pod_name} not found", "pod_not_found"
            ) from None
        except KubeError as exc:
            self._metrics.api_error("get_pod")
            if args.pod_uid:
                self._cache.release(args.pod_uid)
            raise _BindError(f"cannot read pod: {exc}", "api_error") from exc
        pod = PodView(pod_obj)
        if args.pod_uid and pod.uid and pod.uid != args.pod_uid:
            raise _BindError(
                f"pod {args.pod_namespace}/{args.pod_name} has UID {pod.uid}, not {args.pod_uid}",
                "pod_replaced",
            )
        return pod

    async def _read_node(self, args: BindingArgs, pod: PodView) -> JsonObject:
        try:
            return await self._client.get(NODES, args.node)
        except NotFoundError:
            raise self._failed(pod, f"node {args.node} not found", "node_not_found") from None
        except KubeError as exc:
            self._metrics.api_error("get_node")
            raise self._failed(pod, f"cannot read node {args.node}: {exc}", "api_error") from exc

    def _failed(self, pod: PodView, message: str, reason: str) -> _BindError:
        """Drop the pod's reservation and record ``BindingFailed``; the error to raise."""
        if pod.uid:
            self._cache.release(pod.uid)
        self._events.binding_failed(pod, message)
        return _BindError(message, reason)

    def _needs_lock(self, requests: PodDeviceRequests, koord: KoordRequests) -> bool:
        if wants_rdma(koord):
            return True
        words = {word for slot in requests.slots if not slot.is_init for word in slot.requests}
        return any(
            vendor.node_lock_key == keys.NODE_LOCK and vendor.common_word in words
            for vendor in self._cache.vendors
        )

    async def _locked_bind(
        self,
        args: BindingArgs,
        pod: PodView,
        node_obj: JsonObject,
        asked: tuple[PodDeviceRequests, KoordRequests],
    ) -> None:
        requests, koord = asked
        locked = False
        if self._needs_lock(requests, koord):
            try:
                await self._locker.acquire(
                    args.node,
                    namespace=pod.namespace,
                    pod=pod.name,
                    node=node_obj,
                    pod_group=bool(pod.labels.get(keys.POD_GROUP_LABEL)),
                )
            except LockContendedError as exc:
                raise self._failed(pod, str(exc), "lock_contended") from exc
            except LockError as exc:
                self._metrics.api_error("lock_node")
                raise self._failed(pod, str(exc), "lock_failed") from exc
            locked = True
        assumed: AllocationKey | None = None
        try:
            annotations: dict[str, str | None] = {
                keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
                keys.BIND_TIME: str(int(self._clock())),
            }
            labels: dict[str, str | None] = {}
            if self._mode == "all" and managed(requests, koord):
                assumed = self._decide(args.node, pod, asked, annotations, labels)
            await patch_metadata(
                self._client,
                PODS,
                pod.name,
                namespace=pod.namespace,
                annotations=annotations,
                labels=labels or None,
            )
            await self._client.post_subresource(
                PODS,
                pod.name,
                "binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod.name, "namespace": pod.namespace},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
                },
                namespace=pod.namespace,
            )
        except (KubeError, _BindError) as exc:
            if assumed is not None:
                self._cache.forget(pod.uid, assumed)
            if locked:
                await self._unlock(args.node, pod)
            if isinstance(exc, _BindError):
                raise self._failed(pod, exc.message, exc.reason) from None
            self._metrics.api_error("bind")
            raise self._failed(pod, f"binding failed: {exc}", "api_error") from exc

    def _decide(
        self,
        node: str,
        pod: PodView,
        asked: tuple[PodDeviceRequests, KoordRequests],
        annotations: dict[str, str | None],
        labels: dict[str, str | None],
    ) -> AllocationKey:
        """``--filter-mode all``: decide for ``node`` now and assume it; returns its key."""
        requests, koord = asked
        self._cache.release(pod.uid)
        try:
            plan = self._planner.plan(pod, requests, quota=self._cache.quota_view)
            request = joint_request(pod, plan, koord)
        except ProtocolError as exc:
            raise _BindError(str(exc), "bad_annotation") from None
        problem = node_refusal(self._cache, node, plan, request)
        decision = problem or decide_on(plan, request, self._cache.fleet, node)
        if isinstance(decision, str):
            raise _BindError(f"node {node}: {decision}", "unschedulable")
        if not decision.fits:
            raise _BindError(f"node {node} no longer fits: {decision.reason}", "unschedulable")
        record = record_of(
            decision, plan, request, pod=pod, cache=self._cache, now_unix=int(self._clock())
        )
        self._cache.assume(pod.uid, pod.name, record.holding)
        annotations.update(record.annotations)
        labels.update(record.labels)
        return record.holding.key

    async def _unlock(self, node: str, pod: PodView) -> None:
        try:
            await self._locker.release(node, namespace=pod.namespace, pod=pod.name)
        except LockError as exc:
            self._metrics.api_error("unlock_node")
            log.warning("unlock_failed", node=node, pod=pod.key, error=str(exc))
