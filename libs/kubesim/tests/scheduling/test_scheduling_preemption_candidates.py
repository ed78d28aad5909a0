"""Preemption's candidate choice, pure: how many, the dry run (≤1.37 / ≥1.38), the extenders'
replies, pickOneNodeForPreemption; and the nominator."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube.objects import PodView
from hami_kubesim.scheduler.nominator import Nominator
from hami_kubesim.scheduler.preemption.candidates import (
    Candidate,
    aggregate_errors,
    checked_extender_victims,
    dry_run_preemption,
    offset_and_num_candidates,
    pick_one_node,
)
from hami_kubesim.scheduler.preemption.selection import NO_VICTIMS, Victims
from hami_kubesim.scheduler.statuses import Code, NodeStatus, unschedulable

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def victim(name: str, priority: int = 0, started: str = "2025-12-31T00:00:00Z") -> PodView:
    return PodView(
        {
            "metadata": {"name": name, "uid": f"uid-{name}"},
            "spec": {"priority": priority},
            "status": {"startTime": started},
        }
    )


def victims(*pods: PodView, violations: int = 0) -> Victims:
    return Victims(tuple(pods), violations)


# -- how many, from where --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "percentage", "absolute", "wanted"),
    [(5, 10, 100, 5), (1000, 10, 100, 100), (5000, 10, 100, 500), (50, 0, 3, 3), (7, 100, 0, 7)],
)
def test_number_of_candidates(nodes: int, percentage: int, absolute: int, wanted: int) -> None:
    offset, count = offset_and_num_candidates(
        nodes, percentage=percentage, absolute=absolute, rng=None
    )
    assert (offset, count) == (0, wanted)


@given(st.integers(1, 500), st.integers(0, 10_000))
def test_a_seeded_offset_is_always_a_node(nodes: int, seed: int) -> None:
    offset, _ = offset_and_num_candidates(
        nodes, percentage=10, absolute=100, rng=random.Random(seed)
    )
    assert 0 <= offset < nodes


# -- the dry run -----------------------------------------------------------------------------


def test_dry_run_zero_victims_per_release() -> None:
    def select(node: str) -> Victims | NodeStatus:
        return victims() if node == "empty" else victims(victim(f"v-{node}"))

    old = dry_run_preemption(["empty", "b"], 0, 2, select, zero_victims="error")
    assert [c.node for c in old.candidates] == ["b"]
    assert old.statuses == {
        "empty": NodeStatus(Code.ERROR, ('expected at least one victim pod on node "empty"',))
    }
    assert old.errors == ('expected at least one victim pod on node "empty"',)
    new = dry_run_preemption(["empty", "b"], 0, 2, select, zero_victims="keep")
    assert next((c.node, c.victims.pods) for c in new.candidates) == ("empty", ())
    assert new.errors == ()
    no_extender = dry_run_preemption(["empty"], 0, 1, select, zero_victims="unresolvable")
    assert no_extender.candidates == ()
    assert no_extender.statuses == {"empty": NodeStatus(Code.UNRESOLVABLE, (NO_VICTIMS,))}


def test_dry_run_starts_at_the_offset_and_stops_when_it_has_enough() -> None:
    seen: list[str] = []

    def select(node: str) -> Victims | NodeStatus:
        seen.append(node)
        return victims(victim(node))

    run = dry_run_preemption(["a", "b", "c", "d"], 2, 2, select, zero_victims="error")
    assert seen == ["c", "d"]
    assert [c.node for c in run.candidates] == ["c", "d"]


def test_dry_run_goes_on_until_a_candidate_violates_no_budget() -> None:
    def select(node: str) -> Victims | NodeStatus:
        return victims(victim(node), violations=0 if node == "c" else 1)

    run = dry_run_preemption(["a", "b", "c", "d"], 0, 1, select, zero_victims="error")
    # violating ones are capped at the wanted number; the non-violating one comes first
    assert [c.node for c in run.candidates] == ["c", "a"]


def test_dry_run_records_failures() -> None:
    run = dry_run_preemption(
        ["a"], 0, 1, lambda _: unschedulable("Insufficient cpu"), zero_victims="error"
    )
    assert run == type(run)((), {"a": unschedulable("Insufficient cpu")}, ())


def test_aggregated_errors_read_like_go() -> None:
    assert aggregate_errors(["x"]) == "x"
    assert aggregate_errors(["x", "x"]) == "x"
    assert aggregate_errors(["x", "y", "x"]) == "[x, y]"


# -- the extenders' replies ------------------------------------------------------------------


def test_extender_replies_without_victims() -> None:
    sent = {"a": victims(victim("v")), "b": victims()}
    back = {"a": victims(), "b": victims()}
    error = 'expected at least one victim pod on node "a"'
    assert checked_extender_victims(back, sent, ignorable=False, keep_empty=False) == error
    assert checked_extender_victims(back, sent, ignorable=True, keep_empty=False) == {}
    # ≥1.38: a node sent without victims may come back without; one sent with may not
    assert checked_extender_victims(back, sent, ignorable=False, keep_empty=True) == error
    assert checked_extender_victims({"b": victims()}, sent, ignorable=False, keep_empty=True) == {
        "b": victims()
    }
    added = {"b": victims(victim("extra"))}
    assert checked_extender_victims(added, sent, ignorable=False, keep_empty=False) == added


# -- the pick --------------------------------------------------------------------------------


def test_pick_prefers_fewest_violations_then_lowest_priorities() -> None:
    a = victims(victim("a", 1), violations=1)
    b = victims(victim("b", 5))
    c = victims(victim("c", 3))
    assert pick_one_node({"a": a, "b": b}, NOW) == "b"
    assert pick_one_node({"b": b, "c": c}, NOW) == "c"


def test_pick_sum_of_priorities_then_fewest_victims_then_latest_start() -> None:
    two_low = victims(victim("x", 3), victim("y", -5))
    one = victims(victim("z", 3))
    # same top priority; sums: 3 + (-5) + 2*2^31 against 3 + 2^31: the single victim wins
    assert pick_one_node({"two": two_low, "one": one}, NOW) == "one"
    early = victims(victim("e", 3, started="2025-01-01T00:00:00Z"))
    late = victims(victim("l", 3, started="2025-06-01T00:00:00Z"))
    assert pick_one_node({"early": early, "late": late}, NOW) == "late"
    assert pick_one_node({"first": late, "second": late}, NOW) == "first"
    assert pick_one_node({}, NOW) == ""


def test_candidates_keep_their_node() -> None:
    assert Candidate("n", victims()).node == "n"


# -- the nominator ---------------------------------------------------------------------------


def pending(name: str, priority: int = 0, nominated: str = "") -> PodView:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"priority": priority},
        "status": {"nominatedNodeName": nominated} if nominated else {},
    }
    return PodView(raw)


def test_nominations_follow_status_and_in_memory_overrides() -> None:
    nominator = Nominator()
    key = "default/p"
    nominator.nominate(key, "n1", pending("p", 10), {"cpu": 1000})
    # an update that has not caught up with the status write keeps the nomination
    nominator.pod_updated(key, pending("p", 10), pending("p", 10), {"cpu": 1000})
    assert nominator.node_of(key) == "n1"
    # the status names another node
    nominator.pod_updated(key, pending("p", 10), pending("p", 10, "n2"), {"cpu": 1000})
    assert nominator.node_of(key) == "n2"
    # the status lost it: the nomination goes
    nominator.pod_updated(key, pending("p", 10, "n2"), pending("p", 10), {"cpu": 1000})
    assert nominator.node_of(key) == ""
    assert len(nominator) == 0


def test_only_nominated_pods_of_at_least_the_priority_reserve_room() -> None:
    nominator = Nominator()
    nominator.nominate("default/high", "n1", pending("high", 10), {"cpu": 1})
    nominator.nominate("default/low", "n1", pending("low", 1), {"cpu": 1})
    nominator.nominate("default/elsewhere", "n2", pending("elsewhere", 10), {"cpu": 1})
    reserved = nominator.reserving_for(pending("me", 5), "n1")
    assert [n.pod.name for n in reserved] == ["high"]
    assert nominator.reserving_for(pending("high", 10), "n1") == []  # not itself
    nominator.delete("default/high")
    assert [n.pod.name for n in nominator.for_node("n1")] == ["low"]
    nominator.nominate("default/low", "", pending("low", 1), {})
    assert nominator.for_node("n1") == []
