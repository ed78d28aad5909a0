"""The preempt verb's victim choice (:mod:`hami_scheduler.core.preempt`): small hand-built nodes,
then properties over random nodes — every answer makes the preemptor fit through the same rule
the filter uses, no victim can be spared alone, none is of the preemptor's priority or above."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.core import NodeUsage, apply_usage, reasons
from hami_scheduler.core.joint.hints import NO_JOINT
from hami_scheduler.core.joint.nics import NicPodUsage, build_nic_usage
from hami_scheduler.core.joint.route import decide_on
from hami_scheduler.core.preempt import (
    NodeState,
    Occupant,
    Victims,
    best_node,
    importance,
    preference,
    select_victims,
)

from ..core_helpers import dev, gpu, node, plan_of
from ..core_joint_helpers import GPU_MEM, SWITCHES, f_layout, gpu_id, plan_and_request, pod_json

HIGH = 100


def held(uuid: str, mem: int, cores: int = 0, slots: int = 1) -> DeviceUsageSummary:
    return DeviceUsageSummary(uuid, "NVIDIA", mem, cores, slots)


def pod(
    uid: str,
    priority: int,
    *usage: DeviceUsageSummary,
    started: float | None = 1.0,
    pdb: bool = False,
    nics: NicPodUsage | None = None,
) -> Occupant:
    return Occupant(uid, priority, started, tuple(usage), nics=nics, violates_pdb=pdb)


def state(idle: NodeUsage, occupants: Sequence[Occupant], *, name: str = "n1") -> NodeState:
    """The node as the cache would hold it: ``idle`` with every occupant's usage applied."""
    summaries = [summary for occupant in occupants for summary in occupant.usage]
    return NodeState(name, apply_usage(idle, summaries))


def one_gpu(mem: int = 8000, **kwargs: Any) -> NodeUsage:
    return node("n1", [dev("GPU-0", mem=mem, **kwargs)])


def two_gpus(**kwargs: Any) -> NodeUsage:
    return node("n1", [dev("GPU-0", **kwargs), dev("GPU-1", index=1, **kwargs)])


def choose(
    idle: NodeUsage,
    occupants: Sequence[Occupant],
    containers: Sequence[Mapping[str, Any]],
    *,
    priority: int = HIGH,
    annotations: Mapping[str, str] | None = None,
    required: Sequence[Occupant] = (),
) -> Victims | str:
    plan = plan_of(containers, annotations=annotations)
    return select_victims(
        state(idle, [*occupants, *required]),
        plan,
        NO_JOINT,
        priority=priority,
        occupants=occupants,
        required=required,
    )


def victims_of(result: Victims | str) -> tuple[str, ...]:
    assert isinstance(result, Victims), result
    return result.uids


# --- hand-built nodes ---------------------------------------------------------------------------


def test_the_pod_holding_the_memory_goes() -> None:
    low = pod("low", 0, held("GPU-0", 6000))
    assert victims_of(choose(one_gpu(), [low], [gpu(1, mem=4000)])) == ("low",)


def test_of_two_pods_where_one_must_go_the_lower_priority_one_goes() -> None:
    a, b = pod("a", 1, held("GPU-0", 3000)), pod("b", 2, held("GPU-0", 3000))
    assert victims_of(choose(one_gpu(), [a, b], [gpu(1, mem=4000)])) == ("a",)
    assert victims_of(choose(one_gpu(), [b, a], [gpu(1, mem=4000)])) == ("a",)


def test_among_equal_priorities_the_later_start_goes_and_unstarted_is_latest() -> None:
    early, late = (
        pod("early", 1, held("GPU-0", 3000), started=5.0),
        pod("late", 1, held("GPU-0", 3000), started=9.0),
    )
    assert victims_of(choose(one_gpu(), [early, late], [gpu(1, mem=4000)])) == ("late",)
    waiting = pod("waiting", 1, held("GPU-0", 3000), started=None)
    assert victims_of(choose(one_gpu(), [waiting, late], [gpu(1, mem=4000)])) == ("waiting",)


