"""Whole-pod decisions and node choice: items 26-30, quirk Q1, several vendors."""

from __future__ import annotations

import pytest

from hami_protocol.pod.devices import encode_pod_devices
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import pod_device_requests
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.core import (
    decide_node,
    decision_usage,
    pod_plan,
    select_node,
)

from ..core_helpers import dev, gpu, node, plain, plan_of, uuids


def test_item_26_node_score_is_usage_before_the_pod() -> None:
    busy = node("busy", [dev("d", count=10, used=5, mem=8000, usedmem=4000, usedcores=50)])
    decision = decide_node(busy, plan_of([gpu(1, mem=1000, cores=30)]))
    assert decision.fits
    assert decision.score == pytest.approx(15.0)
    empty = decide_node(node("empty", [dev("e")]), plan_of([gpu(1, mem=1000, cores=30)]))
    assert empty.score == 0.0


def test_node_score_is_zero_without_capacity() -> None:
    n = node("n", [dev("d", count=0, used=0)])
    assert n.base_score == 0.0


def _item_27_nodes() -> dict[str, object]:
    node1 = node("node1", [dev("device1", used=1, usedmem=2000, usedcores=25), dev("device2")])
    node2 = node("node2", [dev("device3"), dev("device4", used=1, usedmem=6000, usedcores=75)])
    return {"node1": node1, "node2": node2}


@pytest.mark.parametrize(
    ("node_policy", "gpu_policy", "expected_node", "expected_device"),
    [
        ("binpack", "binpack", "node2", "device4"),
        ("binpack", "spread", "node2", "device3"),
        ("spread", "binpack", "node1", "device1"),
        ("spread", "spread", "node1", "device2"),
    ],
)
def test_item_27_node_and_gpu_policy_combinations(
    node_policy: str, gpu_policy: str, expected_node: str, expected_device: str
) -> None:
    annotations = {
        "hami.io/node-scheduler-policy": node_policy,
        "hami.io/gpu-scheduler-policy": gpu_policy,
    }
    plan = plan_of([gpu(1, mem=1000, cores=20)], annotations=annotations)
    selection = select_node(plan, _item_27_nodes())  # type: ignore[arg-type]
    assert selection.node == expected_node
    assert selection.decision is not None
    nvidia = selection.decision.devices.get("NVIDIA")
    assert nvidia is not None
    assert uuids(nvidia[0]) == [expected_device]
    assert set(selection.fitting) == {"node1", "node2"}


def test_item_28_two_containers_spread_over_two_cards() -> None:
    n = node("n", [dev("uuid1", mem=8000), dev("uuid2", mem=8000)])
    plan = plan_of(
        [gpu(1, mem=8000), gpu(1, mem=1000)],
        annotations={"hami.io/gpu-scheduler-policy": "spread"},
    )
    decision = decide_node(n, plan)
    nvidia = decision.devices.get("NVIDIA")
    assert nvidia is not None
    assert [uuids(segment) for segment in nvidia] == [["uuid2"], ["uuid1"]]


def test_item_28_later_containers_see_earlier_ones() -> None:
    n = node("n", [dev("only", mem=8000)])
    decision = decide_node(n, plan_of([gpu(1, mem=5000), gpu(1, mem=5000)]))
    assert not decision.fits
    assert decision.reason == "1/1 CardInsufficientMemory"


def test_item_29_more_gpus_than_the_node_has() -> None:
    n = node("n", [dev(f"g{i}") for i in range(8)])
    decision = decide_node(n, plan_of([gpu(16)]))
    assert (decision.fits, decision.reason) == (False, "NodeInsufficientDevice")
    selection = select_node(plan_of([gpu(16)]), {"n": n})
    assert selection.node is None
    assert selection.failed == {"n": "NodeInsufficientDevice"}


