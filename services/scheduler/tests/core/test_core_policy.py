"""GPU policies: numa (items 21-22), mutex (23), topology-aware (24), weights (36), sort chains."""

from __future__ import annotations

import pytest

from hami_protocol.errors import ValidationError
from hami_protocol.pod.devices import PodSingleDevice
from hami_protocol.pod.policy import GpuPolicy, ScoringWeights, parse_pod_policy
from hami_scheduler.core import (
    DeviceSelectors,
    DeviceUsage,
    FitContext,
    NodeUsage,
    decide_node,
    device_score,
    fit_request,
    sort_devices,
)
from hami_scheduler.core.topology import EXACT_SUBSET_LIMIT, best_subset, worst_connected

from ..core_helpers import dev, gpu, node, plan_of, req, uuids

NUMA_BIND = {"nvidia.com/numa-bind": "true"}


def chosen(decision_devices: PodSingleDevice | None) -> list[list[str]]:
    assert decision_devices is not None
    return [uuids(segment) for segment in decision_devices]


def test_item_21_numa_bind_takes_two_devices_of_one_numa_node() -> None:
    devices = [dev("dev-0", numa=1), dev("dev-1", numa=1), dev("dev-2", numa=0)]
    ctx = FitContext(selectors=DeviceSelectors(numa_bind=True))
    result = fit_request(devices, req(2, mem=1), ctx)
    assert uuids(result.devices) == ["dev-1", "dev-0"]
    decision = decide_node(node("n", devices), plan_of([gpu(2, mem=1)], annotations=NUMA_BIND))
    assert chosen(decision.devices.get("NVIDIA")) == [["dev-1", "dev-0"]]


def _scored(name: str, numa: int, used: int) -> DeviceUsage:
    # count 10, nothing else used: device score = 10 × used / 10 = used.
    return dev(name, numa=numa, used=used, count=10, mem=1000)


def test_item_22_numa_bind_needs_numa_grouping() -> None:
    a, b, c = _scored("A", 0, 5), _scored("B", 0, 1), _scored("C", 1, 3)
    ctx = FitContext(selectors=DeviceSelectors(numa_bind=True))
    by_score_only = sort_devices([a, b, c], [5.0, 1.0, 3.0], GpuPolicy(("spread",)))
    assert uuids(by_score_only) == ["A", "C", "B"]
    ungrouped = fit_request(by_score_only, req(2, mem=1), ctx)
    assert not ungrouped.ok
    assert "NumaNotFit" in ungrouped.reason

    n = node("n", [a, b, c])
    spread_bound = {"hami.io/gpu-scheduler-policy": "spread", **NUMA_BIND}
    decision = decide_node(n, plan_of([gpu(2, mem=1)], annotations=spread_bound))
    assert sorted(chosen(decision.devices.get("NVIDIA"))[0]) == ["A", "B"]


def test_item_22_without_numa_bind_spread_takes_the_idlest_anywhere() -> None:
    n = node("n", [_scored("A", 0, 5), _scored("B", 0, 1), _scored("C", 1, 3)])
    spread = {"hami.io/gpu-scheduler-policy": "spread"}
    decision = decide_node(n, plan_of([gpu(1, mem=1)], annotations=spread))
    assert chosen(decision.devices.get("NVIDIA")) == [["B"]]


MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}


def test_item_23_mutex_takes_only_idle_devices() -> None:
    n = node("n", [dev("used", used=1, index=0), dev("idle", index=1)])
    one = decide_node(n, plan_of([gpu(1, mem=100, cores=10)], annotations=MUTEX))
    assert chosen(one.devices.get("NVIDIA")) == [["idle"]]
    two = decide_node(n, plan_of([gpu(2, mem=100, cores=10)], annotations=MUTEX))
    assert not two.fits
    assert two.reason == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"
    )


TOPOLOGY = {"hami.io/gpu-scheduler-policy": "topology-aware"}


def _triangle(d01: int, d02: int, d12: int) -> NodeUsage:
    pairs = {
        "dev-0": {"dev-1": d01, "dev-2": d02},
        "dev-1": {"dev-0": d01, "dev-2": d12},
        "dev-2": {"dev-0": d02, "dev-1": d12},
    }
    devices = [dev("dev-0"), dev("dev-1"), dev("dev-2")]
    return node("n", devices, pair_scores=pairs)


@pytest.mark.parametrize(
    ("scores", "nums", "expected"),
    [
        pytest.param((100, 200, 150), 1, ["dev-1"], id="one-worst-connected"),
        pytest.param((100, 200, 150), 2, ["dev-0", "dev-2"], id="two-best-pair"),
        pytest.param((-5, -3, -1), 1, ["dev-0"], id="negative-one"),
        pytest.param((-5, -3, -1), 2, ["dev-1", "dev-2"], id="negative-two"),
        pytest.param((100, 200, 150), 3, ["dev-0", "dev-1", "dev-2"], id="all-three"),
    ],
)
def test_item_24_topology_aware(
    scores: tuple[int, int, int], nums: int, expected: list[str]
) -> None:
    n = _triangle(*scores)
    decision = decide_node(n, plan_of([gpu(nums, mem=100)], annotations=TOPOLOGY))
    assert decision.fits
    assert sorted(chosen(decision.devices.get("NVIDIA"))[0]) == expected


