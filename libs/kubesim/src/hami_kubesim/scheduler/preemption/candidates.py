"""Preemption's candidates: how many nodes to try, the dry run, the extenders' verdicts, the pick.

From ``pkg/scheduler/framework/preemption/preemption.go`` (``DryRunPreemption``,
``callExtenders``, ``pickOneNodeForPreemption``) and ``default_preemption.go``
(``GetOffsetAndNumCandidates``, ``calculateNumCandidates``).

- The nodes tried are those whose filter status is exactly Unschedulable, from a random offset
  (offset 0 without a random source, so runs repeat); the dry run wants
  ``max(percentage% of them, absolute)`` candidates, at most all of them, and stops once it has
  that many with at least one that violates no PodDisruptionBudget.  Non-violating candidates
  come first.
- A node that fits with no victim: ≤1.37 an Error ``expected at least one victim pod on node
  "<node>"``; ≥1.38 (PR #135486) a candidate with an empty victim list when a preempt-capable
  extender is interested in the pod, else UnschedulableAndUnresolvable ``No preemption victims
  found for incoming pod``.
- An extender's reply replaces the candidates.  A node it returns with no victim: ≤1.37 an Error
  (an ignorable extender's such node is dropped); ≥1.38 the same, unless the node came in with no
  victim either (kept for the next extender).  Nodes still without victims after all extenders
  are dropped (≥1.38).
- The pick: fewest PDB violations, then the lowest highest-victim priority, the lowest sum of
  priorities (each + 2^31), the fewest victims, the latest earliest start among the
  highest-priority victims, then the first in order.

Pure; the evaluator (:mod:`.evaluator`) runs it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

from hami_kubesim.scheduler.preemption.selection import NO_VICTIMS, Victims, start_time
from hami_kubesim.scheduler.statuses import Code, NodeStatus, unresolvable

__all__ = [
    "Candidate",
    "DryRun",
    "ZeroVictims",
    "aggregate_errors",
    "checked_extender_victims",
    "dry_run_preemption",
    "no_victim_error",
    "offset_and_num_candidates",
    "pick_one_node",
]

ZeroVictims = Literal["error", "keep", "unresolvable"]
"""What the dry run makes of a node that fits with no victim (see the module doc)."""

_PRIORITY_SHIFT: Final = 2**31


@dataclass(frozen=True, slots=True)
class Candidate:
    node: str
    victims: Victims


@dataclass(frozen=True, slots=True)
class DryRun:
    """Candidates (non-violating first), the statuses of the nodes that gave none, and the
    errors among those statuses."""

    candidates: tuple[Candidate, ...]
    statuses: dict[str, NodeStatus] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


def no_victim_error(node: str) -> str:
    return f'expected at least one victim pod on node "{node}"'


def offset_and_num_candidates(
    num_nodes: int, *, percentage: int, absolute: int, rng: random.Random | None
) -> tuple[int, int]:
    """``GetOffsetAndNumCandidates`` for ``num_nodes`` potential nodes (at least one)."""
    wanted = min(max(num_nodes * percentage // 100, absolute), num_nodes)
    offset = rng.randrange(num_nodes) if rng is not None else 0
    return offset, wanted


def dry_run_preemption(
    potential: Sequence[str],
    offset: int,
    wanted: int,
    select: Callable[[str], Victims | NodeStatus],
    *,
    zero_victims: ZeroVictims,
) -> DryRun:
    """``DryRunPreemption``, one node after the other from ``offset``."""
    non_violating: list[Candidate] = []
    violating: list[Candidate] = []
    statuses: dict[str, NodeStatus] = {}
    errors: list[str] = []
    for index in range(len(potential)):
        node = potential[(offset + index) % len(potential)]
        result = select(node)
        if isinstance(result, Victims) and (result.pods or zero_victims == "keep"):
            chosen = violating if result.num_pdb_violations else non_violating
            if len(chosen) < wanted:
                chosen.append(Candidate(node, result))
            if non_violating and len(non_violating) + len(violating) >= wanted:
                break
            continue
        if isinstance(result, Victims):
            result = (
                unresolvable(NO_VICTIMS)
                if zero_victims == "unresolvable"
                else NodeStatus(Code.ERROR, (no_victim_error(node),))
            )
        if result.code is Code.ERROR:
            errors.append(result.message)
        statuses[node] = result
    return DryRun(tuple(non_violating + violating), statuses, tuple(errors))


def aggregate_errors(errors: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``: one error as is, more deduplicated in
    brackets."""
    unique = list(dict.fromkeys(errors))
    if len(errors) == 1 or len(unique) == 1:
        return unique[0] if unique else ""
    return "[" + ", ".join(unique) + "]"


def checked_extender_victims(
    returned: Mapping[str, Victims],
    sent: Mapping[str, Victims],
    *,
    ignorable: bool,
    keep_empty: bool,
) -> dict[str, Victims] | str:
    """``callExtenders``' check of one extender's reply: the map for the next extender, or the
    error that ends the preemption.  ``keep_empty``: ≥1.38, where a node that was sent without
    victims may come back without."""
    checked: dict[str, Victims] = {}
    for node, victims in returned.items():
        if not victims.pods and not (keep_empty and node in sent and not sent[node].pods):
            if ignorable:
                continue
            return no_victim_error(node)
        checked[node] = victims
    return checked


def pick_one_node(victims_by_node: Mapping[str, Victims], now: datetime) -> str:
    """``pickOneNodeForPreemption`` over nodes whose victims are ordered most important first
    (every node has at least one victim)."""
    if not victims_by_node:
        return ""

    def earliest_top_start(victims: Victims) -> float:
        top = victims.pods[0].priority
        earliest = start_time(victims.pods[0], now)
        for pod in victims.pods:
            if pod.priority > top:
                top, earliest = pod.priority, start_time(pod, now)
            elif pod.priority == top:
                earliest = min(earliest, start_time(pod, now))
        return earliest.timestamp()

    scores: tuple[Callable[[Victims], float], ...] = (
        lambda v: -v.num_pdb_violations,
        lambda v: -v.pods[0].priority,
        lambda v: -sum(p.priority + _PRIORITY_SHIFT for p in v.pods),
        lambda v: -len(v.pods),
        earliest_top_start,
    )
    nodes = list(victims_by_node)
    for score in scores:
        values = {node: score(victims_by_node[node]) for node in nodes}
        best = max(values.values())
        nodes = [node for node in nodes if values[node] == best]
        if len(nodes) == 1:
            break
    return nodes[0]
