"""The GPU map built in steps: the same documents and bytes as at once, a step per node of a
page, and the event loop handed back between slices."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.gpumap import model
from hami_scheduler.gpumap.model import MapQuery, map_document, map_document_steps
from hami_scheduler.gpumap.page import render_page, render_steps
from hami_scheduler.gpumap.query import Page
from hami_scheduler.gpumap.server import sliced
from hami_scheduler.gpumap.steps import Steps, drain, json_steps

from ..service_helpers import gpus, node_object, register_annotations
from .gpumap_docs import large_map, sample_map
from .test_gpumap_model import NOW, REPLICA, allocation, placed

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


def run_counting(steps: Steps[Any]) -> tuple[int, Any]:
    count = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return count, done.value
        count += 1


@given(st.dictionaries(st.text() | st.integers(), values | st.lists(values), max_size=5))
def test_json_in_steps_is_exactly_json_dumps(doc: dict[Any, Any]) -> None:
    expected = json.dumps(doc, separators=(",", ":"), default=str).encode()
    assert drain(json_steps(doc)) == expected


def test_json_steps_one_per_element_of_a_top_level_list() -> None:
    doc = {**large_map(7), "at": datetime(2026, 1, 1, tzinfo=UTC)}  # default=str applies
    assert run_counting(json_steps(doc)) == (
        7,
        json.dumps(doc, separators=(",", ":"), default=str).encode(),
    )


def fleet(nodes: int) -> SchedulerCache:
    cache = SchedulerCache(DEFAULT_VENDORS, now=lambda: NOW)
    for i in range(nodes):
        name = f"n{i}"
        cache.upsert_node(node_object(name, register_annotations(gpus(name, 2))))
        cache.upsert_pod(placed(f"p{i}", name, allocation((f"GPU-{name}-0", 1000 * i + 500, 10))))
    return cache


@pytest.mark.parametrize(
    "query",
    [
        MapQuery(),
        MapQuery(node="n1"),
        MapQuery(vendor="nvidia", page=Page(2, 3)),
        MapQuery(fragmented=True),
        MapQuery(page=Page(9, 50)),
    ],
)
def test_the_map_in_steps_is_the_map_at_once(
    monkeypatch: pytest.MonkeyPatch, query: MapQuery
) -> None:
    cache = fleet(7)
    whole = map_document(cache, query, now=NOW, replica=REPLICA)
    monkeypatch.setattr(model, "CHUNK", 2)
    steps, doc = run_counting(map_document_steps(cache, query, now=NOW, replica=REPLICA))
    assert doc == whole
    # 7 names read and up to 7 summed, 2 at a time; then one step per node shown.
    assert steps >= 3 + len(doc["nodes"])


def test_rendering_in_steps_is_the_page_at_once_one_step_per_node() -> None:
    doc = large_map(5)
    steps, text = run_counting(render_steps("map", doc, {"node": "n"}))
    assert text == render_page("map", doc, {"node": "n"})
    assert steps == 5
    assert run_counting(render_steps("map", sample_map(), {}))[0] == len(sample_map()["nodes"])


def worker(log: list[str], steps: int) -> Steps[int]:
    for i in range(steps):
        log.append(f"step {i}")
        yield
    return steps


async def test_sliced_hands_the_loop_back_between_slices() -> None:
    log: list[str] = []
    stop = asyncio.Event()

    async def other() -> None:  # what a filter arriving meanwhile would be
        while not stop.is_set():
            log.append("other")
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    log.clear()
    assert await sliced(worker(log, 4), budget=0.0) == 4
    # Handed back after every step: the other task ran between any two.
    assert [entry for entry in log if entry != "other"] == [f"step {i}" for i in range(4)]
    assert all(log[log.index(f"step {i}") + 1] == "other" for i in range(3)), (
        f"not interleaved: {log}"
    )
    log.clear()
    assert await sliced(worker(log, 4), budget=3600.0) == 4
    # Within its budget it runs on: the steps are together.
    assert log[:4] == [f"step {i}" for i in range(4)]
    stop.set()
    await task
