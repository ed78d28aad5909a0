"""The pure parts around a preemption: what nominated pods hold on a node
(:mod:`hami_scheduler.core.holds`), which victims break a PodDisruptionBudget
(:mod:`hami_scheduler.cache.budgets`), and which refused nodes an eviction could help
(:mod:`hami_scheduler.selection.resolvable`)."""

from __future__ import annotations

from typing import Any

from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.cache.budgets import BudgetedPod, DisruptionBudgets
from hami_scheduler.core import apply_usage, decide_node
from hami_scheduler.core.holds import Nominee, hold_on
from hami_scheduler.core.joint.hints import NO_JOINT
from hami_scheduler.core.joint.route import Fleet
from hami_scheduler.selection.resolvable import EmptyNodes, split_unresolvable

from ..core_helpers import dev, gpu, node, plan_of


def used(uuid: str, mem: int) -> DeviceUsageSummary:
    return DeviceUsageSummary(uuid, "NVIDIA", mem, 0, 1)


def nominee(uid: str, mem: int) -> Nominee:
    return Nominee(uid, f"default/{uid}", plan_of([gpu(1, mem=mem)]), NO_JOINT)


def test_a_nominee_is_placed_where_the_terminating_pods_leave_room_and_counts_on_top() -> None:
    idle = node("n1", [dev("GPU-0"), dev("GPU-1", index=1)])
    victim = used("GPU-0", 6000)
    current = apply_usage(idle, [victim, used("GPU-1", 7000)])
    held_node, held = hold_on(current, [nominee("big", 4000)], terminating=[victim])
    (one,) = held
    assert [(s.uuid, s.usedmem) for s in one.usage] == [("GPU-0", 4000)]
    # The victim still holds its 6000 until it is gone: GPU-0 is over-full for anyone else.
    assert [d.usedmem for d in held_node.devices] == [10000, 7000]
    assert not decide_node(held_node, plan_of([gpu(1, mem=2000)])).fits


def test_nominees_go_in_order_and_one_that_does_not_fit_holds_nothing() -> None:
    current = node("n1", [dev("GPU-0")])
    nominees = [nominee("first", 5000), nominee("second", 5000), nominee("third", 3000)]
    held_node, held = hold_on(current, nominees)
    assert [one.uid for one in held] == ["first", "third"]
    assert held_node.devices[0].usedmem == 8000
    assert hold_on(current, []) == (current, ())


def budgeted(uid: str, namespace: str = "default", **labels: str) -> BudgetedPod:
    return BudgetedPod(uid, namespace, uid, labels)


def pdb(name: str, selector: Any, allowed: int, disrupted: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": selector},
        "status": {
            "disruptionsAllowed": allowed,
            "disruptedPods": dict.fromkeys(disrupted, "2024-01-01T00:00:00Z"),
        },
    }


def test_budgets_are_used_up_in_the_order_given_as_kube_scheduler_does() -> None:
    budgets = DisruptionBudgets()
    assert budgets.violating([budgeted("a", app="x")]) == frozenset()
    budgets.upsert(pdb("x", {"matchLabels": {"app": "x"}}, 1, disrupted=("gone",)))
    budgets.upsert(pdb("all", {}, 0))  # an empty selector selects nothing here
    budgets.upsert(pdb("none", None, 0))
    pods = [
        budgeted("gone", app="x"),  # already being disrupted: neither counts nor uses it up
        budgeted("first", app="x"),
        budgeted("second", app="x"),
        budgeted("elsewhere", "other", app="x"),
        budgeted("unlabelled"),
    ]
    assert budgets.violating(pods) == {"second"}
    budgets.remove({"metadata": {"name": "x", "namespace": "default"}})
    assert budgets.violating(pods) == frozenset()


def test_a_refused_node_is_unresolvable_only_when_it_would_not_fit_empty() -> None:
    busy = apply_usage(node("busy", [dev("GPU-busy")]), [used("GPU-busy", 7000)])
    small = node("small", [dev("GPU-small", mem=2000)])
    fleet = Fleet({"busy": busy, "small": small}, {}, (), {"busy", "small", "bare"})
    failed = {"busy": "why busy", "small": "why small", "bare": "node unregistered", "bad": "x"}
    empties = EmptyNodes()
    split = split_unresolvable(
        failed, plan_of([gpu(1, mem=4000)]), NO_JOINT, fleet, refused={"bad"}, empties=empties
    )
    assert split.failed == {"busy": "why busy"}
    assert split.unresolvable == {"small": "why small", "bare": "node unregistered", "bad": "x"}
    # A node registered anew is judged on its new devices, not on a kept copy.
    grown = node("small", [dev("GPU-small", mem=8000)])
    fleet = Fleet({"busy": busy, "small": grown}, {}, (), {"busy", "small"})
    split = split_unresolvable(
        {"small": "why"}, plan_of([gpu(1, mem=4000)]), NO_JOINT, fleet, empties=empties
    )
    assert split.failed == {"small": "why"}
