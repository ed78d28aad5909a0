"""Filter and prioritize: from extender arguments to a reply, through the caches and the core.

:meth:`FilterService.filter`, in order:

1. no pod → ``Error: "extender args missing pod"``; a pod whose requests cannot be read
   (``koordinator.sh/rdma`` included), invalid ``hami.io/device-scoring-weights``, or an
   invalid ``scheduling.koordinator.sh/device-joint-allocate`` / ``…/device-allocate-hint``
   → ``Error`` naming the annotation and the problem (kube-scheduler records it in its
   ``FailedScheduling`` Event; a ``FilteringFailed`` Event says the same);
2. a pod asking for no managed device (HAMi's device resources, or RDMA) → every input node
   unchanged;
3. full ``Nodes`` given (``nodeCacheCapable: false``, the cluster-autoscaler's simulation):
   decide from those objects' annotations with the usage the cache knows, and return the best
   node's object (``--filter-mode all``: every fitting one) — nothing written, nothing
   assumed, the caches untouched (no hold for nominated pods either: the objects are the
   request's);
4. not the leader → ``Error: "not the leader; leader is <holder>"``; caches not synced yet →
   ``Error``;
5. ``--filter-mode single`` (HAMi's): drop the pod's previous reservation, select among the
   candidates (``node unregistered`` for unknown ones, the annotation or handshake problem for
   troubled ones — an unreadable ``hami.io/node-rdma-register`` for pods asking NICs — HAMi's
   reason text for the rest), assume the decision in the cache and keep it for the bind
   (:class:`~hami_scheduler.bind.pending.PendingBinds`: the annotations HAMi's filter patch wrote —
   ``hami.io/vgpu-node``, ``hami.io/vgpu-time``, each vendor's to-allocate and allocated
   lists, and for a joint decision the RDMA lists and ``scheduling.koordinator.sh/
   device-allocated`` — now travel in the Binding).  **Nothing is written**: the API cost of a
   filter is zero.  The reply names the chosen node only, as before.  Which core path a pod
   takes on each node is :mod:`hami_scheduler.core.joint.route`'s rule — the same for the full
   ``Nodes`` path and for ``--filter-mode all`` bind: pods without Koordinator requests keep
   HAMi's fast path wherever no other pod holds an exclusive claim on the GPUs;
6. ``--filter-mode all``: the reply names every fitting node and writes nothing; the pod is
   kept for the bind (so it need not read it), prioritize scores the nodes and bind decides for
   the node kube-scheduler picked.

Every decision reads the nodes as this pod sees them
(:meth:`~hami_scheduler.cache.view.SchedulerCache.fleet_for`): on a node a pod of equal or
higher priority is nominated to, the devices held for it count.

**The refused nodes.**  When some node fits, every refused one is in ``FailedNodes`` and
``FailedAndUnresolvableNodes`` is ``null``, as before (kube-scheduler preempts only for a pod
no node fits).  When none fits, they are split
(:func:`~hami_scheduler.selection.resolvable.split_unresolvable`, both request forms):
``FailedAndUnresolvableNodes`` names those where no eviction could help — the pod would not
fit even with every pod's usage on the node taken away, or the cache refuses the node outright
(unregistered, a malformed register annotation, a silent vendor) — so kube-scheduler's
preemption never considers them; the rest stay in ``FailedNodes``, its candidates.  The
reason texts are the same in either map; ``FailedNodes`` is always an object,
``FailedAndUnresolvableNodes`` ``null`` when it would be empty.

Cost: O(candidates × their devices), never O(pods): the core reads the cached node usage, and
a :class:`~hami_scheduler.core.SelectMemo` reuses per-node answers while a node is unchanged.
Joint pods pay a full joint decision per candidate with NICs (bounded per node).  Holds add
O(nodes with nominated pods) and a copy of the node mapping when one applies; a pod no node
fits pays the split: one more memoised pass over the refused nodes' empty copies (about
doubling that filter's cost).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import structlog

from hami_kube.objects import NodeView, PodView
from hami_kube.resources import JsonObject
from hami_protocol.errors import ProtocolError
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import PodDeviceRequests
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import NodeUsage, PodPlan, SelectMemo
from hami_scheduler.core.joint.hints import JointRequest, KoordRequests, koord_requests
from hami_scheduler.core.joint.route import choose, resolved
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.gpumap.verdicts import Verdict, Verdicts, group_reasons
from hami_scheduler.leader import AlwaysLeader, LeaderView, not_leader_message
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.joint_plan import joint_request, managed
from hami_scheduler.selection.plan import Planner
from hami_scheduler.selection.resolvable import EmptyNodes, Split, split_unresolvable
from hami_scheduler.selection.select import record_of, screen
from hami_scheduler.settings import FilterMode
from hami_scheduler.wire import ExtenderArgs

__all__ = [
    "MISSING_POD",
    "FilterReply",
    "FilterService",
    "Synced",
]

log = structlog.get_logger("hami_scheduler")

MISSING_POD: Final = "extender args missing pod"
_NO_NODES: Final = "extender args carry neither NodeNames nor Nodes"
_MAX_PRIORITY: Final = 10


class Synced(Protocol):
    """The watches feeding the cache: whether each has completed its first list."""

    @property
    def synced(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class FilterReply:
    node_names: Sequence[str] | None = None
    nodes: Sequence[JsonObject] | None = None
    failed: Mapping[str, str] | None = None
    """``FailedNodes``: refused, but evicting pods could make room (preemption candidates)."""
    unresolvable: Mapping[str, str] | None = None
    """``FailedAndUnresolvableNodes``: no eviction could help (``None`` when there is none)."""
    error: str = ""


class _Refused(Exception):  # noqa: N818 - control flow inside this module
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def _reply(names: Sequence[str] | None, split: Split) -> FilterReply:
    return FilterReply(
        node_names=names, failed=split.failed, unresolvable=split.unresolvable or None
    )


class FilterService:
    """Answers ``/filter`` and ``/prioritize`` (see the module docstring)."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        planner: Planner,
        events: SchedulerEvents,
        metrics: SchedulerMetrics,
        mode: FilterMode = "single",
        leadership: LeaderView | None = None,
        watches: Synced | None = None,
        pending: PendingBinds | None = None,
        clock: Callable[[], float] = time.time,
        verdicts: Verdicts | None = None,
    ) -> None:
        """``leadership``: who may decide (none: this process always does); ``watches``: what
        the cache is fed by (none: it counts as synced); ``pending``: where decisions wait for
        their bind (shared with the :class:`~hami_scheduler.bind.service.BindService`);
        ``verdicts``: where each pod's last verdict is kept for the GPU map (none: nowhere)."""
        self._cache = cache
        self._planner = planner
        self.pending = pending if pending is not None else PendingBinds(cache)
        self._events = events
        self._metrics = metrics
        self._mode = mode
        self._leadership = leadership or AlwaysLeader()
        self._watches = watches
        self._clock = clock
        self._verdicts = verdicts
        self.memo = SelectMemo()
        self._empties = EmptyNodes()

    # -- filter ------------------------------------------------------------------------------
    async def filter(self, args: ExtenderArgs) -> FilterReply:
        started = time.perf_counter()
        pod = PodView(args.pod or {})
        try:
            reply, outcome = await self._filter(args, pod)
        except _Refused as refused:
            reply, outcome = FilterReply(error=refused.message), refused.reason
            log.info("filter_error", pod=pod.key, error=refused.message)
            if args.pod is not None:
                self._events.filter_error(pod, refused.message)
                if refused.reason in ("bad_pod", "bad_annotation") and not pod.node_name:
                    self._record(pod, len(args.node_names or ()), 0, None, {}, refused.message)
        elapsed = time.perf_counter() - started
        status = "error" if reply.error else outcome
        self._metrics.observe("filter", status, elapsed, "" if status == outcome else outcome)
        return reply

    def _parse(self, args: ExtenderArgs) -> tuple[PodDeviceRequests, KoordRequests]:
        if args.pod is None:
            raise _Refused(MISSING_POD, "missing_pod")
        try:
            return self._planner.requests(args.pod), koord_requests(args.pod)
        except ProtocolError as exc:
            raise _Refused(f"cannot read the pod's device requests: {exc}", "bad_pod") from None

    def _joint(self, pod: PodView, plan: PodPlan, koord: KoordRequests) -> JointRequest:
        try:
            return joint_request(pod, plan, koord)
        except ProtocolError as exc:
            raise _Refused(str(exc), "bad_annotation") from None

    def _plan(self, pod: PodView, requests: PodDeviceRequests, *, quota: bool) -> PodPlan:
        try:
            return self._planner.plan(
                pod,
                requests,
                quota=self._cache.quota_view if quota else None,
                sgpu_state=self._cache.sgpu_state,
            )
        except ProtocolError as exc:
            raise _Refused(str(exc), "bad_annotation") from None

    async def _filter(self, args: ExtenderArgs, pod: PodView) -> tuple[FilterReply, str]:
        requests, koord = self._parse(args)
        if not managed(requests, koord):
            return FilterReply(node_names=args.node_names, nodes=args.nodes, failed={}), "ignored"
        # Policy and Koordinator annotations are checked first, so an invalid one is the answer
        # everywhere.
        joint = self._joint(pod, self._plan(pod, requests, quota=False), koord)
        if args.nodes is not None:
            return self._simulate(args.nodes, pod, requests, joint), "simulated"
        if args.node_names is None:
            raise _Refused(_NO_NODES, "bad_request")
        if not self._leadership.is_leader:
            raise _Refused(not_leader_message(self._leadership.leader), "not_leader")
        if self._watches is not None and not self._watches.synced:
            raise _Refused("scheduler caches have not synced yet", "not_synced")
        if pod.node_name:
            # kube-scheduler never filters a bound pod; releasing what it holds would be wrong.
            message = f"pod {pod.key} is already bound to node {pod.node_name}"
            raise _Refused(message, "bad_pod")
        if self._mode == "single":
            if not (pod.uid and pod.name and pod.namespace):
                raise _Refused("extender args pod lacks metadata.uid/name/namespace", "bad_pod")
            # A pod filtered again gave up its previous placement (HAMi drops it too).
            self.pending.drop(pod.uid)
            self._cache.release(pod.uid)
        plan = self._plan(pod, requests, quota=True)
        refused, candidates = screen(self._cache, args.node_names, plan, joint)
        fleet = self._cache.fleet_for(pod.uid, pod.priority)
        selection = choose(plan, joint, fleet, candidates, memo=self.memo)
        failed = {**refused, **resolved(selection.failed)}
        self._metrics.reject(failed.values())
        self._record(pod, len(args.node_names), len(selection.fitting), selection.node, failed)
        if selection.node is None or selection.decision is None:
            # kube-scheduler preempts only for a pod no node fits: only then does the split
            # matter (it costs a decision on an empty copy of each refused node).
            split = split_unresolvable(
                failed, plan, joint, fleet, refused=refused, empties=self._empties
            )
            self._events.filtering_failed(pod, failed)
            log.info(
                "filter_unschedulable",
                pod=pod.key,
                failed=len(split.failed),
                unresolvable=len(split.unresolvable),
            )
            return _reply(None, split), "unschedulable"
        if self._mode == "all":
            fitting = list(selection.fitting)
            if pod.uid:
                self.pending.put(pod, None)
            self._events.filtering_succeeded(pod, selection.node, selection.fitting, len(failed))
            log.info("filter_fitting", pod=pod.key, fitting=len(fitting), failed=len(failed))
            return _reply(fitting, Split(failed)), "scheduled"
        record = record_of(
            selection.decision,
            plan,
            joint,
            pod=pod,
            cache=self._cache,
            now_unix=int(self._clock()),
            device_config=self._planner.device_config,
        )
        self._cache.assume(pod.uid, pod.name, record.holding)
        self.pending.put(pod, record)
        self._events.filtering_succeeded(pod, selection.node, selection.fitting, len(failed))
        log.info(
            "filter_scheduled",
            pod=pod.key,
            node=selection.node,
            fitting=len(selection.fitting),
            failed=len(failed),
        )
        return _reply([selection.node], Split(failed)), "scheduled"

    def _record(  # noqa: PLR0917 - one private call shape, two call sites
        self,
        pod: PodView,
        nodes: int,
        fitting: int,
        chosen: str | None,
        failed: Mapping[str, str],
        error: str = "",
    ) -> None:
        """Keep this filter's verdict for the GPU map (O(refused nodes), one pass)."""
        if self._verdicts is None or not pod.uid:
            return
        verdict = Verdict(
            pod.namespace,
            pod.name,
            self._clock(),
            nodes,
            fitting,
            chosen,
            group_reasons(failed),
            error,
            tuple(set(failed.values())),
        )
        self._verdicts.record(pod.uid, verdict)

    def _simulate(
        self,
        node_objects: Sequence[JsonObject],
        pod: PodView,
        requests: PodDeviceRequests,
        joint: JointRequest,
    ) -> FilterReply:
        plan = self._plan(pod, requests, quota=True)
        given = self._cache.simulated(node_objects, exclude_uid=pod.uid, words=plan.vendors)
        selection = choose(plan, joint, given.fleet, list(given.objects))
        failed = {**given.failed, **resolved(selection.failed)}
        if selection.node is None:
            split = split_unresolvable(failed, plan, joint, given.fleet, refused=given.failed)
            return FilterReply(
                nodes=None, failed=split.failed, unresolvable=split.unresolvable or None
            )
        picked = list(selection.fitting) if self._mode == "all" else [selection.node]
        return FilterReply(nodes=[given.objects[name] for name in picked], failed=failed)

    # -- prioritize --------------------------------------------------------------------------
    def prioritize(self, args: ExtenderArgs) -> list[tuple[str, int]]:
        """Scores 0-10 by the pod's node policy over the nodes' usage scores."""
        started = time.perf_counter()
        names = list(args.node_names or [])
        given = self._cache.simulated(args.nodes or ())
        names += [NodeView(obj).name for obj in args.nodes or ()]
        scores = self._scores(args, names, given.fleet.gpus)
        self._metrics.observe("prioritize", "scored", time.perf_counter() - started)
        return scores

    def _scores(
        self, args: ExtenderArgs, names: list[str], transient: Mapping[str, NodeUsage]
    ) -> list[tuple[str, int]]:
        if args.pod is None:
            return [(name, 0) for name in names]
        pod = PodView(args.pod)
        try:
            policy = parse_pod_policy(
                pod.annotations, default_node_policy=self._planner.node_policy
            )
        except ProtocolError:
            return [(name, 0) for name in names]
        raw: dict[str, float] = {}
        for name in names:
            node = transient.get(name) or self._cache.nodes.get(name)
            if node is not None:
                raw[name] = node.base_score
        if not raw:
            return [(name, 0) for name in names]
        low, high = min(raw.values()), max(raw.values())
        spread = policy.node_policy == "spread"
        result: list[tuple[str, int]] = []
        for name in names:
            score = raw.get(name)
            if score is None:
                result.append((name, 0))
            elif high == low:
                result.append((name, _MAX_PRIORITY))
            else:
                share = (high - score) / (high - low) if spread else (score - low) / (high - low)
                result.append((name, round(_MAX_PRIORITY * share)))
        return result
