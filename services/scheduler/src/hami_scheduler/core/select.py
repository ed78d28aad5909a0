"""Choose the node for a pod among the candidates kube-scheduler sent.

:func:`select_node` scores every candidate and picks one by the node policy (``binpack``: the
highest node score, ``spread``: the lowest; ties go to the earlier candidate).  Cost is
O(candidates × devices): it reads the cached :class:`~hami_scheduler.core.usage.NodeUsage`
values and never looks at pods.

* Each candidate first gets the quick verdict (:mod:`.quick`): a few bounds and a scan that
  stops at the first passing devices.  Only when it is unknown — and for the rare pods it does
  not cover, after a relaxed check dropped the nodes that cannot fit — does the candidate take
  the full :func:`~hami_scheduler.core.decide.decide_node` (~10-20 µs per container on an
  8-GPU node).  The device choice (scores, sort, fit) is computed for the chosen node only.
* Failure reasons are computed when read: :attr:`Selection.failed` lists every refused node at
  once, but a node's reason text is produced (by ``decide_node``) on first access, so a
  successful filter that does not report them does not pay for them.
* An optional :class:`SelectMemo` remembers each node's answer for the last few plans and
  reuses it while the node's ``NodeUsage`` is the same object — i.e. until a pod on that node
  changes.  A stream of similar pods then costs a dictionary lookup per unchanged node.  The
  memo never changes an answer, only how fast it comes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Generic, TypeVar

from hami_scheduler.core import reasons as why
from hami_scheduler.core.decide import NodeDecision, decide_node
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.quick import QuickPlan, quick_plan, quick_verdict
from hami_scheduler.core.usage import NodeUsage

__all__ = ["FailureReasons", "SelectMemo", "Selection", "select_node"]


@dataclass(slots=True)
class _Answer:
    node: NodeUsage
    fits: bool
    decision: NodeDecision | None = None


class SelectMemo:
    """Per-node answers for the ``max_plans`` most recent plans (least recently used dropped).

    Holds at most ``max_plans × nodes`` entries.  Not thread-safe; one per scheduler.
    """

    __slots__ = ("_max_plans", "_tables")

    def __init__(self, max_plans: int = 8) -> None:
        self._max_plans = max(1, max_plans)
        self._tables: OrderedDict[Hashable, dict[str, _Answer]] = OrderedDict()

    def table(self, key: Hashable) -> dict[str, _Answer]:
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
            while len(self._tables) > self._max_plans:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return table

    def forget(self, node: str) -> None:
        """Drop a node's answers (optional: a changed node is detected anyway)."""
        for table in self._tables.values():
            table.pop(node, None)

    def clear(self) -> None:
        self._tables.clear()


class FailureReasons(Mapping[str, str]):
    """Refused node → reason text, each text computed on first read and then kept."""

    __slots__ = ("_done", "_names", "_nodes", "_plan", "_table")

    def __init__(
        self,
        refused: Mapping[str, NodeUsage | None],
        plan: PodPlan,
        table: dict[str, _Answer] | None,
    ) -> None:
        self._nodes = refused
        self._names = tuple(refused)
        self._plan = plan
        self._table = table
        self._done: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        text = self._done.get(name)
        if text is not None:
            return text
        if name not in self._nodes:
            raise KeyError(name)
        node = self._nodes[name]
        if node is None:
            text = why.NODE_UNREGISTERED
        else:
            answer = None if self._table is None else self._table.get(name)
            decision = answer.decision if answer is not None and answer.node is node else None
            if decision is None:
                decision = decide_node(node, self._plan)
                if answer is not None and answer.node is node:
                    answer.decision = decision
            text = decision.reason
        self._done[name] = text
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def resolved(self) -> dict[str, str]:
        """Every reason at once, as a plain dict (what a ``FailedNodes`` reply carries).

        Equal to ``dict(self)``, without a method call per node: a filter refusing thousands
        of unchanged nodes pays a dictionary lookup each.
        """
        done, table, plan = self._done, self._table, self._plan
        result: dict[str, str] = {}
        for name, node in self._nodes.items():
            text = done.get(name)
            if text is None:
                if node is None:
                    text = why.NODE_UNREGISTERED
                else:
                    answer = None if table is None else table.get(name)
                    current = answer is not None and answer.node is node
                    decision = answer.decision if answer is not None and current else None
                    if decision is None:
                        decision = decide_node(node, plan)
                        if answer is not None and current:
                            answer.decision = decision
                    text = decision.reason
                done[name] = text
            result[name] = text
        return result


