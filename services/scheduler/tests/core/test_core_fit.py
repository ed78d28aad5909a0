"""Single-container device fit: contract §8 items 9-20 and 25, plus the check order."""

from __future__ import annotations

import pytest

from hami_protocol.node.registry import MigPlacement, MigProfile
from hami_protocol.pod.policy import parse_device_cordon, parse_pod_policy
from hami_scheduler.core import (
    DeviceSelectors,
    FitContext,
    decide_node,
    device_refusal,
    fit_request,
    format_reasons,
)
from hami_scheduler.core.mig import MigGpu
from hami_scheduler.core.reasons import (
    NODE_INSUFFICIENT_DEVICE,
)

from ..core_helpers import dev, gpu, node, plan_of, req, uuids


def test_item_09_two_empty_devices_the_last_one_is_taken() -> None:
    devices = [dev("dev-0", mem=128), dev("dev-1", mem=128)]
    result = fit_request(devices, req(mem=64, cores=50))
    assert result.ok
    assert uuids(result.devices) == ["dev-1"]
    granted = result.devices[0]
    assert (granted.type, granted.usedmem, granted.usedcores) == ("NVIDIA", 64, 50)


def test_item_09_through_a_whole_node_decision() -> None:
    n = node("n", [dev("dev-0", mem=128), dev("dev-1", mem=128)])
    decision = decide_node(n, plan_of([gpu(1, mem=64, cores=50)]))
    assert decision.fits
    nvidia = decision.devices.get("NVIDIA")
    assert nvidia is not None
    assert uuids(nvidia[0]) == ["dev-1"]


FAILURES = [
    pytest.param(
        [dev("d", mem=128)],
        req(mem=512),
        FitContext(),
        "1/1 CardInsufficientMemory",
        id="item10-memory",
    ),
    pytest.param(
        [dev("d", usedcores=100)],
        req(mem=1, cores=50),
        FitContext(),
        "1/1 CardInsufficientCore",
        id="item11-cores",
    ),
    pytest.param(
        [dev("d")],
        req(mem=1, type="OtherType"),
        FitContext(),
        "1/1 CardTypeMismatch",
        id="item12-type",
    ),
    pytest.param(
        [dev("dev-1")],
        req(mem=1),
        FitContext(selectors=DeviceSelectors(use_uuids=("dev-0",))),
        "1/1 CardUuidMismatch",
        id="item13-use-uuid",
    ),
    pytest.param(
        [dev("dev-0")],
        req(mem=1),
        FitContext(selectors=DeviceSelectors(nouse_uuids=("dev-0",))),
        "1/1 CardUuidMismatch",
        id="item13-nouse-uuid",
    ),
    pytest.param(
        [dev("d", used=100, count=100)],
        req(mem=1),
        FitContext(),
        "1/1 CardTimeSlicingExhausted",
        id="item14-slots",
    ),
    pytest.param(
        [dev("d", cores=4)],
        req(mem=1, cores=200),
        FitContext(),
        "1/1 CardInsufficientCore",
        id="item15-200-on-4",
    ),
    pytest.param(
        [dev("d", used=20, count=100)],
        req(mem=1, cores=100),
        FitContext(),
        "1/1 ExclusiveDeviceAllocateConflict",
        id="item16-exclusive",
    ),
    pytest.param(
        [dev("d", usedcores=100)],
        req(mem=1, cores=0),
        FitContext(),
        "1/1 CardComputeUnitsExhausted",
        id="item17-exhausted",
    ),
    pytest.param(
        [dev("d")],
        req(2, mem=1),
        FitContext(),
        "1/1 AllocatedCardsInsufficientRequest",
        id="item18-two-of-one",
    ),
    pytest.param(
        [dev("a"), dev("b")],
        req(3, mem=1),
        FitContext(),
        "2/2 AllocatedCardsInsufficientRequest",
        id="item18-three-of-two",
    ),
    pytest.param(
        [dev("d", health=False)],
        req(mem=1),
        FitContext(),
        "1/1 CardNotHealth",
        id="item19-unhealthy",
    ),
    pytest.param(
        [dev("a"), dev("b")],
        req(mem=1),
        FitContext(cordon=frozenset({"a", "b"})),
        "2/2 CardCordoned",
        id="item20-all-cordoned",
    ),
]


@pytest.mark.parametrize(("devices", "request_", "ctx", "reason"), FAILURES)
def test_items_10_to_20_refusals(devices, request_, ctx, reason) -> None:  # type: ignore[no-untyped-def]
    result = fit_request(devices, request_, ctx)
    assert not result.ok
    assert result.devices == ()
    assert result.reason == reason


def test_item_13_uuid_annotations_from_the_pod() -> None:
    policy = parse_pod_policy({"nvidia.com/use-gpuuuid": "dev-0"})
    ctx = FitContext(selectors=DeviceSelectors.from_policy(policy))
    assert fit_request([dev("dev-1")], req(mem=1), ctx).reason == "1/1 CardUuidMismatch"
    assert fit_request([dev("dev-0")], req(mem=1), ctx).ok


