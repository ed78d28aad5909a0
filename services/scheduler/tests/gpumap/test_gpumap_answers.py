"""The map and pending answers shared between requests for ``--gpumap-max-age``."""

from __future__ import annotations

import asyncio

import pytest

from hami_scheduler.gpumap.answers import MAX_ENTRIES, Answer, SharedAnswers, answer_key


class Builds:
    def __init__(self) -> None:
        self.count = 0
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self) -> Answer:
        self.count += 1
        await self.release.wait()
        return Answer(200, f"answer {self.count}".encode(), "application/json")


def test_the_key_is_the_request_without_empty_values_and_the_pages_refresh() -> None:
    assert answer_key("/api/v1/map", {"page": "2", "node": "a", "vendor": ""}) == (
        "/api/v1/map?node=a&page=2"
    )
    assert answer_key("/", {"refresh": "30", "node": "a"}) == answer_key("/", {"node": "a"})


async def test_an_answer_is_shared_until_it_is_max_age_old() -> None:
    now = [100.0]
    shared, build = SharedAnswers(5.0, clock=lambda: now[0]), Builds()
    first = await shared.get("k", build)
    now[0] += 4.9
    assert await shared.get("k", build) is first
    now[0] += 0.2
    assert (await shared.get("k", build)).body == b"answer 2"
    assert build.count == 2


async def test_requests_arriving_during_a_build_wait_for_it() -> None:
    shared, build = SharedAnswers(5.0), Builds()
    build.release.clear()
    answers = [asyncio.ensure_future(shared.get("k", build)) for _ in range(3)]
    await asyncio.sleep(0)
    build.release.set()
    done = await asyncio.gather(*answers)
    assert build.count == 1
    assert {a.body for a in done} == {b"answer 1"}


async def test_errors_and_a_zero_max_age_share_nothing() -> None:
    shared = SharedAnswers(5.0)

    async def refused() -> Answer:
        return Answer(400, b"{}", "application/json")

    await shared.get("bad", refused)
    assert len(shared) == 0

    async def broken() -> Answer:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await shared.get("k", broken)
    off, build = SharedAnswers(0.0), Builds()
    await off.get("k", build)
    await off.get("k", build)
    assert build.count == 2


async def test_at_most_max_entries_are_kept_oldest_dropped_first() -> None:
    shared = SharedAnswers(60.0)
    for n in range(MAX_ENTRIES + 5):
        await shared.get(f"k{n}", Builds())
    assert len(shared) == MAX_ENTRIES
    build = Builds()
    await shared.get("k0", build)
    assert build.count == 1