def test_the_pod_freeing_the_needed_card_goes_even_at_a_higher_priority() -> None:
    # GPU-1 is too small for the request whatever leaves it: its low-priority pod never helps.
    idle = node("n1", [dev("GPU-0", mem=8000), dev("GPU-1", mem=4000, index=1)])
    a, b = pod("a", 5, held("GPU-0", 6000)), pod("b", 1, held("GPU-1", 1000))
    assert victims_of(choose(idle, [a, b], [gpu(1, mem=6000)])) == ("a",)


def test_a_pod_on_a_card_the_preemptor_excludes_is_never_named() -> None:
    a, b = pod("a", 5, held("GPU-0", 6000)), pod("b", 0, held("GPU-1", 7000))
    pinned = {keys.NVIDIA_USE_GPUUUID: "GPU-0"}
    result = choose(two_gpus(), [a, b], [gpu(1, mem=4000)], annotations=pinned)
    assert victims_of(result) == ("a",)
    # Unpinned, the lower-priority pod on either card is enough.
    assert victims_of(choose(two_gpus(), [a, b], [gpu(1, mem=4000)])) == ("b",)


def test_a_pod_of_another_model_than_asked_is_never_named() -> None:
    idle = node("n1", [dev("GPU-0"), dev("GPU-1", index=1, model="NVIDIA-A100")])
    a, b = pod("a", 5, held("GPU-0", 6000)), pod("b", 0, held("GPU-1", 7000))
    wanted = {keys.NVIDIA_USE_GPUTYPE: "T4"}
    assert victims_of(choose(idle, [a, b], [gpu(1, mem=4000)], annotations=wanted)) == ("a",)


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    same = pod("same", HIGH, held("GPU-0", 6000))
    higher = pod("higher", HIGH + 1, held("GPU-0", 6000))
    for occupant in (same, higher):
        result = choose(one_gpu(), [occupant], [gpu(1, mem=4000)])
        assert result == "1/1 CardInsufficientMemory"


def test_a_multi_gpu_request_takes_a_pod_from_each_card() -> None:
    a, b = pod("a", 1, held("GPU-0", 6000)), pod("b", 2, held("GPU-1", 6000))
    c = pod("c", 0, held("GPU-1", 1000))
    assert victims_of(choose(two_gpus(), [a, b, c], [gpu(2, mem=4000)])) == ("b", "a")


def test_a_node_where_evicting_everything_does_not_help_is_refused() -> None:
    a = pod("a", 0, held("GPU-0", 6000))
    assert choose(two_gpus(), [a], [gpu(3, mem=1000)]) == reasons.NODE_INSUFFICIENT_DEVICE
    assert choose(one_gpu(), [a], [gpu(1, mem=9000)]) == "1/1 CardInsufficientMemory"
    # A higher-priority pod holds what would be needed.
    guard = pod("guard", HIGH, held("GPU-0", 5000))
    assert isinstance(choose(one_gpu(), [a, guard], [gpu(1, mem=4000)]), str)


def test_a_preemptor_that_fits_already_needs_no_victim() -> None:
    a = pod("a", 0, held("GPU-0", 1000))
    assert choose(one_gpu(), [a], [gpu(1, mem=4000)]) == Victims("n1", (), 0)


def test_pods_violating_a_pdb_are_spared_first() -> None:
    a = pod("a", 1, held("GPU-0", 3000), pdb=True)
    b = pod("b", 2, held("GPU-0", 3000))
    result = choose(one_gpu(), [a, b], [gpu(1, mem=4000)])
    assert victims_of(result) == ("b",)
    assert isinstance(result, Victims)
    assert result.pdb_violations == 0
    # When every choice violates, the violation is counted.
    both = choose(one_gpu(), [a, pod("b", 2, held("GPU-0", 3000), pdb=True)], [gpu(1, mem=4000)])
    assert victims_of(both) == ("a",)
    assert isinstance(both, Victims)
    assert both.pdb_violations == 1


