"""Namespace quota for every vendor with memory or cores resources, through ``decide_node``:
the standard loop checks each device (as HAMi's NVIDIA and Cambricon fits do), a vendor fit of
its own (MetaX sGPU here) has its whole choice checked; both refuse ``ResourceQuotaNotFit``."""

from __future__ import annotations

from typing import Any

import pytest

from hami_protocol.vendor.table import DEFAULT_VENDORS, Vendor
from hami_scheduler.core import QuotaLimits, VendorQuota, decide_node, limits_from_hard

from ..core_helpers import dev, node, plan_of

# word → (device model, the container's limits, MiB the request is, cores it asks)
CASES: dict[str, tuple[str, dict[str, str], int, int]] = {
    "MLU": ("MLU", {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"}, 1024, 0),
    "DCU": ("DCU", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000"}, 1000, 0),
    "Mthreads": (
        "MTT S4000",
        {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4"},
        2048,
        0,
    ),
    "AMD": (
        "AMD",
        {"amd.com/gpu": "1", "amd.com/gpumem": "1000", "amd.com/gpucores": "30"},
        1000,
        30,
    ),
    "Metax-SGPU": (
        "MXC500",
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "2", "metax-tech.com/vcore": "30"},
        2048,
        30,
    ),
}


def vendor(word: str) -> Vendor:
    return next(row for row in DEFAULT_VENDORS if row.common_word == word)


def decide(word: str, limits: QuotaLimits, used: tuple[int, int] = (0, 0)) -> Any:
    model, container_limits, _, _ = CASES[word]
    devices = [dev(f"{word}-{i}", vendor=word, model=model, mem=16384, count=8) for i in range(2)]
    quota = {word: VendorQuota(limits=limits, used_memory=used[0], used_cores=used[1])}
    plan = plan_of([{"resources": {"limits": container_limits}}], quota=quota)
    return decide_node(node("n", devices), plan)


@pytest.mark.parametrize("word", CASES)
def test_a_vendor_pod_fits_its_quota_exactly_and_not_one_unit_more(word: str) -> None:
    _, _, memory, cores = CASES[word]
    assert decide(word, QuotaLimits(memory=memory, cores=cores or None)).fits
    over = decide(word, QuotaLimits(memory=memory), used=(1, 0))
    assert not over.fits
    assert "ResourceQuotaNotFit" in over.reason


@pytest.mark.parametrize("word", [w for w, case in CASES.items() if case[3]])
def test_a_vendor_cores_quota_counts_what_its_namespace_holds(word: str) -> None:
    _, _, _, cores = CASES[word]
    assert decide(word, QuotaLimits(cores=cores + 10), used=(0, 10)).fits
    over = decide(word, QuotaLimits(cores=cores + 10), used=(0, 11))
    assert not over.fits
    assert "ResourceQuotaNotFit" in over.reason


@pytest.mark.parametrize("word", CASES)
def test_a_quota_limit_reads_in_the_vendors_memory_unit(word: str) -> None:
    row = vendor(word)
    hard = {f"limits.{row.memory_resource}": "3", f"limits.{row.cores_resource}": "7"}
    cores = 7 if row.cores_resource else None
    assert limits_from_hard(hard, row) == QuotaLimits(memory=3 * row.memory_unit_mib, cores=cores)
