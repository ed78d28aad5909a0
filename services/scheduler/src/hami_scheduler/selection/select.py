"""Which core selection a pod goes through, over the cache: HAMi's fast path or the joint one.

:func:`choose` (the filter):

* a **plain** request (no NICs, no gpu hint) on candidates where no pod holds an exclusive GPU
  claim → :func:`~hami_scheduler.core.select_node`, unchanged: quick verdicts, the per-node memo;
* a plain request where some candidates carry GPU claims → those go through
  :func:`~hami_scheduler.core.joint.decide.select_joint` (HAMi's fit on their unclaimed GPUs), the
  rest
  through ``select_node``; the better of the two finalists wins by the node policy (ties: the
  earlier candidate), so one claimed node does not slow down the whole cluster;
* anything else → ``select_joint`` over the candidates.  A pod asking for NICs refuses nodes
  without any at once (``Insufficient rdma devices: the node has no RDMA NIC``, the core's text);
  a pod asking for NICs only may land on a node that registers no GPU.

:func:`decide_on` is the one-node counterpart (``--filter-mode all`` binds), and
:func:`record_of` turns either kind of decision into the patch and the holding to assume.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import (
    FailureReasons,
    NodeDecision,
    NodeUsage,
    PodPlan,
    SelectMemo,
    build_node_usage,
    decide_node,
    select_node,
)
from hami_scheduler.core import reasons as why
from hami_scheduler.core.joint.decide import JointDecision, decide_joint, select_joint
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nicfit import INSUFFICIENT_RDMA
from hami_scheduler.core.joint.nics import NicUsage, build_nic_usage, nic_layout
from hami_scheduler.selection.joint_plan import joint_record
from hami_scheduler.selection.plan import DecisionRecord, PodIdentity, decision_record

__all__ = ["NO_NIC_REASON", "Choice", "choose", "decide_on", "record_of", "resolved"]

NO_NIC_REASON: Final = f"{INSUFFICIENT_RDMA}: the node has no RDMA NIC"


@dataclass(frozen=True, slots=True)
class Choice:
    """The outcome of :func:`choose`, as :class:`~hami_scheduler.core.Selection`."""

    node: str | None
    decision: NodeDecision | JointDecision | None
    fitting: Mapping[str, float] = field(default_factory=dict)
    failed: Mapping[str, str] = field(default_factory=dict)


def resolved(failed: Mapping[str, str]) -> Mapping[str, str]:
    """``failed`` as a plain mapping (a lazy :class:`FailureReasons` materialised)."""
    return failed.resolved() if isinstance(failed, FailureReasons) else failed


def choose(
    plan: PodPlan,
    request: JointRequest,
    cache: SchedulerCache,
    candidates: Sequence[str],
    *,
    memo: SelectMemo | None = None,
) -> Choice:
    """Select a node for the pod among ``candidates`` (see the module doc)."""
    if request.plain:
        claimed = cache.gpu_claimed
        hit = [name for name in candidates if name in claimed] if claimed else []
        if not hit:
            selection = select_node(plan, cache.nodes, candidates=candidates, memo=memo)
            return Choice(selection.node, selection.decision, selection.fitting, selection.failed)
        return _mixed(plan, request, cache, candidates, hit=hit, memo=memo)
    return _joint(plan, request, cache, candidates)


def _mixed(
    plan: PodPlan,
    request: JointRequest,
    cache: SchedulerCache,
    candidates: Sequence[str],
    *,
    hit: list[str],
    memo: SelectMemo | None,
) -> Choice:
    claimed = set(hit)
    others = [name for name in candidates if name not in claimed]
    plain = select_node(plan, cache.nodes, candidates=others, memo=memo)
    joint = select_joint(plan, request, cache.nodes, cache.nics, candidates=hit)
    fitting = {**plain.fitting, **joint.fitting}
    failed = {**resolved(plain.failed), **joint.failed}
    finalists: list[tuple[str, NodeDecision | JointDecision]] = []
    if plain.node is not None and plain.decision is not None:
        finalists.append((plain.node, plain.decision))
    if joint.node is not None and joint.decision is not None:
        finalists.append((joint.node, joint.decision))
    if not finalists:
        return Choice(None, None, fitting, failed)
    rank = {name: index for index, name in enumerate(candidates)}
    sign = 1 if plan.node_policy == "spread" else -1
    node, decision = min(finalists, key=lambda item: (sign * fitting[item[0]], rank[item[0]]))
    return Choice(node, decision, fitting, failed)


def _joint(
    plan: PodPlan, request: JointRequest, cache: SchedulerCache, candidates: Sequence[str]
) -> Choice:
    nodes: dict[str, NodeUsage] = {}
    failed: dict[str, str] = {}
    for name in candidates:
        node = _node(cache, name, plan)
        if node is None:
            failed[name] = why.NODE_UNREGISTERED
        elif request.wants_nics and not _has_nics(cache.nics.get(name)):
            failed[name] = NO_NIC_REASON
        else:
            nodes[name] = node
    selection = select_joint(plan, request, nodes, cache.nics, candidates=list(nodes))
    failed.update(selection.failed)
    return Choice(selection.node, selection.decision, selection.fitting, failed)


def _has_nics(usage: NicUsage | None) -> bool:
    return usage is not None and bool(usage.layout.nics)


def _node(cache: SchedulerCache, name: str, plan: PodPlan) -> NodeUsage | None:
    """The node's GPU usage; a seen node without usable GPUs can still serve a pod asking
    for none (NICs only)."""
    node = cache.nodes.get(name)
    if node is None and not plan.requests.has_requests and cache.facts(name) is not None:
        return build_node_usage(name, {})
    return node


def _nics(cache: SchedulerCache, name: str) -> NicUsage:
    return cache.nics.get(name) or build_nic_usage(nic_layout(name))


def decide_on(
    plan: PodPlan, request: JointRequest, cache: SchedulerCache, name: str
) -> NodeDecision | JointDecision | None:
    """The decision for one node (``None``: the node is not registered)."""
    node = _node(cache, name, plan)
    if node is None:
        return None
    if request.plain and name not in cache.gpu_claimed:
        return decide_node(node, plan)
    return decide_joint(node, _nics(cache, name), plan, request)


def record_of(
    decision: NodeDecision | JointDecision,
    plan: PodPlan,
    request: JointRequest,
    *,
    pod: PodIdentity,
    cache: SchedulerCache,
    now_unix: int,
) -> DecisionRecord:
    """The patch and the holding to assume for a fitting decision."""
    if isinstance(decision, NodeDecision):
        return decision_record(
            decision, plan, namespace=pod.namespace, vendors=cache.vendors, now_unix=now_unix
        )
    name = decision.node
    node = _node(cache, name, plan) or build_node_usage(name, {})
    return joint_record(
        decision,
        plan,
        request,
        pod=pod,
        node=node,
        layout=_nics(cache, name).layout,
        vendors=cache.vendors,
        now_unix=now_unix,
    )