def test_share_count_cores_and_exclusive_requests_free_what_they_need() -> None:
    # Two task slots, both taken: one pod must go.
    slots = [pod("a", 1, held("GPU-0", 100)), pod("b", 2, held("GPU-0", 100))]
    assert victims_of(choose(one_gpu(count=2), slots, [gpu(1, mem=1000)])) == ("a",)
    # Cores: 60 + 30 held, 50 asked.
    cores = [pod("a", 1, held("GPU-0", 100, 60)), pod("b", 2, held("GPU-0", 100, 30))]
    assert victims_of(choose(one_gpu(), cores, [gpu(1, mem=1000, cores=50)])) == ("a",)
    # An exclusive request (100 cores) needs the card to itself.
    assert victims_of(choose(one_gpu(), cores, [gpu(1, mem=1000, cores=100)])) == ("b", "a")


def test_kube_schedulers_victims_stay_and_count() -> None:
    offered = pod("cpu-hog", 3)  # holds no device: in-tree filters needed it gone
    low = pod("low", 0, held("GPU-0", 6000))
    result = choose(one_gpu(), [low], [gpu(1, mem=4000)], required=[offered])
    assert victims_of(result) == ("cpu-hog", "low")
    # Devices need nothing more: the offered victim alone.
    small = pod("small", 0, held("GPU-0", 1000))
    assert victims_of(choose(one_gpu(), [small], [gpu(1, mem=4000)], required=[offered])) == (
        "cpu-hog",
    )
    # An offered device holder frees its devices too.
    holder = pod("holder", 3, held("GPU-0", 6000))
    assert victims_of(choose(one_gpu(), [small], [gpu(1, mem=4000)], required=[holder])) == (
        "holder",
    )


def test_an_offered_victim_of_the_preemptors_priority_refuses_the_node() -> None:
    result = choose(one_gpu(), [], [gpu(1, mem=1000)], required=[pod("peer", HIGH)])
    assert isinstance(result, str)
    assert "not below the preemptor's 100" in result


def test_an_exclusive_pcie_claim_is_freed_by_evicting_its_holder() -> None:
    # GPUs 0 and 1 sit on switch p0; pod "claim" holds GPU-0 with an exclusive claim on p0, so
    # no other pod may take a GPU there, and pod "other" on GPU-1 does not stand in the way.
    idle = node("n1", [dev(gpu_id(i), mem=GPU_MEM, index=i) for i in range(2)])
    exclusive = NicPodUsage(claims=(("gpu", SWITCHES[0]),))
    claim = pod("claim", 1, held(gpu_id(0), 1000), nics=exclusive)
    other = pod("other", 0, held(gpu_id(1), 1000))
    occupants = [claim, other]
    node_state = NodeState(
        "n1", state(idle, occupants).gpus, build_nic_usage(f_layout(), [exclusive])
    )
    plan, request = plan_and_request(pod_json(gpus=1, rdma=None, hint=None, joint=None))
    assert "n1" in node_state.fleet().gpu_claimed
    assert not _fits(decide_on(plan, request, node_state.fleet(), "n1"))
    result = select_victims(node_state, plan, request, priority=HIGH, occupants=occupants)
    assert victims_of(result) == ("claim",)
    # Its eviction takes the claim away with its GPU usage.
    assert isinstance(result, Victims)
    freed = node_state.without(result.pods).nics
    assert freed is not None
    assert not freed.claims


def test_kube_schedulers_node_ranking() -> None:
    def victims(name: str, *priorities: int, pdb: int = 0) -> Victims:
        pods = tuple(pod(f"{name}{i}", p) for i, p in enumerate(priorities))
        return Victims(name, tuple(sorted(pods, key=importance)), pdb)

    fewer_pdb = victims("a", 9, 9, pdb=0)
    assert best_node([victims("b", 0, pdb=1), fewer_pdb]) == fewer_pdb
    lower_top = victims("c", 1, 1, 1)
    assert best_node([victims("d", 2), lower_top]) == lower_top
    lower_sum = victims("e", 1)
    assert best_node([victims("f", 1, 0), lower_sum]) == lower_sum
    assert best_node([]) is None
    assert preference(Victims("g", ())) < preference(victims("h", -5))