def test_item_30_init_container_bigger_than_any_device_filters_the_node() -> None:
    n = node("n", [dev("g0", mem=8000), dev("g1", mem=8000)])
    too_big = plan_of([gpu(1, mem=1000)], init=[gpu(1, mem=9000)])
    assert decide_node(n, too_big).reason == "2/2 CardInsufficientMemory"
    too_many_cores = plan_of([gpu(1, mem=1000)], init=[gpu(1, mem=10, cores=100)])
    busy = node("busy", [dev("g0", used=1, usedcores=10)])
    assert not decide_node(busy, too_many_cores).fits


def test_item_30_init_and_app_take_the_maximum_not_the_sum() -> None:
    n = node("n", [dev("g0", mem=8000)])
    plan = plan_of([gpu(1, mem=4000)], init=[gpu(1, mem=5000)])
    decision = decide_node(n, plan)
    assert decision.fits
    nvidia = decision.devices.get("NVIDIA")
    assert nvidia is not None
    assert [uuids(segment) for segment in nvidia] == [["g0"], ["g0"]]
    (held,) = decision_usage(decision, plan)
    assert (held.uuid, held.usedmem, held.slots) == ("g0", 5000, 1)


def test_init_containers_are_each_fitted_alone() -> None:
    n = node("n", [dev("g0", mem=8000)])
    plan = plan_of([plain()], init=[gpu(1, mem=6000), gpu(1, mem=6000)])
    assert decide_node(n, plan).fits


def test_q1_one_segment_per_container_in_init_then_app_order() -> None:
    n = node("n", [dev("g0")])
    plan = plan_of([plain(), gpu(1, mem=100), plain()], init=[plain()])
    decision = decide_node(n, plan)
    nvidia = decision.devices.get("NVIDIA")
    assert nvidia is not None
    assert encode_pod_devices(nvidia) == ";;g0,NVIDIA,100,0:;;"


def test_vendors_the_pod_does_not_request_get_no_list() -> None:
    n = node("n", [dev("g0"), dev("m0", vendor="MLU", model="MLU-370")])
    decision = decide_node(n, plan_of([gpu(1, mem=100)]))
    assert decision.devices.vendors == ("NVIDIA",)


def test_several_vendors_in_one_pod() -> None:
    n = node(
        "n",
        [dev("g0"), dev("g1"), dev("m0", vendor="MLU", model="MLU-370", mem=24576)],
    )
    mlu_limits = {
        "cambricon.com/vmlu": "1",
        "cambricon.com/mlu.smlu.vmemory": "4",
        "cambricon.com/mlu.smlu.vcore": "10",
    }
    mlu = {"resources": {"limits": mlu_limits}}
    both = {
        "resources": {
            "limits": {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "100",
                **mlu_limits,
            }
        }
    }
    plan = plan_of([gpu(1, mem=100), mlu, both])
    decision = decide_node(n, plan)
    assert decision.fits
    nvidia, cambricon = decision.devices.get("NVIDIA"), decision.devices.get("MLU")
    assert nvidia is not None
    assert cambricon is not None
    assert [len(segment) for segment in nvidia] == [1, 0, 1]
    assert [uuids(segment) for segment in cambricon] == [[], ["m0"], ["m0"]]
    assert cambricon[1][0].usedmem == 4 * 256
    assert cambricon[1][0].type == "MLU"


def test_a_vendor_missing_from_the_node_is_insufficient_device() -> None:
    n = node("n", [dev("g0")])
    mlu = {"resources": {"limits": {"cambricon.com/vmlu": "1"}}}
    assert decide_node(n, plan_of([mlu])).reason == "NodeInsufficientDevice"


def test_pod_without_requests_fits_with_no_devices() -> None:
    n = node("n", [dev("g0")])
    requests = pod_device_requests(
        {"spec": {"containers": [{"name": "c"}]}}, vendors=DEFAULT_VENDORS
    )
    decision = decide_node(n, pod_plan(requests, parse_pod_policy({})))
    assert decision.fits
    assert decision.devices.entries == ()
