"""The quota cache: limits from ResourceQuota objects, usage from placed pods, and the check."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.vendor.table import DEFAULT_VENDORS, NVIDIA, vendor_by_word
from hami_webhook.quota.cache import QuotaCache
from hami_webhook.quota.check import QuotaLimit, check_quota

MEM = "nvidia.com/gpumem"
CORES = "nvidia.com/gpucores"
NV = vendor_by_word(DEFAULT_VENDORS, NVIDIA)
assert NV is not None


def quota(name: str, hard: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": hard}}


def placed(
    name: str,
    annotations: dict[str, str],
    *,
    namespace: str = "ns",
    init: int = 0,
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "annotations": annotations},
        "spec": {"initContainers": [{"name": f"i{i}"} for i in range(init)], "containers": []},
        "status": {"phase": phase},
    }


def nvidia(value: str) -> dict[str, str]:
    return {"hami.io/vgpu-devices-allocated": value}


def test_effective_limit_is_the_smallest_and_follows_updates_and_deletes() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_quota(quota("a", {f"limits.{MEM}": "4000", f"limits.{CORES}": "300"}))
    cache.set_quota(quota("b", {f"limits.{MEM}": "3000", "limits.cpu": "4"}))
    assert cache.limit("ns", MEM) == QuotaLimit("b", MEM, 3000)
    assert cache.limit("ns", CORES) == QuotaLimit("a", CORES, 300)
    assert cache.quota_count == 2
    cache.set_quota(quota("b", {f"limits.{MEM}": "5000"}))
    assert cache.limit("ns", MEM) == QuotaLimit("a", MEM, 4000)
    cache.set_quota(quota("a", {"limits.cpu": "1"}))  # no device keys any more
    assert cache.limit("ns", MEM) == QuotaLimit("b", MEM, 5000)
    assert cache.limit("ns", CORES) is None
    assert cache.quota_count == 1
    cache.remove_quota(quota("b", {}))
    assert cache.limit("ns", MEM) is None
    assert not cache.has_limits("ns")
    assert cache.quota_count == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("4000", 4000),
        ("4k", 4000),
        ("2000m", 2),
        (4096, 4096),
        ("0", 0),
        ("1.5", None),
        ("x", None),
    ],
)
def test_limit_values(raw: Any, expected: int | None) -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_quota(quota("q", {f"limits.{MEM}": raw}))
    found = cache.limit("ns", MEM)
    assert (found.limit if found else None) == expected


def test_malformed_quota_objects_are_ignored() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_quota({"metadata": {"namespace": "ns", "name": "q"}, "spec": "junk"})
    cache.set_quota({"metadata": "junk"})
    assert cache.quota_count == 0


def test_usage_from_allocated_annotations() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_pod(placed("a", nvidia("GPU-0,NVIDIA,1000,30:GPU-1,NVIDIA,1000,30:;")))
    cache.set_pod(placed("b", nvidia("GPU-0,NVIDIA,500,10:;;")))
    assert (cache.used("ns", MEM), cache.used("ns", CORES)) == (2500, 70)
    assert cache.pod_count == 2
    # an update replaces, never adds twice
    cache.set_pod(placed("b", nvidia("GPU-0,NVIDIA,700,10:;")))
    assert cache.used("ns", MEM) == 2700
    cache.set_pod(placed("a", nvidia("GPU-0,NVIDIA,1000,30:;"), phase="Succeeded"))
    assert (cache.used("ns", MEM), cache.pod_count) == (700, 1)
    cache.remove_pod(placed("b", {}))
    assert (cache.used("ns", MEM), cache.used("ns", CORES), cache.pod_count) == (0, 0, 0)
    cache.remove_pod(placed("never-seen", {}))
    assert cache.used("ns", MEM) == 0


def test_init_containers_count_at_their_peak() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    # init uses 3000 on GPU-0; two apps 1000 + 1000 on GPU-0 -> max(3000, 2000)
    value = "GPU-0,NVIDIA,3000,0:;GPU-0,NVIDIA,1000,0:;GPU-0,NVIDIA,1000,0:;"
    cache.set_pod(placed("a", nvidia(value), init=1))
    assert cache.used("ns", MEM) == 3000


def test_other_vendor_usage_goes_to_its_resources() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_pod(placed("a", {"hami.io/dcu-devices-allocated": "DCU-0,DCU,2048,50:;"}))
    assert (cache.used("ns", "hygon.com/dcumem"), cache.used("ns", "hygon.com/dcucores")) == (
        2048,
        50,
    )
    assert cache.used("ns", MEM) == 0


def test_undecodable_annotation_holds_nothing() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_pod(placed("a", nvidia("GPU-0,NVIDIA,lots,0:;")))
    cache.set_pod(placed("b", nvidia("GPU-0,NVIDIA:;")))
    assert cache.pod_count == 0


def test_check_quota_rules() -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_quota(quota("q", {f"limits.{MEM}": "4000", f"limits.{CORES}": "100"}))
    cache.set_pod(placed("a", nvidia("GPU-0,NVIDIA,1000,40:;")))
    assert check_quota(cache, namespace="ns", vendor=NV, memory=3000, cores=60) is None
    over_mem = check_quota(cache, namespace="ns", vendor=NV, memory=3001, cores=0)
    assert over_mem is not None
    assert (over_mem.resource, over_mem.limit, over_mem.used, over_mem.requested) == (
        MEM,
        4000,
        1000,
        3001,
    )
    over_cores = check_quota(cache, namespace="ns", vendor=NV, memory=0, cores=61)
    assert over_cores is not None
    assert over_cores.resource == CORES
    assert check_quota(cache, namespace="other", vendor=NV, memory=10**9, cores=10**9) is None


@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.lists(st.integers(0, 5000), min_size=1, max_size=3)),
        ),
        max_size=30,
    )
)
def test_used_always_equals_the_sum_over_live_pods(
    events: list[tuple[str, list[int] | None]],
) -> None:
    cache = QuotaCache(DEFAULT_VENDORS)
    live: dict[str, int] = {}
    for name, memories in events:
        if memories is None:
            cache.remove_pod(placed(name, {}))
            live.pop(name, None)
            continue
        value = "".join(f"GPU-{i},NVIDIA,{mem},1:;" for i, mem in enumerate(memories))
        cache.set_pod(placed(name, nvidia(value)))
        live[name] = sum(memories)
        assert cache.used("ns", MEM) == sum(live.values())
    assert cache.used("ns", MEM) == sum(live.values())
