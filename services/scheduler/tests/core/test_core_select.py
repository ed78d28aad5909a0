"""Choosing among candidate nodes: policy, ties, unregistered nodes, lazy reasons, the memo."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hami_scheduler.core import (
    NodeUsage,
    PodPlan,
    QuotaLimits,
    SelectMemo,
    VendorQuota,
    apply_usage,
    decide_node,
    decision_usage,
    node_better,
    select_node,
)
from hami_scheduler.core.quick import quick_plan, quick_verdict

from ..core_helpers import dev, gpu, node, node_st, plan_of, plan_st

BINPACK = {"hami.io/node-scheduler-policy": "binpack"}
SPREAD = {"hami.io/node-scheduler-policy": "spread"}


def test_unregistered_candidates_are_refused() -> None:
    nodes = {"a": node("a", [dev("g0")])}
    selection = select_node(plan_of([gpu(1, mem=1)]), nodes, candidates=["ghost", "a"])
    assert selection.node == "a"
    assert dict(selection.failed) == {"ghost": "node unregistered"}


def test_ties_go_to_the_earlier_candidate() -> None:
    nodes = {name: node(name, [dev("g0")]) for name in ("a", "b", "c")}
    for policy in (BINPACK, SPREAD):
        plan = plan_of([gpu(1, mem=1)], annotations=policy)
        assert select_node(plan, nodes, candidates=["b", "c", "a"]).node == "b"
        assert select_node(plan, nodes).node == "a"


def test_no_fit_reports_every_node_with_its_reason() -> None:
    nodes = {
        "small": node("small", [dev("g0", mem=1000)]),
        "sick": node("sick", [dev("g0", health=False)]),
    }
    selection = select_node(plan_of([gpu(1, mem=4000)]), nodes, candidates=["small", "sick", "x"])
    assert selection.node is None
    assert selection.decision is None
    assert selection.fitting == {}
    assert list(selection.failed) == ["small", "sick", "x"]
    assert len(selection.failed) == 3
    assert selection.failed["small"] == "1/1 CardInsufficientMemory"
    assert selection.failed["sick"] == "1/1 CardNotHealth"
    assert selection.failed["x"] == "node unregistered"
    assert "nope" not in selection.failed


def test_fitting_lists_every_fitting_node_with_its_score() -> None:
    nodes = {
        "idle": node("idle", [dev("g0")]),
        "half": node("half", [dev("g0", used=5, count=10, usedmem=4000, usedcores=50)]),
        "full": node("full", [dev("g0", usedmem=8000)]),
    }
    selection = select_node(plan_of([gpu(1, mem=100)], annotations=SPREAD), nodes)
    assert selection.fitting == {"idle": 0.0, "half": 15.0}
    assert selection.node == "idle"
    assert set(selection.failed) == {"full"}


def test_memo_reuses_answers_until_a_node_changes() -> None:
    nodes: dict[str, NodeUsage] = {"a": node("a", [dev("g0", mem=8000)])}
    memo = SelectMemo()
    plan = plan_of([gpu(1, mem=6000)])
    first = select_node(plan, nodes, memo=memo)
    assert first.node == "a"
    assert first.decision is not None
    nodes["a"] = apply_usage(nodes["a"], decision_usage(first.decision, plan))
    second = select_node(plan, nodes, memo=memo)
    assert second.node is None
    assert second.failed["a"] == "1/1 CardInsufficientMemory"
    again = select_node(plan, nodes, memo=memo)
    assert again.failed["a"] == "1/1 CardInsufficientMemory"


def test_memo_keeps_a_bounded_number_of_plans() -> None:
    nodes = {"a": node("a", [dev("g0")])}
    memo = SelectMemo(max_plans=2)
    for mem in (1, 2, 3, 1):
        assert select_node(plan_of([gpu(1, mem=mem)]), nodes, memo=memo).node == "a"
    memo.forget("a")
    memo.clear()
    assert select_node(plan_of([gpu(1, mem=1)]), nodes, memo=memo).node == "a"


def _expected(plan: PodPlan, nodes: dict[str, NodeUsage]) -> str | None:
    best, best_score = None, 0.0
    for name, n in nodes.items():
        decision = decide_node(n, plan)
        if decision.fits and (
            best is None or node_better(decision.score, best_score, plan.node_policy)
        ):
            best, best_score = name, decision.score
    return best


@given(st.data())
def test_selection_equals_deciding_every_node(data: st.DataObject) -> None:
    nodes = {name: data.draw(node_st(name, with_usage=True)) for name in ("n0", "n1", "n2")}
    plan = data.draw(plan_st())
    memo = SelectMemo()
    for _ in range(2):  # the second round is answered from the memo
        selection = select_node(plan, nodes, memo=memo)
        assert selection.node == _expected(plan, nodes)
        if selection.node is not None:
            assert selection.decision == decide_node(nodes[selection.node], plan)
        for name, reason in selection.failed.items():
            assert reason == decide_node(nodes[name], plan).reason
        assert set(selection.fitting) | set(selection.failed) == set(nodes)


QUOTAS = st.sampled_from(
    [
        None,
        {"NVIDIA": VendorQuota(QuotaLimits(memory=6000, cores=150), used_memory=1000)},
        {"NVIDIA": VendorQuota(QuotaLimits(memory=2500, cores=100))},
        {"NVIDIA": VendorQuota(QuotaLimits(cores=400), used_cores=100)},
        {"NVIDIA": VendorQuota(QuotaLimits(memory=0))},
    ]
)


@settings(max_examples=400)
@given(node_st(with_usage=True, roomy=True), QUOTAS.flatmap(lambda q: plan_st(quota=q)))
def test_a_definite_quick_verdict_agrees_with_the_full_decision(n: NodeUsage, plan) -> None:  # type: ignore[no-untyped-def]
    fits = decide_node(n, plan).fits
    relaxed = quick_plan(plan, relaxed=True)
    assert relaxed is not None
    if quick_verdict(n, relaxed) is False:
        assert not fits
    quick = quick_plan(plan)
    assume(quick is not None)
    assert quick is not None
    verdict = quick_verdict(n, quick)
    if verdict is not None:
        assert verdict == fits


def test_quick_verdict_is_unknown_only_when_order_matters() -> None:
    two = plan_of([gpu(1, mem=5000), gpu(1, mem=5000)])
    quick = quick_plan(two)
    assert quick is not None
    roomy = node("n", [dev("a"), dev("b")])
    assert quick_verdict(roomy, quick) is True
    tight = node("n", [dev("a"), dev("b", mem=4000)])
    assert quick_verdict(tight, quick) is None
    assert not decide_node(tight, two).fits
    assert quick_verdict(node("n", [dev("a", mem=4000)]), quick) is False


def test_quick_plan_declines_quota_and_numa_runs_out_of_order() -> None:
    bind = {"nvidia.com/numa-bind": "true"}
    assert quick_plan(plan_of([gpu(1)], annotations=bind)) is not None
    for policy in ("mutex", "topology-aware"):
        split = {**bind, "hami.io/gpu-scheduler-policy": policy}
        assert quick_plan(plan_of([gpu(1)], annotations=split)) is None
    chained = {**bind, "hami.io/gpu-scheduler-policy": "mutex,binpack"}
    assert quick_plan(plan_of([gpu(1)], annotations=chained)) is not None
    quota = {"NVIDIA": VendorQuota(QuotaLimits(memory=1000, cores=100), used_memory=500)}
    whole_card = quick_plan(plan_of([gpu(1)], quota=quota))
    assert whole_card is not None
    assert whole_card.quota_bounds  # a percentage: binds or not by the node's devices
    assert quick_verdict(node("n", [dev("big", mem=8000)]), whole_card) is None
    assert quick_verdict(node("n", [dev("small", mem=400)]), whole_card) is True
    assert quick_plan(plan_of([gpu(1, mem=300)], init=[gpu(2, mem=300)], quota=quota)) is None
    assert quick_plan(plan_of([gpu(1, mem=500, cores=50)], quota=quota)) == quick_plan(
        plan_of([gpu(1, mem=500, cores=50)])
    )
    blocked = quick_plan(plan_of([gpu(2, mem=300, cores=50)], quota=quota))
    assert blocked is not None
    assert blocked.blocked
    assert quick_verdict(node("n", [dev("a"), dev("b")]), blocked) is False
    assert quick_plan(plan_of([gpu(1)], init=[gpu(1), gpu(2)])) is not None


def test_numa_bind_quick_verdict_counts_per_numa_node() -> None:
    bind = {"nvidia.com/numa-bind": "true"}
    quick = quick_plan(plan_of([gpu(2, mem=100)], annotations=bind))
    assert quick is not None
    split = node("n", [dev("a", numa=0), dev("b", numa=1)])
    assert quick_verdict(split, quick) is False
    paired = node("n", [dev("a", numa=0), dev("b", numa=1), dev("c", numa=1)])
    assert quick_verdict(paired, quick) is True
