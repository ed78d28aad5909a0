"""Choose the node for a pod among the candidates kube-scheduler sent.

:func:`select_node` scores every candidate and picks one by the node policy (``binpack``: the
highest node score, ``spread``: the lowest; ties go to the earlier candidate).  Cost is
O(candidates × devices): it reads the cached :class:`~hami_scheduler.core.usage.node.NodeUsage`
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
  memo never changes an answer, only how fast it comes.  It also keeps the reason a node
  refused a plan once computed, so a filter refusing thousands of unchanged nodes (a vendor's
  pod in a mostly-NVIDIA cluster) collects their reasons while selecting, at no extra pass.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from types import MappingProxyType
from typing import Generic, TypeVar, cast

from hami_scheduler.core import reasons as why
from hami_scheduler.core.decide import NodeDecision, decide_node
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.quick import QuickPlan, quick_plan, quick_verdict
from hami_scheduler.core.usage.node import NodeUsage

__all__ = [
    "FailureReasons",
    "QuickPlans",
    "SelectMemo",
    "Selection",
    "node_fits",
    "quick_plans",
    "select_node",
]


_Answer = bool | str | float
"""A node's answer to a plan: ``True`` it fits (quick verdict: the node's base score), a float
it fits with this score (a full decision: a vendor's own node score), a reason text it
refuses, or ``False`` it refuses for a reason not computed yet.  None of these is an object
the garbage collector tracks."""


class _Table:
    """One plan's answers: per node, the usage they were given for and the answer.

    Two flat dictionaries of untracked values rather than an object per node: the memo holds
    up to 8 × 5,000 answers, and each object (with the refused nodes' decisions) would be one
    more for every full garbage collection to walk (53,000 of them made a full collection cost
    11.6 ms)."""

    __slots__ = ("answers", "nodes")

    def __init__(self) -> None:
        self.nodes: dict[str, NodeUsage] = {}
        self.answers: dict[str, _Answer] = {}

    def current(self, name: str, node: NodeUsage) -> _Answer | None:
        """The answer kept for ``name`` while its usage is still ``node``."""
        return self.answers[name] if self.nodes.get(name) is node else None

    def keep(self, name: str, node: NodeUsage, answer: _Answer) -> None:
        self.nodes[name] = node
        self.answers[name] = answer


_NO_NODES: dict[str, NodeUsage] = {}
_NO_ANSWERS: dict[str, _Answer] = {}


class SelectMemo:
    """Per-node answers for the ``max_plans`` most recent plans (least recently used dropped).

    Holds at most ``max_plans × nodes`` entries.  Not thread-safe; one per scheduler.
    """

    __slots__ = ("_max_plans", "_tables")

    def __init__(self, max_plans: int = 8) -> None:
        self._max_plans = max(1, max_plans)
        self._tables: OrderedDict[Hashable, _Table] = OrderedDict()

    def table(self, key: Hashable) -> _Table:
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Table()
            while len(self._tables) > self._max_plans:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return table

    def forget(self, node: str) -> None:
        """Drop a node's answers (optional: a changed node is detected anyway)."""
        for table in self._tables.values():
            table.nodes.pop(node, None)
            table.answers.pop(node, None)

    def clear(self) -> None:
        self._tables.clear()


class FailureReasons(Mapping[str, str]):
    """Refused node → reason text, each text computed on first read and then kept.

    ``refused`` holds, in candidate order, each node's reason where the memo already knew it
    (in steady state nearly all of them) and otherwise the node's usage; ``pending`` names the
    latter, whose reason needs a full decision.
    """

    __slots__ = ("_pending", "_plan", "_refused", "_table")

    def __init__(
        self,
        refused: dict[str, str | NodeUsage],
        pending: list[str],
        plan: PodPlan,
        table: _Table | None,
    ) -> None:
        self._refused = refused
        self._pending = pending
        self._plan = plan
        self._table = table

    def __getitem__(self, name: str) -> str:
        value = self._refused[name]
        if isinstance(value, str):
            return value
        text = self._refused[name] = self._reason(name, value)
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self._refused)

    def __len__(self) -> int:
        return len(self._refused)

    def resolved(self) -> Mapping[str, str]:
        """Every reason at once (what a ``FailedNodes`` reply carries), as a read-only view.

        Equal to ``dict(self)``.  A filter refusing thousands of unchanged nodes pays nothing
        per node here: their reasons were collected while selecting."""
        refused = self._refused
        for name in self._pending:
            value = refused[name]
            if not isinstance(value, str):
                refused[name] = self._reason(name, value)
        self._pending.clear()
        return cast(Mapping[str, str], MappingProxyType(refused))

    def _reason(self, name: str, node: NodeUsage) -> str:
        decision = decide_node(node, self._plan)
        table = self._table
        if table is not None and table.current(name, node) is False and not decision.fits:
            table.answers[name] = decision.reason
        return decision.reason


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
    candidates: Sequence[str] | None = None,
    memo: SelectMemo | None = None,
) -> Selection[NodeDecision]:
    """Pick the node for ``plan`` among ``candidates`` (default: every node in ``nodes``).

    Candidates missing from ``nodes`` are refused as ``"node unregistered"``.
    """
    quick, relaxed = quick_plans(plan)
    # When the quota cannot refuse anything, answers do not depend on its running usage.
    quota_free = quick is not None and not quick.quota_bounds and not quick.blocked
    table = None if memo is None else memo.table(plan.shape_key if quota_free else plan.key)
    fitting: dict[str, float] = {}
    refused: dict[str, str | NodeUsage] = {}
    pending: list[str] = []
    # This loop runs once per candidate (5,000 per filter): C-level pairing, memo lookups inlined.
    pairs = (
        nodes.items()
        if candidates is None
        else zip(candidates, map(nodes.get, candidates), strict=True)
    )
    seen = _NO_NODES.get if table is None else table.nodes.get
    answers = _NO_ANSWERS if table is None else table.answers
    for name, node in pairs:
        if node is None:
            refused[name] = why.NODE_UNREGISTERED
            continue
        if seen(name) is node:
            answer = answers[name]
        else:
            answer = _answer(node, plan, quick, relaxed)
            if table is not None:
                table.keep(name, node, answer)
        if answer is True:
            fitting[name] = node.base_score
        elif answer is False:
            refused[name] = node
            pending.append(name)
        elif isinstance(answer, float):
            # A vendor's own node score rides on the full decision (quick answers have none).
            fitting[name] = answer
        else:
            refused[name] = answer
    chosen, decision = _choose(plan, nodes, fitting, refused, table)
    return Selection(
        node=chosen,
        decision=decision,
        fitting=fitting,
        failed=FailureReasons(refused, pending, plan, table),
    )


