"""Bind: the node lock, then one Binding that carries the decision — and on any failure, undo
and say why.

:meth:`BindService.bind`:

1. not the leader → ``Error`` (the pod's pending decision forgotten);
2. the pod: as the filter kept it (:class:`~hami_scheduler.bind.pending.PendingBinds`, with the
   decision assumed there), else read with a GET (the extender restarted between filter and
   bind, or another replica filtered: not found → ``Error``; another UID than asked →
   ``Error``).  Already bound (the pod read, or the pod watch's copy) to that node → done,
   nothing undone; to another → ``Error``, what it holds untouched;
3. the node: from the node watch (a GET on a miss; gone → ``Error``).  Single mode: a
   decision for another node → ``Error`` (the device plugin there could not serve it);
4. the node locks (:class:`~hami_scheduler.bind.locks.BindLocks` through the
   :class:`~hami_scheduler.nodelock.locker.NodeLocker`): the lock of every
   vendor the pod's app containers ask that has one (``hami.io/mutex.lock``, shared by most;
   Cambricon's ``cambricon.com/dsmlu.lock``), taken in the sorted order of the vendors' common
   words as HAMi takes them, each key once; ``hami.io/mutex.lock`` too when any container asks
   ``koordinator.sh/rdma`` (the device plugin finds the pod through the lock for NICs too).  A
   lock that cannot be taken releases the ones this bind took before it, last first.
   Binds needing a node's locks queue for them in arrival order
   (:class:`~hami_scheduler.nodelock.waits.LockWaits`); a lock another pod still needs is
   *waited for* — woken by the watch, never by polling — until ``--node-lock-wait`` (20 s;
   PodGroup members: ``--node-lock-retry-timeout`` if longer) has passed since the bind
   arrived, then ``Error`` naming the owner (``node n1 is locked by ns/pod, waiting for its
   device plugin since <time>; waited 20s``).  A lock found overdue is reported
   (:class:`~hami_scheduler.bind.upkeep.OverdueLocks`).  No NVIDIA (or RDMA) lock on a node whose
   device plugin says ``hami.io/node-allocate-identity: pod-resources``: it tells pods apart
   through the kubelet's PodResources API, so binds there neither lock nor queue for it.  Only
   our NVIDIA plugin writes that annotation: other vendors' locks are taken there all the same;
5. no decision yet (``--filter-mode all``, or none kept): decide for this node now from the
   cache — HAMi's or the joint GPU + NIC one by the filter's own rule
   (:mod:`hami_scheduler.core.joint.route`), on the node as the filter sees it (what is held
   for nominated preemptors of equal or higher priority counts:
   :meth:`~hami_scheduler.cache.view.SchedulerCache.fleet_for`) — and assume it;
6. POST ``pods/<name>/binding`` with ``metadata.uid`` as precondition and
   ``metadata.annotations`` = the decision's annotations (``hami.io/vgpu-node``,
   ``hami.io/vgpu-time``, every vendor's to-allocate and allocated lists, the RDMA and
   Koordinator ones) + ``hami.io/bind-phase: allocating`` + ``hami.io/bind-time``; the API
   server copies them onto the pod as it binds it.  The ``hami.io/vgpu-node`` label is the
   device plugin's to set once the pod is allocated.

API cost of a bind, nominally: two writes (the lock, the Binding) and no read; one write (the
Binding) where the node's plugin identifies pods through PodResources.

Every failure leaves nothing behind: each lock is released when this bind wrote it (not when it
only re-entered its own), the decision's assumption is dropped (a Binding that failed on the
wire but happened after all shows up in the watch and counts from there), ``BindingFailed`` is
recorded and ``Error`` answered; a bind cancelled before its Binding was sent undoes the same.
Success records ``BindingSucceed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Final

import structlog

from hami_kube.errors import ConflictError, KubeError, NotFoundError
from hami_kube.objects import PodView, key_for
from hami_kube.resources import NODES, PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_kube.timefmt import utc_now
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.lock_keys import LockRule
from hami_protocol.request.containers import PodDeviceRequests
from hami_scheduler.bind.locks import BindLocks
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.bind.upkeep import OverdueLocks
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.joint.hints import KoordRequests, koord_requests
from hami_scheduler.core.joint.route import decide_on
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.leader import AlwaysLeader, LeaderView, not_leader_message
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.nodelock.locker import NodeLocker
from hami_scheduler.nodelock.owners import LockOwners
from hami_scheduler.nodelock.waits import LockWaits
from hami_scheduler.selection.joint_plan import joint_request, managed
from hami_scheduler.selection.plan import DecisionRecord, Planner
from hami_scheduler.selection.select import node_refusal, record_of
from hami_scheduler.settings import DEFAULT_NODE_LOCK_WAIT_S, FilterMode
from hami_scheduler.wire import BindingArgs

__all__ = ["BindService"]

log = structlog.get_logger("hami_scheduler")

_MISSING_ARGS: Final = "extender binding args missing PodName, PodNamespace or Node"
_Asked = tuple[PodDeviceRequests, KoordRequests]


class _BindError(Exception):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class BindService:
    """Answers ``/bind`` (see the module docstring)."""

    def __init__(
        self,
        *,
        client: KubeClient,
        cache: SchedulerCache,
        planner: Planner,
        locker: NodeLocker,
        owners: LockOwners,
        events: SchedulerEvents,
        metrics: SchedulerMetrics,
        pending: PendingBinds | None = None,
        waits: LockWaits | None = None,
        overdue: OverdueLocks | None = None,
        pods: Callable[[str], JsonObject | None] = lambda _key: None,
        mode: FilterMode = "single",
        leadership: LeaderView | None = None,
        lock_wait_s: float = DEFAULT_NODE_LOCK_WAIT_S,
        group_wait_s: float = 28.0,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        """``leadership``: who may bind (none: this process always does); ``pods``: the pod
        watch's copy by ``namespace/name``; ``lock_wait_s`` / ``group_wait_s``: the wait
        budgets (``--node-lock-wait``, ``--node-lock-retry-timeout`` for PodGroup members)."""
        self._client = client
        self._cache = cache
        self._planner = planner
        self._locker = locker
        self._owners = owners
        self._events = events
        self._metrics = metrics
        self._pending = pending if pending is not None else PendingBinds(cache)
        self._waits = waits if waits is not None else LockWaits()
        self._pods = pods
        self._mode = mode
        self._leadership = leadership or AlwaysLeader()
        self._now = now
        self._locks = BindLocks(
            cache=cache,
            locker=locker,
            owners=owners,
            metrics=metrics,
            waits=self._waits,
            overdue=overdue,
            failed=self._failed,
            lock_wait_s=lock_wait_s,
            group_wait_s=max(group_wait_s, lock_wait_s),
            now=now,
        )

    async def bind(self, args: BindingArgs) -> str:
        """Bind the pod; returns ``""`` on success, else the error text."""
        started = asyncio.get_running_loop().time()
        outcome, reason, error = "bound", "", ""
        try:
            await self._bind(args, started)
        except _BindError as exc:
            outcome, reason, error = "error", exc.reason, exc.message
            log.info(
                "bind_failed",
                pod=f"{args.pod_namespace}/{args.pod_name}",
                node=args.node,
                error=error,
            )
        elapsed = asyncio.get_running_loop().time() - started
        self._metrics.observe("bind", outcome, elapsed, reason)
        return error

    async def _bind(self, args: BindingArgs, started: float) -> None:
        if not (args.pod_name and args.pod_namespace and args.node):
            raise _BindError(_MISSING_ARGS, "bad_request")
        if not self._leadership.is_leader:
            if args.pod_uid:
                self._pending.drop(args.pod_uid)
            raise _BindError(not_leader_message(self._leadership.leader), "not_leader")
        entry = self._pending.take(args.pod_uid) if args.pod_uid else None
        if entry is not None and entry.pod.key != key_for(args.pod_namespace, args.pod_name):
            self._cache.release(args.pod_uid)
            entry = None
        if entry is None:
            pod, record = await self._read_pod(args), None
        else:
            pod, record = entry.pod, entry.record
        bound = pod.node_name or self._seen_bound(pod)
        if bound and record is not None:
            # What the pod carries counts (the watch has it), not what was kept for it.
            self._cache.forget(pod.uid, record.holding.key)
        if bound == args.node:
            # A retried bind of a pod that is already there: nothing to do, nothing to undo.
            log.info("bind_already_bound", pod=pod.key, node=args.node)
            return
        if bound:
            # Never release what a running pod holds.
            raise _BindError(f"pod {pod.key} is already bound to node {bound}", "already_bound")
        try:
            asked = (self._planner.requests(pod.raw), koord_requests(pod.raw))
        except ProtocolError as exc:
            message = f"cannot read the pod's device requests: {exc}"
            raise self._failed(pod, message, "bad_pod") from None
        await self._check_node(args.node, pod)
        chosen = record.holding.node if record is not None else args.node
        if self._mode == "single" and managed(*asked) and chosen != args.node:
            # The device plugin on another node could not serve this pod's device list.
            message = f"pod {pod.key} was filtered onto node {chosen}, not {args.node}"
            raise self._failed(pod, message, "not_filtered")
        try:
            with self._owners.binding(pod.namespace, pod.name):
                await self._locked(args.node, pod, record, asked, started)
        except asyncio.CancelledError:
            # Cancelled while waiting for the lock (the extender stopping, kube-scheduler gone):
            # nothing was written; the decision is dropped (see _finish for later stages).
            if pod.uid:
                self._cache.release(pod.uid)
            raise
        self._owners.bound(pod.namespace, pod.name, args.node)
        self._events.binding_succeeded(pod, args.node)
        log.info("bind_succeeded", pod=pod.key, node=args.node)

    # -- reading --------------------------------------------------------------------------
    def _seen_bound(self, pod: PodView) -> str:
        """The node the pod watch shows this very pod bound to (``""``: none)."""
        seen = self._pods(pod.key)
        if seen is None:
            return ""
        view = PodView(seen)
        return view.node_name if view.uid == pod.uid else ""

    async def _read_pod(self, args: BindingArgs) -> PodView:
        self._metrics.cache_miss("pod")
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

    async def _check_node(self, node: str, pod: PodView) -> None:
        if self._locker.known_node(node) is not None:
            return
        self._metrics.cache_miss("node")
        try:
            await self._client.get(NODES, node)
        except NotFoundError:
            raise self._failed(pod, f"node {node} not found", "node_not_found") from None
        except KubeError as exc:
            self._metrics.api_error("get_node")
            raise self._failed(pod, f"cannot read node {node}: {exc}", "api_error") from exc

    def _failed(self, pod: PodView, message: str, reason: str) -> _BindError:
        """Drop the pod's reservation and record ``BindingFailed``; the error to raise."""
        if pod.uid:
            self._cache.release(pod.uid)
        self._events.binding_failed(pod, message)
        return _BindError(message, reason)

    # -- the lock -------------------------------------------------------------------------
    async def _locked(
        self, node: str, pod: PodView, record: DecisionRecord | None, asked: _Asked, started: float
    ) -> None:
        """Take the locks the pod needs (waiting in line), then finish the bind."""
        rules = self._locks.rules(node, *asked)
        if not rules:
            await self._finish(node, pod, record, asked, wrote=())
            return
        async with self._locks.taken(node, pod, rules, started) as wrote:
            await self._finish(node, pod, record, asked, wrote=wrote)

    # -- decision and Binding -------------------------------------------------------------
    async def _finish(
        self,
        node: str,
        pod: PodView,
        record: DecisionRecord | None,
        asked: _Asked,
        *,
        wrote: tuple[LockRule, ...],
    ) -> None:
        sent = False
        try:
            if record is None and managed(*asked):
                record = self._decide(node, pod, asked)
            annotations = dict(record.annotations) if record is not None else {}
            annotations[keys.BIND_PHASE] = keys.BIND_PHASE_ALLOCATING
            annotations[keys.BIND_TIME] = str(int(self._now().timestamp()))
            sent = True
            await self._post_binding(pod, node, annotations)
        except ConflictError as exc:
            if await self._bound_after_all(pod, node, record):
                await self._locks.release(node, pod, wrote)
                return
            await self._undo(node, pod, wrote)
            self._metrics.api_error("bind")
            raise self._failed(pod, f"binding failed: {exc}", "conflict") from exc
        except KubeError as exc:
            await self._undo(node, pod, wrote)
            self._metrics.api_error("bind")
            raise self._failed(pod, f"binding failed: {exc}", "api_error") from exc
        except _BindError as exc:
            await self._undo(node, pod, wrote)
            raise self._failed(pod, exc.message, exc.reason) from None
        except asyncio.CancelledError:
            if not sent:
                # Cancelled (the extender stopping, kube-scheduler gone) before the Binding.
                await self._undo(node, pod, wrote)
            elif pod.uid:
                self._cache.release(pod.uid)
            raise
        if record is not None:
            # Bound: from now on only the pod watch confirms the decision (or its re-list
            # forgets it, the pod gone meanwhile: cache/watch.py).
            self._cache.bound(pod.uid, record.holding.key)

    async def _undo(self, node: str, pod: PodView, wrote: tuple[LockRule, ...]) -> None:
        if pod.uid:
            self._cache.release(pod.uid)
        await self._locks.release(node, pod, wrote)

    async def _post_binding(self, pod: PodView, node: str, annotations: dict[str, str]) -> None:
        meta: dict[str, object] = {
            "name": pod.name,
            "namespace": pod.namespace,
            "annotations": annotations,
        }
        if pod.uid:
            meta["uid"] = pod.uid
        await self._client.post_subresource(
            PODS,
            pod.name,
            "binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
            namespace=pod.namespace,
        )

    async def _bound_after_all(
        self, pod: PodView, node: str, record: DecisionRecord | None
    ) -> bool:
        """After a 409: whether this very pod is already bound to ``node`` (a retried bind
        whose first Binding did happen).  Its own annotations count then, not ours."""
        self._metrics.cache_miss("pod")
        try:
            found = PodView(await self._client.get(PODS, pod.name, namespace=pod.namespace))
        except KubeError:
            return False
        if found.uid != pod.uid or found.node_name != node:
            return False
        if record is not None:
            self._cache.forget(pod.uid, record.holding.key)
        log.info("bind_already_bound", pod=pod.key, node=node)
        return True

    def _decide(self, node: str, pod: PodView, asked: _Asked) -> DecisionRecord:
        """No decision kept for this pod: decide for ``node`` now and assume it."""
        requests, koord = asked
        self._cache.release(pod.uid)
        try:
            plan = self._planner.plan(
                pod, requests, quota=self._cache.quota_view, sgpu_state=self._cache.sgpu_state
            )
            request = joint_request(pod, plan, koord)
        except ProtocolError as exc:
            raise _BindError(str(exc), "bad_annotation") from None
        problem = node_refusal(self._cache, node, plan, request)
        # Capacity held for nominated pods of equal or higher priority counts here too.
        fleet = self._cache.fleet_for(pod.uid, pod.priority)
        decision = problem or decide_on(plan, request, fleet, node)
        if isinstance(decision, str):
            raise _BindError(f"node {node}: {decision}", "unschedulable")
        if not decision.fits:
            raise _BindError(f"node {node} no longer fits: {decision.reason}", "unschedulable")
        record = record_of(
            decision,
            plan,
            request,
            pod=pod,
            cache=self._cache,
            now_unix=int(self._now().timestamp()),
            device_config=self._planner.device_config,
        )
        self._cache.assume(pod.uid, pod.name, record.holding)
        return record