D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class Selection(Generic[D]):
    """The outcome of choosing a node among candidates (HAMi's ``D`` is a
    :class:`~hami_scheduler.core.decide.NodeDecision`, the joint one's a ``JointDecision``)."""

    node: str | None
    """The chosen node; ``None`` when no candidate fits."""
    decision: D | None
    """The chosen node's devices and score."""
    fitting: Mapping[str, float] = field(default_factory=dict)
    """Every candidate the pod fits → its node score (for a prioritize-style answer)."""
    failed: Mapping[str, str] = field(default_factory=dict)
    """Every refused candidate → why (``FailedNodes``); see :class:`FailureReasons`."""


def select_node(
    plan: PodPlan,
    nodes: Mapping[str, NodeUsage],
    *,
    candidates: Iterable[str] | None = None,
    memo: SelectMemo | None = None,
) -> Selection[NodeDecision]:
    """Pick the node for ``plan`` among ``candidates`` (default: every node in ``nodes``).

    Candidates missing from ``nodes`` are refused as ``"node unregistered"``.
    """
    quick = quick_plan(plan)
    # Without a quick plan, a relaxed one still drops nodes that cannot fit at all.
    relaxed = quick_plan(plan, relaxed=True) if quick is None else None
    # When the quota cannot refuse anything, answers do not depend on its running usage.
    quota_free = quick is not None and not quick.quota_bounds and not quick.blocked
    table = None if memo is None else memo.table(plan.shape_key if quota_free else plan.key)
    fitting: dict[str, float] = {}
    refused: dict[str, NodeUsage | None] = {}
    pairs = nodes.items() if candidates is None else ((n, nodes.get(n)) for n in candidates)
    for name, node in pairs:
        if node is None:
            refused[name] = None
            continue
        if table is None:
            answer = _answer(node, plan, quick, relaxed)
        else:
            known = table.get(name)
            if known is None or known.node is not node:
                known = table[name] = _answer(node, plan, quick, relaxed)
            answer = known
        if answer.fits:
            # A vendor's own node score rides on the full decision (quick answers have none).
            decided = answer.decision
            fitting[name] = node.base_score if decided is None else decided.score
        else:
            refused[name] = node
    chosen, decision = _choose(plan, nodes, fitting, refused, table)
    return Selection(
        node=chosen,
        decision=decision,
        fitting=fitting,
        failed=FailureReasons(refused, plan, table),
    )


def _answer(
    node: NodeUsage, plan: PodPlan, quick: QuickPlan | None, relaxed: QuickPlan | None
) -> _Answer:
    if quick is not None:
        verdict = quick_verdict(node, quick)
    else:
        verdict = None if relaxed is None or quick_verdict(node, relaxed) is not False else False
    if verdict is not None:
        return _Answer(node, verdict)
    decision = decide_node(node, plan)
    return _Answer(node, decision.fits, decision)


def _choose(
    plan: PodPlan,
    nodes: Mapping[str, NodeUsage],
    fitting: dict[str, float],
    refused: dict[str, NodeUsage | None],
    table: dict[str, _Answer] | None,
) -> tuple[str | None, NodeDecision | None]:
    """The best fitting node and its full decision.

    The quick scan and the full decision agree by construction (and by test); should they ever
    not, the node is moved to ``refused`` and the next best is tried, so the answer stays safe.
    """
    pick = min if plan.node_policy == "spread" else max
    while fitting:
        # min()/max() return the first of equal scores: ties go to the earlier candidate.
        best = pick(fitting.items(), key=itemgetter(1))[0]
        node = nodes[best]
        answer = None if table is None else table.get(best)
        decision = answer.decision if answer is not None and answer.node is node else None
        if decision is None:
            decision = decide_node(node, plan)
            if answer is not None and answer.node is node:
                answer.decision = decision
        if decision.fits:
            return best, decision
        del fitting[best]
        refused[best] = node
        if answer is not None and answer.node is node:
            answer.fits = False
    return None, None
