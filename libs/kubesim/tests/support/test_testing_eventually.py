"""``hami_kubesim.testing.eventually``: the one polling helper every suite uses."""

from __future__ import annotations

import asyncio

import pytest

from hami_kubesim.testing import eventually


async def test_returns_once_a_plain_condition_holds() -> None:
    calls: list[int] = []

    def ready() -> bool:
        calls.append(1)
        return len(calls) >= 3

    await eventually(ready, within=5, what="three calls")
    assert len(calls) == 3


async def test_awaits_an_async_condition() -> None:
    flag = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, flag.set)

    async def ready() -> bool:
        await asyncio.sleep(0)
        return flag.is_set()

    await eventually(ready, within=5, what="flag set")
    assert flag.is_set()


async def test_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"condition not met within 0.05s: the moon"):
        await eventually(lambda: False, within=0.05, what="the moon")