# --- properties ---------------------------------------------------------------------------------

MEMS = (1000, 2000, 3000, 4000, 6000)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[NodeUsage, list[Occupant], dict[str, Any], int]:
    cards = draw(st.integers(1, 3))
    idle = node(
        "n1",
        [
            dev(f"GPU-{i}", index=i, mem=draw(st.sampled_from([4000, 8000])), count=3)
            for i in range(cards)
        ],
    )
    occupants = []
    for i in range(draw(st.integers(0, 6))):
        cards_held = draw(st.lists(st.integers(0, cards - 1), min_size=1, max_size=2, unique=True))
        usage = [
            held(
                f"GPU-{card}",
                draw(st.sampled_from(MEMS)),
                draw(st.sampled_from([0, 20, 50])),
            )
            for card in cards_held
        ]
        occupants.append(
            pod(
                f"p{i}",
                draw(st.integers(0, 3)),
                *usage,
                started=draw(st.sampled_from([None, 1.0, 2.0, 3.0])),
                pdb=draw(st.booleans()),
            )
        )
    request = gpu(
        draw(st.integers(1, 2)),
        mem=draw(st.sampled_from(MEMS)),
        cores=draw(st.sampled_from([None, 30, 100])),
    )
    return idle, occupants, request, draw(st.integers(0, 4))


def _fits(verdict: object) -> bool:
    return not isinstance(verdict, str) and bool(getattr(verdict, "fits", False))


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_every_answer_fits_is_minimal_and_below_the_preemptor(
    scenario: tuple[NodeUsage, list[Occupant], dict[str, Any], int],
) -> None:
    idle, occupants, request, priority = scenario
    plan = plan_of([request])
    node_state = state(idle, occupants)
    result = select_victims(node_state, plan, NO_JOINT, priority=priority, occupants=occupants)

    def fits_without(gone: Sequence[Occupant]) -> bool:
        return _fits(decide_on(plan, NO_JOINT, node_state.without(gone).fleet(), "n1"))

    lower = [o for o in occupants if o.priority < priority]
    if isinstance(result, str):
        assert not fits_without(lower)
        return
    chosen = list(result.pods)
    assert all(victim.priority < priority for victim in chosen)
    assert len({victim.uid for victim in chosen}) == len(chosen)
    assert fits_without(chosen)
    for spared in chosen:
        assert not fits_without([v for v in chosen if v.uid != spared.uid]), spared.uid
    assert chosen == sorted(chosen, key=importance)
    assert result.pdb_violations == sum(victim.violates_pdb for victim in chosen)
    if fits_without([]):
        assert chosen == []


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_a_pod_holding_nothing_the_preemptor_can_use_is_never_named(
    scenario: tuple[NodeUsage, list[Occupant], dict[str, Any], int],
) -> None:
    idle, occupants, request, priority = scenario
    # The preemptor may use GPU-0 only; pods elsewhere (and pods holding nothing) free nothing.
    plan = plan_of([request], annotations={keys.NVIDIA_USE_GPUUUID: "GPU-0"})
    idle_pod = pod("idle", 0)
    everyone = [*occupants, idle_pod]
    result = select_victims(
        state(idle, everyone), plan, NO_JOINT, priority=priority, occupants=everyone
    )
    if isinstance(result, Victims):
        for victim in result.pods:
            assert any(summary.uuid == "GPU-0" for summary in victim.usage), victim.uid


@pytest.mark.parametrize("priority", [0, 1])
def test_no_lower_priority_pod_means_refused_unless_it_fits(priority: int) -> None:
    a = pod("a", 1, held("GPU-0", 6000))
    result = choose(one_gpu(), [a], [gpu(1, mem=4000)], priority=priority)
    assert result == "1/1 CardInsufficientMemory"
