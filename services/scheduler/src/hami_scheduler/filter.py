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
   assumed, the caches untouched;
4. not the leader → ``Error: "not the leader; leader is <holder>"``; caches not synced yet →
   ``Error``;
5. ``--filter-mode single`` (HAMi's): drop the pod's previous reservation, select among the
   candidates (``node unregistered`` for unknown ones, the annotation or handshake problem for
   troubled ones — an unreadable ``hami.io/node-rdma-register`` for pods asking NICs — HAMi's
   reason text for the rest), assume the decision in the cache and write it in one merge patch
   (``hami.io/vgpu-node`` annotation and label, ``hami.io/vgpu-time``, each vendor's
   to-allocate and allocated lists, and for a joint decision the RDMA lists and
   ``scheduling.koordinator.sh/device-allocated``); a failed patch forgets the assumption and
   answers ``Error``.  The reply names the chosen node only.  Which core selection runs is
   :func:`~hami_scheduler.selection.select.choose`'s business: pods without Koordinator requests
   keep HAMi's fast path;
6. ``--filter-mode all``: the reply names every fitting node and writes nothing; prioritize
   scores them and bind decides for the node kube-scheduler picked.

Cost: O(candidates × their devices), never O(pods): the core reads the cached node usage, and
a :class:`~hami_scheduler.core.SelectMemo` reuses per-node answers while a node is unchanged.
Joint pods pay a full joint decision per candidate with NICs (bounded per node).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import structlog

from hami_kube.errors import KubeError
from hami_kube.resources import JsonObject
from hami_protocol.errors import ProtocolError
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import PodDeviceRequests
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import NodeUsage, PodPlan, SelectMemo, select_node
from hami_scheduler.core.joint.decide import select_joint
from hami_scheduler.core.joint.hints import JointRequest, KoordRequests, koord_requests
from hami_scheduler.core.joint.nics import NicUsage
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.joint_plan import joint_request, managed
from hami_scheduler.selection.plan import Planner, PodIdentity, identify
from hami_scheduler.selection.select import choose, record_of, resolved
from hami_scheduler.settings import FilterMode
from hami_scheduler.wire import ExtenderArgs

__all__ = [
    "MISSING_POD",
    "DecisionWriter",
    "FilterReply",
    "FilterService",
    "not_leader_message",
]

log = structlog.get_logger("hami_scheduler")

MISSING_POD: Final = "extender args missing pod"
_NO_NODES: Final = "extender args carry neither NodeNames nor Nodes"
_MAX_PRIORITY: Final = 10


def not_leader_message(leader: str) -> str:
    return f"not the leader; leader is {leader or 'unknown'}"


class DecisionWriter(Protocol):
    """Writes a decision onto the pod (a merge patch of annotations and labels)."""

    async def write(
        self,
        namespace: str,
        name: str,
        *,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None],
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class FilterReply:
    node_names: Sequence[str] | None = None
    nodes: Sequence[JsonObject] | None = None
    failed: Mapping[str, str] | None = None
    error: str = ""


class _Refused(Exception):  # noqa: N818 - control flow inside this module
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class FilterService:
    """Answers ``/filter`` and ``/prioritize`` (see the module docstring)."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        planner: Planner,
        writer: DecisionWriter,
        events: SchedulerEvents,
        metrics: SchedulerMetrics,
        mode: FilterMode = "single",
        is_leader: Callable[[], bool] = lambda: True,
        leader: Callable[[], str] = lambda: "",
        synced: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cache = cache
        self._planner = planner
        self._writer = writer
        self._events = events
        self._metrics = metrics
        self._mode = mode
        self._is_leader = is_leader
        self._leader = leader
        self._synced = synced
        self._clock = clock
        self.memo = SelectMemo()

    # -- filter ------------------------------------------------------------------------------
    async def filter(self, args: ExtenderArgs) -> FilterReply:
        started = time.perf_counter()
        pod = identify(args.pod) if args.pod is not None else PodIdentity()
        try:
            reply, outcome = await self._filter(args, pod)
        except _Refused as refused:
            reply, outcome = FilterReply(error=refused.message), refused.reason
            log.info("filter_error", pod=pod.display, error=refused.message)
            if args.pod is not None:
                self._events.filter_error(pod, refused.message)
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

    def _joint(self, pod: PodIdentity, plan: PodPlan, koord: KoordRequests) -> JointRequest:
        try:
            return joint_request(pod, plan, koord)
        except ProtocolError as exc:
            raise _Refused(str(exc), "bad_annotation") from None

    def _plan(self, pod: PodIdentity, requests: PodDeviceRequests, *, quota: bool) -> PodPlan:
        try:
            return self._planner.plan(
                pod, requests, quota=self._cache.quota_view if quota else None
            )
        except ProtocolError as exc:
            raise _Refused(str(exc), "bad_annotation") from None

    async def _filter(self, args: ExtenderArgs, pod: PodIdentity) -> tuple[FilterReply, str]:
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
        if not self._is_leader():
            raise _Refused(not_leader_message(self._leader()), "not_leader")
        if not self._synced():
            raise _Refused("scheduler caches have not synced yet", "not_synced")
        bound = _bound_node(args.pod)
        if bound:
            # kube-scheduler never filters a bound pod; releasing what it holds would be wrong.
            raise _Refused(f"pod {pod.display} is already bound to node {bound}", "bad_pod")
        if self._mode == "single":
            if not (pod.uid and pod.name and pod.namespace):
                raise _Refused("extender args pod lacks metadata.uid/name/namespace", "bad_pod")
            # A pod filtered again gave up its previous placement (HAMi drops it too).
            self._cache.release(pod.uid)
        plan = self._plan(pod, requests, quota=True)
        failed, candidates = self._screen(args.node_names, plan, joint)
        selection = choose(plan, joint, self._cache, candidates, memo=self.memo)
        failed.update(resolved(selection.failed))
        self._metrics.reject(failed.values())
        if selection.node is None or selection.decision is None:
            self._events.filtering_failed(pod, failed)
            log.info("filter_unschedulable", pod=pod.display, failed=len(failed))
            return FilterReply(node_names=None, failed=failed), "unschedulable"
        if self._mode == "all":
            fitting = list(selection.fitting)
            self._events.filtering_succeeded(pod, selection.node, selection.fitting, len(failed))
            log.info("filter_fitting", pod=pod.display, fitting=len(fitting), failed=len(failed))
            return FilterReply(node_names=fitting, failed=failed), "scheduled"
        record = record_of(
            selection.decision,
            plan,
            joint,
            pod=pod,
            cache=self._cache,
            now_unix=int(self._clock()),
        )
        self._cache.assume(pod.uid, pod.name, record.holding)
        try:
            await self._writer.write(
                pod.namespace, pod.name, annotations=record.annotations, labels=record.labels
            )
        except KubeError as exc:
            self._cache.forget(pod.uid, record.holding.key)
            self._metrics.api_error("patch_pod")
            raise _Refused(f"cannot record the decision on the pod: {exc}", "patch_failed") from exc
        self._events.filtering_succeeded(pod, selection.node, selection.fitting, len(failed))
        log.info(
            "filter_scheduled",
            pod=pod.display,
            node=selection.node,
            fitting=len(selection.fitting),
            failed=len(failed),
        )
        return FilterReply(node_names=[selection.node], failed=failed), "scheduled"

    def _screen(
        self, names: Sequence[str], plan: PodPlan, joint: JointRequest
    ) -> tuple[dict[str, str], list[str]]:
        """Candidates the core should judge, and the troubled ones refused with their problem."""
        failed: dict[str, str] = {}
        troubled = self._cache.troubled
        if not troubled:
            return failed, list(names)
        candidates: list[str] = []
        nics = joint.wants_nics
        for name in names:
            problem = None
            if name in troubled:
                problem = self._cache.node_problem(name, plan.vendors)
                if problem is None and nics:
                    problem = self._cache.nic_problem(name)
            if problem is None:
                candidates.append(name)
            else:
                failed[name] = problem
        return failed, candidates

    def _simulate(
        self,
        node_objects: Sequence[JsonObject],
        pod: PodIdentity,
        requests: PodDeviceRequests,
        joint: JointRequest,
    ) -> FilterReply:
        plan = self._plan(pod, requests, quota=True)
        transient: dict[str, NodeUsage] = {}
        transient_nics: dict[str, NicUsage] = {}
        by_name: dict[str, JsonObject] = {}
        failed: dict[str, str] = {}
        for obj in node_objects:
            usage = self._cache.simulated_node(obj, exclude_uid=pod.uid)
            name = _node_name(obj)
            if isinstance(usage, str):
                failed[name] = usage
                continue
            transient[usage.name] = usage
            by_name[usage.name] = obj
            nics = self._cache.simulated_nics(obj, exclude_uid=pod.uid)
            if nics is not None:
                transient_nics[usage.name] = nics
        if joint.plain and not any(n.gpu_claims for n in transient_nics.values() if n.claims):
            selection = select_node(plan, transient)
            node, fitting = selection.node, selection.fitting
            failed.update(resolved(selection.failed))
        else:
            chosen = select_joint(plan, joint, transient, transient_nics)
            node, fitting = chosen.node, chosen.fitting
            failed.update(chosen.failed)
        if node is None:
            return FilterReply(nodes=None, failed=failed)
        picked = list(fitting) if self._mode == "all" else [node]
        return FilterReply(nodes=[by_name[name] for name in picked], failed=failed)

    # -- prioritize --------------------------------------------------------------------------
    def prioritize(self, args: ExtenderArgs) -> list[tuple[str, int]]:
        """Scores 0-10 by the pod's node policy over the nodes' usage scores."""
        started = time.perf_counter()
        names = list(args.node_names or [])
        transient: dict[str, NodeUsage] = {}
        for obj in args.nodes or ():
            usage = self._cache.simulated_node(obj)
            if not isinstance(usage, str):
                transient[usage.name] = usage
            names.append(_node_name(obj))
        scores = self._scores(args, names, transient)
        self._metrics.observe("prioritize", "scored", time.perf_counter() - started)
        return scores

    def _scores(
        self, args: ExtenderArgs, names: list[str], transient: Mapping[str, NodeUsage]
    ) -> list[tuple[str, int]]:
        if args.pod is None:
            return [(name, 0) for name in names]
        pod = identify(args.pod)
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


def _bound_node(pod: Mapping[str, Any] | None) -> str:
    spec = pod.get("spec") if pod is not None else None
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


def _node_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""