QuickPlans = tuple[QuickPlan | None, QuickPlan | None]
"""A plan's quick form and, where it has none, its relaxed form (:func:`quick_plans`)."""


def quick_plans(plan: PodPlan) -> QuickPlans:
    """The quick forms :func:`select_node` judges ``plan`` with, once per plan."""
    quick = quick_plan(plan)
    # Without a quick plan, a relaxed one still drops nodes that cannot fit at all.
    return quick, quick_plan(plan, relaxed=True) if quick is None else None


def node_fits(node: NodeUsage, plan: PodPlan, quick: QuickPlans) -> bool:
    """Whether the pod fits ``node``, as :func:`select_node` finds it: the quick verdict where
    it is certain, else the full decision (for callers that need only the yes or no)."""
    answer = _answer(node, plan, *quick)
    return answer is True or isinstance(answer, float)


def _answer(
    node: NodeUsage, plan: PodPlan, quick: QuickPlan | None, relaxed: QuickPlan | None
) -> _Answer:
    if quick is not None:
        verdict = quick_verdict(node, quick)
    else:
        verdict = None if relaxed is None or quick_verdict(node, relaxed) is not False else False
    if verdict is not None:
        return verdict
    decision = decide_node(node, plan)
    return float(decision.score) if decision.fits else decision.reason


def _choose(
    plan: PodPlan,
    nodes: Mapping[str, NodeUsage],
    fitting: dict[str, float],
    refused: dict[str, str | NodeUsage],
    table: _Table | None,
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
        # One full decision per filter: the memo keeps answers, not decisions.
        decision = decide_node(node, plan)
        if table is not None and table.current(best, node) is not None:
            table.answers[best] = float(decision.score) if decision.fits else decision.reason
        if decision.fits:
            return best, decision
        del fitting[best]
        refused[best] = decision.reason
    return None, None
