"""The one rule that sends a pod through HAMi's fast path or through the joint GPU + NIC decision,
and the two ways it is applied: selecting among candidates and deciding on one node.

**The rule** (:func:`takes_joint_path`), judged per node: a pod goes through
:func:`~hami_scheduler.core.joint.decide.decide_joint` on a node when it asks for anything
beyond HAMi's GPU fit (NICs, a gpu ``PCIeLevel`` hint, a gpu ``requiredTopologyScope``) or when
another pod holds an exclusive PCIe claim on that node's GPUs (HAMi's fit then runs on the
unclaimed GPUs); otherwise through HAMi's :func:`~hami_scheduler.core.select_node` /
:func:`~hami_scheduler.core.decide_node`, with their quick verdicts and per-node memo.

The filter (candidate names over the cache), the autoscaler's simulation (full Node objects in
the request) and ``--filter-mode all`` bind (the node kube-scheduler chose) all decide through
:func:`choose` or :func:`decide_on` over a :class:`Fleet`, so a pod goes the same way on a node
whichever of them asks.

:func:`choose` sends each candidate the way the rule says.  When both ways have candidates
(a plain pod, some nodes with GPU claims) the better of the two finalists wins by the node
policy (ties: the earlier candidate), so one claimed node does not slow the whole cluster down.
On the joint path a pod asking for NICs refuses a node without any at once (:data:`NO_NIC_REASON`,
the core's text), and a pod asking for NICs only may land on a node that registers no GPU.

Cost: a plain pod on a cluster without GPU claims pays nothing for the rule; otherwise
O(candidates) set lookups, plus a full joint decision per joint candidate (bounded per node).
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from hami_scheduler.core import reasons as why
from hami_scheduler.core.decide import NodeDecision, decide_node
from hami_scheduler.core.joint.decide import JointDecision, decide_joint, select_joint
from hami_scheduler.core.joint.hints import JointRequest
from hami_scheduler.core.joint.nicfit import INSUFFICIENT_RDMA
from hami_scheduler.core.joint.nics import NicUsage, build_nic_usage, nic_layout
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.select import (
    FailureReasons,
    QuickPlans,
    Selection,
    SelectMemo,
    node_fits,
    select_node,
)
from hami_scheduler.core.usage.apply import build_node_usage
from hami_scheduler.core.usage.node import NodeUsage

__all__ = [
    "NO_NIC_REASON",
    "Choice",
    "Fleet",
    "choose",
    "decide_on",
    "fits_on",
    "nics_of",
    "resolved",
    "takes_joint_path",
]

NO_NIC_REASON: Final = f"{INSUFFICIENT_RDMA}: the node has no RDMA NIC"


@dataclass(frozen=True, slots=True)
class Fleet:
    """The nodes a decision reads (the cache's, or those a request brought)."""

    gpus: Mapping[str, NodeUsage]
    """Node → usage of its usable GPUs (registered nodes only)."""
    nics: Mapping[str, NicUsage]
    """Node → its NICs and claims (nodes with a NIC layout only)."""
    gpu_claimed: Collection[str]
    """Nodes where some pod holds an exclusive PCIe claim on GPUs."""
    seen: Container[str]
    """Every node known, registered or not."""


Choice = Selection[NodeDecision | JointDecision]
"""The outcome of :func:`choose`: HAMi's decision or a joint one.  A type only: build a
:class:`Selection` (calling a parametrised slotted dataclass fails in Python 3.11)."""


def takes_joint_path(request: JointRequest, *, gpu_claimed: bool) -> bool:
    """The rule (module docstring): whether the pod goes through the joint decision on a node
    where, per ``gpu_claimed``, some pod holds an exclusive claim on GPUs."""
    return gpu_claimed or not request.plain


def resolved(failed: Mapping[str, str]) -> Mapping[str, str]:
    """``failed`` as a plain mapping (a lazy :class:`FailureReasons` materialised)."""
    return failed.resolved() if isinstance(failed, FailureReasons) else failed


def nics_of(fleet: Fleet, name: str) -> NicUsage:
    """The node's NICs; a node without a NIC layout has none (and its GPUs are scopes of their
    own)."""
    return fleet.nics.get(name) or build_nic_usage(nic_layout(name))


def _joint_node(plan: PodPlan, request: JointRequest, fleet: Fleet, name: str) -> NodeUsage | str:
    """The node's GPU usage for the joint decision, or why it is refused before deciding."""
    node = fleet.gpus.get(name)
    if node is None:
        # A seen node without usable GPUs can still serve a pod asking for none (NICs only).
        if plan.requests.has_requests or name not in fleet.seen:
            return why.NODE_UNREGISTERED
        node = build_node_usage(name, {})
    if request.wants_nics:
        usage = fleet.nics.get(name)
        if usage is None or not usage.layout.nics:
            return NO_NIC_REASON
    return node


def decide_on(
    plan: PodPlan, request: JointRequest, fleet: Fleet, name: str
) -> NodeDecision | JointDecision | str:
    """The decision for one node; a text when the node is refused before deciding (unregistered,
    or without NICs for a pod asking for some)."""
    if not takes_joint_path(request, gpu_claimed=name in fleet.gpu_claimed):
        node = fleet.gpus.get(name)
        return why.NODE_UNREGISTERED if node is None else decide_node(node, plan)
    joint = _joint_node(plan, request, fleet, name)
    if isinstance(joint, str):
        return joint
    return decide_joint(joint, nics_of(fleet, name), plan, request)


def fits_on(
    plan: PodPlan, request: JointRequest, fleet: Fleet, name: str, quick: QuickPlans
) -> bool:
    """Whether the pod fits on one node: :func:`decide_on`'s answer, reached as :func:`choose`
    reaches it — on HAMi's path the quick verdict where it is certain (``quick``:
    :func:`~hami_scheduler.core.select.quick_plans` of ``plan``), else the full decision."""
    if not takes_joint_path(request, gpu_claimed=name in fleet.gpu_claimed):
        node = fleet.gpus.get(name)
        return node is not None and node_fits(node, plan, quick)
    decision = decide_on(plan, request, fleet, name)
    return not isinstance(decision, str) and decision.fits


def choose(
    plan: PodPlan,
    request: JointRequest,
    fleet: Fleet,
    candidates: Sequence[str],
    *,
    memo: SelectMemo | None = None,
) -> Choice:
    """Select a node for the pod among ``candidates`` (see the module docstring)."""
    claimed = fleet.gpu_claimed
    if request.plain and not claimed:
        # The rule sends every node to HAMi's path: skip asking it per node.
        joint: list[str] = []
    else:
        joint = [n for n in candidates if takes_joint_path(request, gpu_claimed=n in claimed)]
    if not joint:
        selection = select_node(plan, fleet.gpus, candidates=candidates, memo=memo)
        return Selection(selection.node, selection.decision, selection.fitting, selection.failed)
    if len(joint) == len(candidates):
        return _select_joint(plan, request, fleet, candidates)
    routed = set(joint)
    others = [name for name in candidates if name not in routed]
    plain = select_node(plan, fleet.gpus, candidates=others, memo=memo)
    joined = _select_joint(plan, request, fleet, joint)
    fitting = {**plain.fitting, **joined.fitting}
    failed = {**resolved(plain.failed), **joined.failed}
    finalists: list[tuple[str, NodeDecision | JointDecision]] = []
    if plain.node is not None and plain.decision is not None:
        finalists.append((plain.node, plain.decision))
    if joined.node is not None and joined.decision is not None:
        finalists.append((joined.node, joined.decision))
    if not finalists:
        return Selection(None, None, fitting, failed)
    rank = {name: index for index, name in enumerate(candidates)}
    sign = 1 if plan.node_policy == "spread" else -1
    node, decision = min(finalists, key=lambda item: (sign * fitting[item[0]], rank[item[0]]))
    return Selection(node, decision, fitting, failed)


def _select_joint(
    plan: PodPlan, request: JointRequest, fleet: Fleet, candidates: Sequence[str]
) -> Choice:
    nodes: dict[str, NodeUsage] = {}
    failed: dict[str, str] = {}
    for name in candidates:
        node = _joint_node(plan, request, fleet, name)
        if isinstance(node, str):
            failed[name] = node
        else:
            nodes[name] = node
    selection = select_joint(plan, request, nodes, fleet.nics, candidates=list(nodes))
    failed.update(selection.failed)
    return Selection(selection.node, selection.decision, selection.fitting, failed)