def test_item_24_all_zero_scores_still_fit() -> None:
    n = _triangle(0, 0, 0)
    for nums in (1, 2):
        decision = decide_node(n, plan_of([gpu(nums, mem=100)], annotations=TOPOLOGY))
        assert decision.fits
        assert len(chosen(decision.devices.get("NVIDIA"))[0]) == nums


def test_item_24_without_any_score_annotation_still_fits() -> None:
    n = node("n", [dev("a"), dev("b"), dev("c")])
    decision = decide_node(n, plan_of([gpu(2, mem=100)], annotations=TOPOLOGY))
    assert decision.fits


def test_topology_counts_only_fitting_devices() -> None:
    pairs = {"dev-0": {"dev-1": 500}, "dev-1": {"dev-0": 500}}
    devices = [dev("dev-0", usedmem=8000), dev("dev-1"), dev("dev-2")]
    decision = decide_node(
        node("n", devices, pair_scores=pairs), plan_of([gpu(2, mem=100)], annotations=TOPOLOGY)
    )
    assert sorted(chosen(decision.devices.get("NVIDIA"))[0]) == ["dev-1", "dev-2"]


def test_topology_large_sets_use_the_bounded_search() -> None:
    # Two NVLink cliques of 8 joined by weak links: the best 8 is one clique.
    names = [f"g{i:02d}" for i in range(16)]

    def score(a: str, b: str) -> int:
        same = (int(a[1:]) < 8) == (int(b[1:]) < 8)
        return 300 if same else 10

    picked = best_subset(names, 8, score)
    assert picked in (tuple(range(8)), tuple(range(8, 16)))
    assert EXACT_SUBSET_LIMIT < 12870  # C(16, 8): this case took the bounded path


def test_topology_exact_search_breaks_ties_by_candidate_order() -> None:
    assert best_subset(["a", "b", "c"], 2, lambda a, b: 0) == (0, 1)
    assert worst_connected(["a", "b", "c"], lambda a, b: 0) == 0


def test_item_36_invalid_weights_fail_the_filter() -> None:
    with pytest.raises(ValidationError):
        parse_pod_policy({"hami.io/device-scoring-weights": "slot=1,core=1"})


def test_item_36_weights_change_the_device_choice() -> None:
    slots_busy = dev("slots", used=5, count=10)
    memory_busy = dev("memory", usedmem=6000, mem=8000)
    n = node("n", [slots_busy, memory_busy])
    default = decide_node(n, plan_of([gpu(1, mem=100)]))
    assert chosen(default.devices.get("NVIDIA")) == [["slots"]]
    weighted = decide_node(
        n,
        plan_of(
            [gpu(1, mem=100)],
            annotations={"hami.io/device-scoring-weights": "slot=1,core=1,memory=0"},
        ),
    )
    assert chosen(weighted.devices.get("NVIDIA")) == [["memory"]]


def test_device_score_formula_and_q2() -> None:
    d = dev("d", used=3, count=10, usedcores=40, cores=100, usedmem=6144, mem=16384)
    assert device_score(d) == pytest.approx(10 * (0.3 + 0.4 + 0.375))
    # Q2: the request counts only when its type equals the device model exactly.
    assert device_score(d, [req(mem=4096, cores=20)]) == device_score(d)
    same_type = req(mem=4096, cores=20, type=d.type)
    assert device_score(d, [same_type]) == pytest.approx(10 * (0.4 + 0.6 + 0.625))
    weights = ScoringWeights(slot=2, core=0, memory=1)
    assert device_score(d, (), weights) == pytest.approx(10 * (0.6 + 0.375))
    assert device_score(dev("zero", count=0)) == 0.0


def _order(policy: str, *, numa_bind: bool = False) -> list[str]:
    devices = [
        dev("a", numa=1, index=0, used=1),
        dev("b", numa=0, index=1, used=3),
        dev("c", numa=1, index=2, used=2),
        dev("d", numa=0, index=3, used=2),
    ]
    scores = [1.0, 3.0, 2.0, 2.0]
    return uuids(
        sort_devices(devices, scores, GpuPolicy(tuple(policy.split(","))), numa_bind=numa_bind)
    )


@pytest.mark.parametrize(
    ("policy", "numa_bind", "expected"),
    [
        ("binpack", False, ["a", "d", "c", "b"]),
        ("spread", False, ["b", "d", "c", "a"]),
        ("topology-aware", False, ["b", "d", "c", "a"]),
        ("mutex", False, ["b", "d", "c", "a"]),
        ("binpack", True, ["a", "c", "d", "b"]),
        ("spread", True, ["b", "d", "c", "a"]),
        ("numa", False, ["b", "d", "a", "c"]),
        ("binpack,numa", False, ["a", "d", "c", "b"]),
        ("numa,binpack", False, ["d", "b", "a", "c"]),
        ("spread,numa", False, ["b", "d", "c", "a"]),
        ("binpack,numa", True, ["d", "b", "a", "c"]),
        ("mutex,topology-aware", False, ["b", "c", "d", "a"]),
    ],
)
def test_device_order_per_policy(policy: str, numa_bind: bool, expected: list[str]) -> None:
    assert _order(policy, numa_bind=numa_bind) == expected