def test_item_15_cores_above_100_are_clamped() -> None:
    result = fit_request([dev("d")], req(mem=1, cores=120))
    assert result.ok
    assert result.devices[0].usedcores == 100


def test_item_18_node_level_request_beyond_device_count() -> None:
    n = node("n", [dev("only")])
    assert decide_node(n, plan_of([gpu(2, mem=1)])).reason == NODE_INSUFFICIENT_DEVICE


def test_item_20_cordon_annotation_skips_the_cordoned_device() -> None:
    cordon = parse_device_cordon("dev-1, ")
    assert cordon == frozenset({"dev-1"})
    result = fit_request([dev("dev-0"), dev("dev-1")], req(mem=1), FitContext(cordon=cordon))
    assert uuids(result.devices) == ["dev-0"]


def test_item_20_cordon_does_not_touch_existing_usage() -> None:
    held = dev("dev-1", used=2, usedmem=3000, usedcores=40)
    n = node("n", [dev("dev-0"), held], cordon={"dev-1"})
    assert n.device("dev-1") == held
    assert (n.totals.used, n.totals.usedmem, n.totals.usedcores) == (2, 3000, 40)
    decision = decide_node(n, plan_of([gpu(1, mem=100)]))
    nvidia = decision.devices.get("NVIDIA")
    assert nvidia is not None
    assert uuids(nvidia[0]) == ["dev-0"]


def test_item_25_mig_device_without_registered_profiles_is_never_handed_out() -> None:
    # A MIG-mode device the layout knows no profiles for is never shared as a whole GPU.
    mig = dev("mig", mem=8192, mode="mig")
    assert fit_request([mig], req(pct=50)).reason == "1/1 CardNotHealth"
    assert fit_request([mig], req(mem=512)).reason == "1/1 CardNotHealth"
    decision = decide_node(node("n", [mig]), plan_of([gpu(1, pct=50)]))
    assert not decision.fits


def test_mig_refusal_comes_after_the_capacity_checks() -> None:
    mig = dev("mig", mem=1024, mode="mig")
    small = MigProfile("1g.1gb", 512, 15, 1, (MigPlacement(0, 1),))
    ctx = FitContext(mig_gpus={"mig": MigGpu("mig", 1024, (small,))})
    assert fit_request([mig], req(mem=4096), ctx).reason == "1/1 CardInsufficientMemory"
    assert fit_request([mig], req(mem=1000), ctx).reason.startswith(
        "1/1 CardMigTopologyInfeasible — mig has no MIG profile of 1000 MiB"
    )


def test_vgpu_mode_annotation_filters_by_device_mode() -> None:
    policy = parse_pod_policy({"nvidia.com/vgpu-mode": "mig"})
    ctx = FitContext(selectors=DeviceSelectors.from_policy(policy))
    assert fit_request([dev("d")], req(mem=1), ctx).reason == "1/1 CardTypeMismatch"


def test_gputype_annotations_match_model_substrings_case_insensitively() -> None:
    devices = [dev("a", model="NVIDIA A100-SXM4-40GB"), dev("b", model="NVIDIA-Tesla T4")]
    use = FitContext(selectors=DeviceSelectors(use_types=("a100",)))
    assert uuids(fit_request(devices, req(mem=1), use).devices) == ["a"]
    nouse = FitContext(selectors=DeviceSelectors(nouse_types=("T4",)))
    assert uuids(fit_request(devices, req(mem=1), nouse).devices) == ["a"]


def test_percentage_request_takes_a_share_of_each_device() -> None:
    result = fit_request([dev("d", mem=16000)], req(pct=25))
    assert result.devices[0].usedmem == 4000


def test_first_failing_check_wins_and_reasons_are_sorted() -> None:
    devices = [
        dev("a", health=False, usedmem=8000),
        dev("b", mem=100),
        dev("c", mem=100),
        dev("d", usedcores=100),
    ]
    result = fit_request(devices, req(mem=500, cores=10))
    assert result.reason == (
        "1/4 CardInsufficientCore, 2/4 CardInsufficientMemory, 1/4 CardNotHealth"
    )


def test_device_refusal_matches_the_fit_for_a_single_device() -> None:
    cases = [dev("d", mem=128), dev("d", usedcores=100), dev("d", health=False), dev("d")]
    for device in cases:
        result = fit_request([device], req(mem=512, cores=0))
        refusal = device_refusal(device, req(mem=512, cores=0))
        assert (refusal == "") == result.ok
        if refusal:
            assert result.reason == f"1/1 {refusal}"


def test_format_reasons_skips_zero_counts() -> None:
    assert format_reasons({"B": 1, "A": 2, "C": 0}, 3) == "2/3 A, 1/3 B"
    assert format_reasons({}, 3) == ""
