"""Each vendor's devices as the cache reads them: register annotations, or node capacity for the
vendors whose plugin registers none; bad input confined to that vendor of that node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hami_protocol import keys
from hami_protocol.vendor.table import DEFAULT_VENDORS, METAX_GPU, MLU, MTHREADS, NVIDIA
from hami_scheduler.cache.nodes import slim_node
from hami_scheduler.cache.view import SchedulerCache

from .service_helpers import (
    MLU_CAPACITY,
    MTHREADS_CAPACITY,
    gpus,
    node_object,
    register_annotations,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)

METAX_CAPACITY = {"metax-tech.com/gpu": "2"}


def cache(**kwargs: Any) -> SchedulerCache:
    return SchedulerCache(DEFAULT_VENDORS, now=lambda: NOW, **kwargs)


@pytest.mark.parametrize(
    ("word", "capacity", "ids", "sizes"),
    [
        (MLU, MLU_CAPACITY, ["n-cambricon-mlu-0", "n-cambricon-mlu-1"], (100, 64 * 256, 100)),
        (MTHREADS, MTHREADS_CAPACITY, ["n-mthreads-0", "n-mthreads-1"], (100, 48 * 512, 16)),
        (METAX_GPU, METAX_CAPACITY, ["n-metax-0", "n-metax-1"], (1, 65536, 100)),
    ],
)
def test_capacity_vendors_have_devices_synthesised_from_node_capacity(
    word: str, capacity: dict[str, str], ids: list[str], sizes: tuple[int, int, int]
) -> None:
    c = cache()
    c.upsert_node(node_object("n", allocatable=capacity))
    devices = c.nodes["n"].vendor_devices(word)
    assert [d.uuid for d in devices] == ids
    assert {(d.count, d.totalmem, d.totalcore) for d in devices} == {sizes}
    assert all(d.health and d.vendor == word for d in devices)


def test_capacity_devices_survive_slimming_and_unchanged_capacity_rebuilds_nothing() -> None:
    c = cache()
    obj = node_object("n", allocatable=MLU_CAPACITY)
    slim_node(obj, DEFAULT_VENDORS)
    assert obj["status"]["capacity"] == {
        k: v for k, v in MLU_CAPACITY.items() if k != "cambricon.com/vmlu"
    }
    c.upsert_node(obj)
    first = c.nodes["n"]
    c.upsert_node(node_object("n", allocatable=MLU_CAPACITY))
    assert c.nodes["n"] is first


def test_capacity_dropping_to_zero_withdraws_the_vendor() -> None:
    c = cache()
    c.upsert_node(node_object("n", allocatable=METAX_CAPACITY))
    assert "n" in c.nodes
    c.upsert_node(node_object("n", allocatable={"metax-tech.com/gpu": "0"}))
    assert "n" not in c.nodes


def test_mixed_node_keeps_both_vendors() -> None:
    c = cache()
    annotations = register_annotations(gpus("n", 2))
    c.upsert_node(
        node_object("n", annotations, allocatable={"nvidia.com/gpu": "20", **MLU_CAPACITY})
    )
    usage = c.nodes["n"]
    assert len(usage.vendor_devices(NVIDIA)) == 2
    assert len(usage.vendor_devices(MLU)) == 2


def test_capacity_without_its_memory_resource_fails_that_vendor_only_and_is_reported_once() -> None:
    reported: list[tuple[str, str, str]] = []
    c = cache(on_bad_annotation=lambda n, k, problem, raw: reported.append((n, k, problem)))
    capacity = {
        "nvidia.com/gpu": "20",
        "cambricon.com/vmlu": "2",
        "cambricon.com/mlu.smlu.vcore": "200",
    }
    obj = node_object("n", register_annotations(gpus("n", 2)), allocatable=capacity)
    for _ in range(2):
        c.upsert_node(obj)
    assert reported == [
        (
            "n",
            "cambricon.com/mlu.smlu.vmemory",
            "node capacity cambricon.com/mlu.smlu.vmemory is invalid: node has "
            "cambricon.com/mlu.smlu.vcore capacity 200 but no memory capacity",
        )
    ]
    problem = c.node_problem("n", [MLU])
    assert problem is not None
    assert "cambricon.com/mlu.smlu.vmemory" in problem
    assert c.node_problem("n", [NVIDIA]) is None
    assert len(c.nodes["n"].vendor_devices(NVIDIA)) == 2
    assert c.nodes["n"].vendor_devices(MLU) == ()


def test_a_bad_register_annotation_of_one_vendor_leaves_the_other_usable() -> None:
    annotations = {**register_annotations(gpus("n", 1)), keys.node_register_key("dcu"): "junk"}
    c = cache()
    c.upsert_node(node_object("n", annotations, allocatable={"nvidia.com/gpu": "10"}))
    problem = c.node_problem("n", ["DCU"])
    assert problem is not None
    assert keys.node_register_key("dcu") in problem
    assert c.node_problem("n", [NVIDIA]) is None
    assert len(c.nodes["n"].vendor_devices(NVIDIA)) == 1
