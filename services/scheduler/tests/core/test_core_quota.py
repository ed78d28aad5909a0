"""Namespace quota on device memory and cores: items 31-32 and the quota rules of §3.3."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.pod.devices import ContainerDevice, DeviceUsageSummary
from hami_protocol.vendor.table import DEFAULT_VENDORS, NVIDIA
from hami_scheduler.core import (
    PodQuotaTally,
    QuotaLedger,
    QuotaLimits,
    VendorQuota,
    decide_node,
    limits_from_hard,
    pod_quota_total,
    select_node,
)

from ..core_helpers import dev, gpu, node, plan_of

NVIDIA_VENDOR = next(row for row in DEFAULT_VENDORS if row.common_word == NVIDIA)
# The chart's test configuration renames the resources; quota keys follow the names.
HAMI_NAMED = dataclasses.replace(
    NVIDIA_VENDOR, memory_resource="hami.io/gpumem", cores_resource="hami.io/gpucores"
)


def _quota(memory: int | None, cores: int | None) -> dict[str, VendorQuota]:
    return {NVIDIA: VendorQuota(limits=QuotaLimits(memory=memory, cores=cores))}


def test_item_31_limits_from_a_resource_quota() -> None:
    hard = {"limits.hami.io/gpucores": "200", "limits.hami.io/gpumem": "4000"}
    assert limits_from_hard(hard, HAMI_NAMED) == QuotaLimits(memory=4000, cores=200)


def test_item_31_two_gpus_within_quota_fit_beyond_do_not() -> None:
    nodes = {"n": node("n", [dev("g0"), dev("g1")])}
    quota = _quota(4000, 200)
    fits = plan_of([gpu(2, mem=2000, cores=100)], quota=quota)
    assert select_node(fits, nodes).node == "n"
    over = plan_of([gpu(2, mem=3000, cores=60)], quota=quota)
    selection = select_node(over, nodes)
    assert selection.node is None
    assert selection.failed["n"] == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ResourceQuotaNotFit"
    )


@pytest.mark.parametrize(("limit", "expected"), [(2000, "small"), (1500, None)])
def test_item_32_whole_card_request_against_a_memory_quota(
    limit: int, expected: str | None
) -> None:
    devices = [
        dev("small", mem=2000),
        dev("d8", mem=8000),
        dev("d4", mem=4000),
        dev("d6", mem=6000),
    ]
    plan = plan_of([gpu(1)], quota=_quota(limit, None))
    decision = decide_node(node("n", devices), plan)
    if expected is None:
        assert not decision.fits
        assert decision.reason == "4/4 ResourceQuotaNotFit"
    else:
        nvidia = decision.devices.get("NVIDIA")
        assert nvidia is not None
        assert [d.uuid for d in nvidia[0]] == [expected]


def test_used_quota_counts_against_the_limit() -> None:
    plan = plan_of(
        [gpu(1, mem=1000)],
        quota={NVIDIA: VendorQuota(QuotaLimits(memory=4000), used_memory=3500)},
    )
    assert decide_node(node("n", [dev("g0")]), plan).reason == "1/1 ResourceQuotaNotFit"


def test_explicit_zero_blocks_and_missing_is_unlimited() -> None:
    assert limits_from_hard({"limits.nvidia.com/gpumem": "0"}, NVIDIA_VENDOR) == QuotaLimits(0)
    assert limits_from_hard({}, NVIDIA_VENDOR) == QuotaLimits()
    assert not VendorQuota(QuotaLimits(memory=0)).allows(1, 0)
    assert VendorQuota(QuotaLimits()).allows(10**9, 10**9)
    blocked = plan_of([gpu(1, mem=1)], quota=_quota(0, None))
    assert not decide_node(node("n", [dev("g0")]), blocked).fits
    unlimited = plan_of([gpu(1, mem=1)], quota={NVIDIA: VendorQuota()})
    assert unlimited.quota_for(NVIDIA) is None
    assert decide_node(node("n", [dev("g0")]), unlimited).fits


def test_only_integer_values_count() -> None:
    hard = {"limits.nvidia.com/gpumem": "1.5", "limits.nvidia.com/gpucores": "2k"}
    assert limits_from_hard(hard, NVIDIA_VENDOR) == QuotaLimits(memory=None, cores=2000)
    assert limits_from_hard({"limits.nvidia.com/gpumem": "junk"}, NVIDIA_VENDOR) == QuotaLimits()


def test_memory_limit_scales_with_memory_factor() -> None:
    doubled = dataclasses.replace(NVIDIA_VENDOR, memory_factor=2)
    assert limits_from_hard({"limits.nvidia.com/gpumem": "1000"}, doubled).memory == 2000


def test_several_quotas_the_smaller_limit_wins() -> None:
    merged = QuotaLimits(memory=4000).merged(QuotaLimits(memory=3000, cores=50))
    assert merged == QuotaLimits(memory=3000, cores=50)


def test_pod_total_counts_init_peak_not_sum() -> None:
    init = (ContainerDevice("g0", NVIDIA, 5000, 10),)
    app = (ContainerDevice("g0", NVIDIA, 4000, 30),)
    assert pod_quota_total((init, app), init_count=1) == (5000, 30)


def test_quota_sees_the_init_peak_during_app_fitting() -> None:
    n = node("n", [dev("g0", mem=16000)])
    plan = plan_of([gpu(1, mem=4000)], init=[gpu(1, mem=5000)], quota=_quota(5000, None))
    assert decide_node(n, plan).fits
    tighter = plan_of([gpu(1, mem=4000)], init=[gpu(1, mem=5000)], quota=_quota(4500, None))
    assert not decide_node(n, tighter).fits


def test_ledger_adds_and_removes_exactly() -> None:
    ledger = QuotaLedger()
    usage = (
        DeviceUsageSummary("g0", NVIDIA, 2000, 30, 1),
        DeviceUsageSummary("g1", NVIDIA, 1000, 5, 1),
    )
    ledger.add("team", usage)
    assert ledger.used("team", NVIDIA) == (3000, 35)
    assert ledger.used("other", NVIDIA) == (0, 0)
    view = ledger.view("team", NVIDIA, QuotaLimits(memory=4000))
    assert view.allows(1000, 0)
    assert not view.allows(1001, 0)
    ledger.remove("team", usage)
    assert ledger.used("team", NVIDIA) == (0, 0)


_DEVICES = st.builds(
    ContainerDevice,
    uuid=st.sampled_from(["g0", "g1", "g2"]),
    type=st.just(NVIDIA),
    usedmem=st.integers(0, 5000),
    usedcores=st.integers(0, 100),
)


@given(
    st.lists(st.lists(_DEVICES, max_size=3).map(tuple), max_size=5),
    st.lists(_DEVICES, max_size=3),
    st.integers(0, 6),
)
def test_incremental_tally_equals_collapsing_the_whole_pod(
    decided: list[tuple[ContainerDevice, ...]], extra: list[ContainerDevice], init_count: int
) -> None:
    tally = PodQuotaTally(decided, init_count=init_count)
    whole = (*decided, tuple(extra))
    expected = pod_quota_total(whole, init_count=init_count)
    assert tally.total_with(extra, init=len(decided) < init_count) == expected
