"""The scheduling cycle's Filter phase and the per-node accounting it reads.

From ``pkg/scheduler/schedule_one.go`` (``findNodesThatFitPod``, ``findNodesThatPassExtenders``)
and ``pkg/scheduler/framework/runtime/framework.go`` (``RunFilterPluginsWithNominatedPods``):

- :class:`Placements`: the pods bound or assumed to each node and what they request (a pod
  counts until its DELETED event or a terminal phase);
- the in-tree filters run with the pods nominated to the node with at least the pod's priority
  counted there, and, when there were some, again without them; each rejection keeps its code;
- each interested extender's filter verb then runs on the survivors: ``FailedNodes`` are
  Unschedulable, ``FailedAndUnresolvableNodes`` UnschedulableAndUnresolvable (winning over
  ``FailedNodes``); a node left out without either gets no status.  A non-ignorable extender's
  error ends the cycle (:class:`~.extender_wire.ExtenderError`, an Error: no preemption).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog

from hami_kube.objects import NodeView, PodView
from hami_kubesim.scheduler.config import Profile
from hami_kubesim.scheduler.dynamic_resources import DraAttempt, DynamicResources
from hami_kubesim.scheduler.extender import HttpExtender
from hami_kubesim.scheduler.extender_wire import ExtenderError
from hami_kubesim.scheduler.nominator import Nominator
from hami_kubesim.scheduler.predicates import (
    RequestedOnNode,
    ResourceParseError,
    filter_node,
    pod_requests,
)
from hami_kubesim.scheduler.preemption.evaluator import NodeSnapshot
from hami_kubesim.scheduler.preemption.selection import PlacedPod
from hami_kubesim.scheduler.statuses import Code, NodeStatus, unresolvable, unschedulable

__all__ = ["Attempt", "Filtering", "Placements", "record_extender_verdicts", "requests_quietly"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Attempt:
    """The pod a cycle places, its effective request and the profile it is scheduled under."""

    pod: PodView
    requests: dict[str, int]
    profile: Profile
    dra: DraAttempt | None = None
    """The pod's claims when it has some (the DynamicResources plugin runs)."""


class Placements:
    """Pods bound (seen by the watch) or assumed (binding in flight), by key: node and pod."""

    def __init__(self) -> None:
        self.bound: dict[str, tuple[str, PlacedPod]] = {}
        self.assumed: dict[str, tuple[str, PlacedPod]] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.bound or key in self.assumed

    def by_node(self) -> dict[str, list[PlacedPod]]:
        pods: dict[str, list[PlacedPod]] = {}
        for node, placed in [*self.bound.values(), *self.assumed.values()]:
            pods.setdefault(node, []).append(placed)
        return pods

    def usage_by_node(self) -> dict[str, RequestedOnNode]:
        return {node: usage_of(pods) for node, pods in self.by_node().items()}


def usage_of(pods: Sequence[PlacedPod]) -> RequestedOnNode:
    usage = RequestedOnNode()
    for placed in pods:
        usage = usage.plus(placed.requests)
    return usage


