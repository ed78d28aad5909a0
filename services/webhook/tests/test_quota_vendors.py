"""Namespace quota on every vendor with a memory or cores resource: ``limits.<memory resource>``
counts in the vendor's own unit (Cambricon and Iluvatar 256 MiB, Moore Threads 512 MiB, MetaX
sGPU 1024 MiB) and memory factor, ``limits.<cores resource>`` in its core units; usage comes from
the vendor's allocated annotation of placed pods."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.vendor.table import DEFAULT_VENDORS, Vendor, vendors_from_config
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.quota.cache import QuotaCache

from .helpers import container, pod

ALL_VENDORS = vendors_from_config(
    parse_device_config(DEFAULT_DEVICE_CONFIG_YAML), enable_ascend=True, enable_iluvatar=True
)
WITH_MEMORY = [v for v in ALL_VENDORS if v.memory_resource and v.devices_allocated_key]
WITH_CORES = [v for v in ALL_VENDORS if v.cores_resource and v.devices_allocated_key]
# (limit, used, fits, over) in memory units: the vendors whose admission rules take only some
# memory sizes (Moore Threads' slices, Kunlun vXPU's rounding) get sizes they keep.
MEMORY_AMOUNTS = {"Mthreads": (8, 4, 4, 8), "XPU": (98304, 49152, 49152, 98304)}
# HAMi shapes a request naming these vendors' count resource by devices (AWS Neuron) or slices
# (Enflame DRS) alone; their memory and cores count only in a request without it.
SHAPED_BY_COUNT = frozenset({"AWSNeuron", "Enflame"})


def _id(vendor: Vendor) -> str:
    return vendor.common_word


def quota(vendors: tuple[Vendor, ...], hard: dict[str, str]) -> QuotaCache:
    cache = QuotaCache(vendors)
    meta = {"namespace": "default", "name": "q"}
    cache.set_quota({"metadata": meta, "spec": {"hard": hard}})
    return cache


def placed(vendor: Vendor, memory_mib: int, cores: int) -> dict[str, Any]:
    key = vendor.devices_allocated_key or ""
    value = f"{vendor.common_word}-0,{vendor.common_word},{memory_mib},{cores}:;"
    return {
        "metadata": {"namespace": "default", "name": "old", "annotations": {key: value}},
        "spec": {"containers": []},
        "status": {"phase": "Running"},
    }


def counted(vendor: Vendor) -> dict[str, str]:
    """The count part of a request whose memory and cores the quota counts."""
    return {} if vendor.common_word in SHAPED_BY_COUNT else {vendor.count_resource: "1"}


def allowed(vendors: tuple[Vendor, ...], limits: dict[str, str], cache: QuotaCache) -> bool:
    rules = MutationRules(vendors=vendors)
    decision = admit_pod(
        pod(container(limits=limits)), namespace="default", rules=rules, quota=cache
    )
    if not decision.allowed:
        assert decision.message.startswith("exceeding resource quota: ResourceQuota default/q")
    return decision.allowed


# HAMi's enflame block has no memoryFactor: its spec requests ask GB as written.
FACTORED = [
    pytest.param(vendor, factor, id=f"{factor}-{vendor.common_word}")
    for factor in (1, 2)
    for vendor in WITH_MEMORY
    if factor == 1 or vendor.common_word != "Enflame"
]


@pytest.mark.parametrize(("vendor", "factor"), FACTORED)
def test_a_memory_limit_counts_in_the_vendors_unit_and_factor(vendor: Vendor, factor: int) -> None:
    row = replace(vendor, memory_factor=factor)
    vendors = tuple(row if v.common_word == row.common_word else v for v in ALL_VENDORS)
    memory = row.memory_resource or ""
    limit, used, fits, over = MEMORY_AMOUNTS.get(row.common_word, (8, 3, 5, 6))
    cache = quota(vendors, {f"limits.{memory}": str(limit)})
    cache.set_pod(placed(row, used * row.memory_scale, 0))
    count = counted(row)
    assert allowed(vendors, {**count, memory: str(fits)}, cache)
    assert not allowed(vendors, {**count, memory: str(over)}, cache)


@pytest.mark.parametrize("vendor", WITH_CORES, ids=_id)
def test_a_cores_limit_counts_the_vendors_core_units(vendor: Vendor) -> None:
    cores = vendor.cores_resource or ""
    cache = quota(ALL_VENDORS, {f"limits.{cores}": "2"})
    cache.set_pod(placed(vendor, 0, 1))
    count = counted(vendor)
    if vendor.memory_resource:  # Moore Threads sets 16 cores on a pod naming no memory
        count[vendor.memory_resource] = "4"
    assert allowed(ALL_VENDORS, {**count, cores: "1"}, cache)
    assert not allowed(ALL_VENDORS, {**count, cores: "2"}, cache)


def test_one_vendors_quota_leaves_another_vendors_pods_alone() -> None:
    cache = quota(DEFAULT_VENDORS, {"limits.cambricon.com/mlu.smlu.vmemory": "0"})
    assert allowed(DEFAULT_VENDORS, {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000"}, cache)
    mlu = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "1"}
    assert not allowed(DEFAULT_VENDORS, mlu, cache)
