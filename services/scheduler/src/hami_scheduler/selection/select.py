"""What the filter and bind share around the selection rule
(:mod:`hami_scheduler.core.joint.route`): the cache's own refusals, and the record of a decision.

* :func:`node_refusal` — why a node the cache marks troubled cannot take the pod, before any
  device is looked at: a malformed register annotation or a vendor that stopped answering the
  handshake (for the vendors the pod asks), an unreadable ``hami.io/node-rdma-register`` (for a
  pod asking for NICs);
* :func:`screen` — the candidates left once those refusals are made (the filter and the GPU
  map's fit probe);
* :func:`record_of` — either kind of decision as the annotations the Binding carries and the
  holding to assume;
* :func:`hold_planner` — how the cache plans a nominated preemptor to hold devices for it
  (:mod:`hami_scheduler.cache.nominated`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_kube.objects import PodView
from hami_protocol.config.device import DeviceConfig
from hami_protocol.errors import ProtocolError
from hami_scheduler.cache.nominated import HoldPlanner
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import NodeDecision, PodPlan, build_node_usage
from hami_scheduler.core.joint.decide import JointDecision
from hami_scheduler.core.joint.hints import JointRequest, koord_requests
from hami_scheduler.core.joint.route import Fleet, nics_of
from hami_scheduler.selection.joint_plan import joint_record, joint_request, managed
from hami_scheduler.selection.plan import DecisionRecord, Planner, decision_record

__all__ = ["hold_planner", "node_refusal", "record_of", "screen"]


def hold_planner(planner: Planner, cache: SchedulerCache) -> HoldPlanner:
    """A nominated pod's plan as its own filter makes it, without the namespace quota (its
    filter judged that); ``None`` for a pod asking no managed device or not readable."""

    def plan_of(pod: PodView) -> tuple[PodPlan, JointRequest] | None:
        try:
            requests, koord = planner.requests(pod.raw), koord_requests(pod.raw)
            if not managed(requests, koord):
                return None
            plan = planner.plan(pod, requests, sgpu_state=cache.sgpu_state)
            return plan, joint_request(pod, plan, koord)
        except ProtocolError:
            return None

    return plan_of


def node_refusal(
    cache: SchedulerCache, name: str, plan: PodPlan, request: JointRequest
) -> str | None:
    """Why the cache refuses ``name`` for this pod beyond its devices (see the module doc)."""
    if name not in cache.troubled:
        return None
    problem = cache.node_problem(name, plan.vendors)
    if problem is None and request.wants_nics:
        problem = cache.nic_problem(name)
    return problem


def screen(
    cache: SchedulerCache, names: Sequence[str], plan: PodPlan, request: JointRequest
) -> tuple[dict[str, str], list[str]]:
    """The candidates the core should judge, and the troubled ones the cache refuses with their
    problem (:func:`node_refusal`); O(1) extra when no node is troubled."""
    failed: dict[str, str] = {}
    if not cache.troubled:
        return failed, list(names)
    candidates: list[str] = []
    for name in names:
        problem = node_refusal(cache, name, plan, request)
        if problem is None:
            candidates.append(name)
        else:
            failed[name] = problem
    return failed, candidates


def record_of(
    decision: NodeDecision | JointDecision,
    plan: PodPlan,
    request: JointRequest,
    *,
    pod: PodView,
    cache: SchedulerCache,
    now_unix: int,
    device_config: DeviceConfig | None = None,
) -> DecisionRecord:
    """The annotations and the holding to assume for a fitting decision."""
    if isinstance(decision, NodeDecision):
        return decision_record(
            decision,
            plan,
            namespace=pod.namespace,
            vendors=cache.vendors,
            now_unix=now_unix,
            name=pod.name,
            pod=pod,
            node_usage=cache.nodes.get(decision.node),
            device_config=device_config,
        )
    fleet: Fleet = cache.fleet
    name = decision.node
    return joint_record(
        decision,
        plan,
        request,
        pod=pod,
        node=fleet.gpus.get(name) or build_node_usage(name, {}),
        layout=nics_of(fleet, name).layout,
        vendors=cache.vendors,
        now_unix=now_unix,
    )
