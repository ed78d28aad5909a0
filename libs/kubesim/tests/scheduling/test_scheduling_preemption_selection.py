"""SelectVictimsOnNode, the PodDisruptionBudget split and PodEligibleToPreemptOthers, pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hami_kube.objects import PodView
from hami_kubesim.scheduler.preemption.selection import (
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    PlacedPod,
    Victims,
    ineligible_reason,
    select_victims_on_node,
    split_by_budgets,
)
from hami_kubesim.scheduler.statuses import Code, NodeStatus, unschedulable

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pod(
    name: str,
    priority: int = 0,
    *,
    cpu: int = 1000,
    started: str | None = "2025-12-31T00:00:00Z",
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    **status: Any,
) -> PlacedPod:
    raw: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": labels or {},
        },
        "spec": {"priority": priority, "nodeName": "n1"},
        "status": {**({"startTime": started} if started else {}), **status},
    }
    return PlacedPod(PodView(raw), {"cpu": cpu})


def preemptor(priority: int = 100, **spec: Any) -> PodView:
    return PodView(
        {"metadata": {"name": "p", "uid": "uid-p"}, "spec": {"priority": priority, **spec}}
    )


def cpu_check(capacity: int, need: int) -> Any:
    """NodeResourcesFit on cpu alone: ``need`` millicores must fit beside the pods left."""

    def check(pods: Sequence[PlacedPod]) -> NodeStatus | None:
        used = sum(p.requests["cpu"] for p in pods)
        return None if used + need <= capacity else unschedulable("Insufficient cpu")

    return check


def pdb(name: str, labels: dict[str, str], allowed: int, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {"disruptionsAllowed": allowed, **status},
    }


def names(result: Victims | NodeStatus) -> list[str]:
    assert isinstance(result, Victims), result
    return [p.name for p in result.pods]


def test_only_lower_priority_pods_are_victims_and_the_most_important_are_reprieved() -> None:
    pods = [pod("high", 200), pod("low-old", 1), pod("low-new", 1, started="2025-12-31T12:00:00Z")]
    # 4 cpus, the high-priority pod holds one, the preemptor needs two: one victim suffices
    result = select_victims_on_node(preemptor(), pods, cpu_check(4000, 2000), [], NOW)
    # the older of the equal-priority pods is more important: it stays, the newer goes
    assert names(result) == ["low-new"]
    assert isinstance(result, Victims)
    assert result.num_pdb_violations == 0


def test_victims_come_most_important_first() -> None:
    pods = [pod("a", 1), pod("b", 5), pod("c", 3, started=None)]
    result = select_victims_on_node(preemptor(), pods, cpu_check(3000, 3000), [], NOW)
    assert names(result) == ["b", "c", "a"]


def test_no_lower_priority_pod_is_unresolvable() -> None:
    result = select_victims_on_node(preemptor(5), [pod("same", 5)], cpu_check(1000, 1000), [], NOW)
    assert result == NodeStatus(Code.UNRESOLVABLE, (NO_VICTIMS,))
    assert select_victims_on_node(preemptor(), [], cpu_check(1, 1), [], NOW) == NodeStatus(
        Code.UNRESOLVABLE, (NO_VICTIMS,)
    )


def test_a_node_too_small_even_when_emptied_keeps_the_filter_status() -> None:
    result = select_victims_on_node(preemptor(), [pod("low")], cpu_check(1000, 2000), [], NOW)
    assert result == unschedulable("Insufficient cpu")


def test_zero_victims_when_the_in_tree_filters_pass_anyway() -> None:
    # what an extender-owned resource looks like in-tree: everything fits
    result = select_victims_on_node(preemptor(), [pod("low")], cpu_check(8000, 1000), [], NOW)
    assert result == Victims(())


def test_pdb_violating_pods_are_reprieved_first() -> None:
    guarded = pod("guarded", 1, labels={"app": "db"})
    free = pod("free", 1, started="2025-12-31T06:00:00Z")
    budgets = [pdb("db", {"app": "db"}, allowed=0)]
    # room for one of the two: the guarded one (violating) is tried first and stays
    result = select_victims_on_node(
        preemptor(), [guarded, free], cpu_check(2000, 1000), budgets, NOW
    )
    assert names(result) == ["free"]
    assert isinstance(result, Victims)
    assert result.num_pdb_violations == 0
    # no room for either: both go, one violation counted
    result = select_victims_on_node(
        preemptor(), [guarded, free], cpu_check(2000, 2000), budgets, NOW
    )
    assert names(result) == ["guarded", "free"]
    assert isinstance(result, Victims)
    assert result.num_pdb_violations == 1


def test_budget_split_follows_upstream_rules() -> None:
    a, b, c = (pod(n, labels={"app": "web"}) for n in ("a", "b", "c"))
    other_ns = pod("d", labels={"app": "web"}, namespace="other")
    unlabelled = pod("e")
    budgets = [pdb("web", {"app": "web"}, allowed=1, disruptedPods={"b": "2026-01-01T00:00:00Z"})]
    violating, fine = split_by_budgets([a, b, c, other_ns, unlabelled], budgets)
    # a takes the one allowed disruption; b is already being disrupted; c goes below zero
    assert [p.pod.name for p in violating] == ["c"]
    assert [p.pod.name for p in fine] == ["a", "b", "d", "e"]


def test_empty_or_null_selectors_match_nothing_in_preemption() -> None:
    a = pod("a", labels={"app": "web"})
    empty = {"metadata": {"namespace": "default"}, "spec": {"selector": {}}, "status": {}}
    null = {"metadata": {"namespace": "default"}, "spec": {}, "status": {}}
    assert split_by_budgets([a], [empty, null]) == ([], [a])


def test_eligibility() -> None:
    assert ineligible_reason(preemptor(preemptionPolicy="Never"), "", Code.UNSCHEDULABLE, []) == (
        NOT_ELIGIBLE_NEVER
    )
    terminating = pod(
        "victim",
        1,
        conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ],
    ).pod
    terminating.raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    nominated = PodView({**preemptor().raw, "status": {"nominatedNodeName": "n1"}})
    assert ineligible_reason(nominated, "n1", Code.UNSCHEDULABLE, [terminating]) == (
        NOT_ELIGIBLE_TERMINATING
    )
    # the nominated node became unresolvable: try again elsewhere
    assert ineligible_reason(nominated, "n1", Code.UNRESOLVABLE, [terminating]) is None
    # a pod deleted for another reason does not hold the preemptor back
    plain = pod("other", 1).pod
    plain.raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    assert ineligible_reason(nominated, "n1", Code.UNSCHEDULABLE, [plain]) is None
    assert ineligible_reason(preemptor(), "", Code.UNRESOLVABLE, [terminating]) is None