class Filtering:
    """The Filter phase over ``placements``, with ``nominator``'s nominations and
    ``extenders``' filter verbs (see the module doc)."""

    def __init__(
        self,
        extenders: Sequence[HttpExtender],
        nominator: Nominator,
        placements: Placements,
        dra: DynamicResources | None = None,
    ) -> None:
        self._extenders = list(extenders)
        self._nominator = nominator
        self._placements = placements
        self._dra = dra

    async def run(
        self, attempt: Attempt, nodes: list[NodeView]
    ) -> tuple[list[NodeView], dict[str, NodeStatus]]:
        """The nodes that fit the pod, and the statuses of those that do not.

        Raises :class:`~hami_kubesim.dra.AllocatorError` (the DRA allocator cannot run) and
        :class:`~.extender_wire.ExtenderError`."""
        pod = attempt.pod
        usage = self._placements.usage_by_node()
        statuses: dict[str, NodeStatus] = {}
        feasible: list[NodeView] = []
        for node in nodes:
            status = self.in_tree(attempt, node, usage.get(node.name, RequestedOnNode()))
            if status is None and attempt.dra is not None and self._dra is not None:
                # DynamicResources comes last among kube-scheduler's default Filter plugins.
                status = self._dra.filter(attempt.dra, node)
            if status is None:
                feasible.append(node)
            else:
                statuses[node.name] = status
        for extender in self._extenders:
            if not feasible:
                break
            if not extender.config.filter_verb or not extender.is_interested(pod.raw):
                continue
            try:
                outcome = await extender.filter(pod.raw, [node.raw for node in feasible])
            except ExtenderError as exc:
                if not extender.config.ignorable:
                    raise
                log.warning(
                    "ignorable extender filter failed", extender=extender.url, error=str(exc)
                )
                continue
            record_extender_verdicts(statuses, outcome.failed, outcome.failed_unresolvable)
            by_name = {node.name: node for node in feasible}
            feasible = [by_name[name] for name in outcome.survivors]
        return feasible, statuses

    def in_tree(
        self, attempt: Attempt, node: NodeView, usage: RequestedOnNode
    ) -> NodeStatus | None:
        """``RunFilterPluginsWithNominatedPods``: first with the pods nominated to ``node`` that
        the pod must make room for (unless already placed), then (when there were some)
        without them."""
        reserved = [
            n
            for n in self._nominator.reserving_for(attempt.pod, node.name)
            if n.pod.key not in self._placements
        ]
        with_nominated = usage
        for nomination in reserved:
            with_nominated = with_nominated.plus(nomination.requests)
        status = _filters(attempt, node, with_nominated)
        if status is None and reserved:
            status = _filters(attempt, node, usage)
        return status

    def snapshot(self, attempt: Attempt, nodes: list[NodeView]) -> NodeSnapshot:
        """What preemption's dry run sees: the nodes, their pods, and the pod's in-tree filters
        on a node holding exactly the pods it is given."""
        by_name = {node.name: node for node in nodes}

        def check(node: str, on_node: Sequence[PlacedPod]) -> NodeStatus | None:
            return self.in_tree(attempt, by_name[node], usage_of(on_node))

        pods = self._placements.by_node()
        return NodeSnapshot(
            nodes=tuple(by_name), pods={n: tuple(p) for n, p in pods.items()}, check=check
        )


def _filters(attempt: Attempt, node: NodeView, usage: RequestedOnNode) -> NodeStatus | None:
    try:
        return filter_node(
            attempt.pod,
            attempt.requests,
            node,
            usage,
            ignored_resources=attempt.profile.ignored_resources,
            ignored_resource_groups=attempt.profile.ignored_resource_groups,
        )
    except ResourceParseError as exc:
        log.warning(
            "node has an invalid allocatable", node=node.name, where=exc.where, value=exc.value
        )
        return unresolvable("node(s) had invalid allocatable resources")


def record_extender_verdicts(
    statuses: dict[str, NodeStatus], failed: Mapping[str, str], unresolvable_: Mapping[str, str]
) -> None:
    """``findNodesThatPassExtenders``: ``FailedAndUnresolvableNodes`` make a node
    UnschedulableAndUnresolvable (and win over ``FailedNodes``), ``FailedNodes`` Unschedulable;
    reasons add to those the node already has."""
    for node, reason in unresolvable_.items():
        known = statuses.get(node)
        statuses[node] = (
            unresolvable(reason)
            if known is None
            else known.with_reason(reason, code=Code.UNRESOLVABLE)
        )
    for node, reason in failed.items():
        if node in unresolvable_:
            continue
        known = statuses.get(node)
        statuses[node] = unschedulable(reason) if known is None else known.with_reason(reason)


def requests_quietly(pod: PodView, what: str) -> dict[str, int]:
    """The pod's request; ``{}`` (logged) when it does not parse."""
    try:
        return pod_requests(pod)
    except ResourceParseError as exc:
        log.warning(
            f"{what} pod has an invalid request", pod=pod.key, where=exc.where, value=exc.value
        )
        return {}
