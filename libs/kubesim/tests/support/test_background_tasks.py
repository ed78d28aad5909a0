"""A stand-in's background task: started until ready, stopped within a bound, stuck ones named."""

from __future__ import annotations

import asyncio

import pytest
import structlog.testing

from hami_kubesim.background_tasks import (
    BackgroundRunner,
    RunsInBackground,
    crash_cancels_the_block,
)

pytestmark = pytest.mark.looptime


class StandIn(RunsInBackground):
    """Gets ready, then serves until cancelled; ``swallow`` cancellations are ignored first."""

    def __init__(self, *, swallow: int = 0, fail: Exception | None = None, **bounds: float):
        super().__init__(BackgroundRunner("stand-in", what="the stand-in", **bounds))
        self.swallow = swallow
        self.fail = fail
        self.ended = asyncio.Event()

    async def run(self) -> None:
        self.runner.ready.set()
        try:
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    if self.swallow == 0:
                        raise
                    self.swallow -= 1
                if self.fail is not None:
                    raise self.fail
        finally:
            self.runner.ready.clear()
            self.ended.set()


async def test_runs_while_the_block_runs() -> None:
    stand_in = StandIn()
    async with stand_in:
        assert stand_in.runner.running
        assert stand_in.runner.ready.is_set()
        await stand_in.wait_ready()
    assert not stand_in.runner.running
    assert stand_in.ended.is_set()


async def test_a_task_that_ignores_its_cancel_is_named_and_left_behind_in_time() -> None:
    loop = asyncio.get_running_loop()
    # stop_tasks cancels twice (the second time shortly before the bound): this one swallows both.
    stand_in = StandIn(swallow=2, stop_within=2.0)
    with structlog.testing.capture_logs() as logs:
        async with stand_in:
            stopping = loop.time()
    assert loop.time() - stopping == pytest.approx(2.0)
    (stuck,) = [e for e in logs if e["event"] == "tasks_still_running"]
    assert stuck["step"] == "the stand-in"
    assert stuck["tasks"][0].startswith("stand-in at run (test_background_tasks.py:")
    assert not stand_in.ended.is_set()
    # Left behind, not lost: the next cancel ends it.
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "stand-in"]
    task.cancel()
    await stand_in.ended.wait()


async def test_a_crash_while_running_is_raised_when_stopping() -> None:
    stand_in = StandIn(swallow=1, fail=LookupError("broken"))
    with pytest.raises(LookupError, match="broken"):
        async with stand_in:
            pass


async def test_a_stand_in_that_ends_before_it_is_ready_raises_why() -> None:
    class Broken(RunsInBackground):
        async def run(self) -> None:
            raise ConnectionRefusedError("no API server")

    with pytest.raises(ConnectionRefusedError, match="no API server"):
        async with Broken(BackgroundRunner("broken", what="broken")):
            pass


async def test_a_stand_in_that_never_gets_ready_times_out_and_is_stopped() -> None:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()

    class Slow(RunsInBackground):
        async def run(self) -> None:
            try:
                await asyncio.Event().wait()
            finally:
                stopped.set()

    started = loop.time()
    with pytest.raises(TimeoutError, match=r"slow not ready within 30\.0 s"):
        async with Slow(BackgroundRunner("slow", what="slow", ready_within=30.0)):
            pass
    assert loop.time() - started == pytest.approx(30.0)
    assert stopped.is_set()


async def test_starting_twice_is_refused() -> None:
    stand_in = StandIn()
    async with stand_in:
        with pytest.raises(RuntimeError, match="already running"):
            await stand_in.runner.start(stand_in.run())


class Crashing(RunsInBackground):
    """Ready at once; fails when ``crash`` is set."""

    def __init__(self, name: str) -> None:
        super().__init__(BackgroundRunner(name, what=name))
        self.crash = asyncio.Event()

    async def run(self) -> None:
        self.runner.ready.set()
        await self.crash.wait()
        raise OSError(f"{self.runner.name} lost its socket")


async def test_a_crash_cancels_the_block_and_is_raised_once() -> None:
    first, second = Crashing("kubelet-a"), Crashing("kubelet-b")
    reached_the_end: list[bool] = []

    async def block() -> None:
        async with first, second, crash_cancels_the_block([first, second]):
            first.crash.set()
            await asyncio.sleep(3600)  # cancelled by the crash, not slept through
            reached_the_end.append(True)

    with pytest.raises(OSError, match="kubelet-a lost its socket"):
        await block()
    assert reached_the_end == []
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert not second.runner.running


async def test_without_a_crash_the_block_ends_normally_and_a_cancel_stays_a_cancel() -> None:
    stand_in = Crashing("kubelet-c")
    async with stand_in, crash_cancels_the_block([stand_in]):
        await asyncio.sleep(1)
    assert stand_in.runner.on_crash is None

    async def cancelled_from_outside() -> None:
        async with stand_in, crash_cancels_the_block([stand_in]):
            await asyncio.sleep(3600)

    task = asyncio.create_task(cancelled_from_outside())
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
