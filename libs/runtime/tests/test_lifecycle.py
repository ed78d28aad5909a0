"""The one lifecycle: steps left in reverse order, every exit bounded, stuck tasks named."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable

import pytest
import structlog.testing

from hami_runtime import loop
from hami_runtime.embedded import ServiceDidNotStopError, embedded
from hami_runtime.lifecycle import Lifecycle, ServiceFailedError, TaskSet, stop_tasks


def _step(
    name: str, log: list[str], *, hang: bool = False
) -> contextlib.AbstractAsyncContextManager[str]:
    @contextlib.asynccontextmanager
    async def manager() -> AsyncIterator[str]:
        log.append(f"enter {name}")
        try:
            yield name
        finally:
            if hang:
                await asyncio.Event().wait()
            log.append(f"exit {name}")

    return manager()


async def _stubborn(swallow: int, ended: asyncio.Event) -> None:
    """A loop that swallows its first ``swallow`` cancellations, as ``asyncio.wait_for`` on
    Python 3.11 can when the awaited event fires as the task is cancelled."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if swallow == 0:
                ended.set()
                raise
            swallow -= 1


async def test_steps_are_left_in_reverse_order_of_entry() -> None:
    log: list[str] = []
    async with Lifecycle("svc") as life:
        assert await life.enter("client", _step("client", log)) == "client"
        await life.enter("watches", _step("watches", log))
        life.on_exit("flush", lambda: _note(log, "flush"))
        await life.enter("sites", _step("sites", log))
    assert log == [
        "enter client",
        "enter watches",
        "enter sites",
        "exit sites",
        "flush",
        "exit watches",
        "exit client",
    ]


async def _note(log: list[str], what: str) -> None:
    log.append(what)


async def test_a_step_that_hangs_is_cut_off_named_and_the_rest_still_exit() -> None:
    log: list[str] = []
    with structlog.testing.capture_logs() as logs:
        started = time.monotonic()
        async with Lifecycle("svc", grace_s=5.0) as life:
            await life.enter("client", _step("client", log))
            await life.enter("stuck-site", _step("stuck-site", log, hang=True), within=0.2)
        took = time.monotonic() - started
    assert took < 2.0
    assert life.timed_out == ["stuck-site"]
    assert log[-1] == "exit client"
    timed_out = [e for e in logs if e["event"] == "shutdown_step_timed_out"]
    assert len(timed_out) == 1
    assert timed_out[0]["step"] == "stuck-site"
    assert "svc-exit-stuck-site" in timed_out[0]["waiting_in"][0]


async def test_the_whole_shutdown_fits_in_the_grace_period() -> None:
    log: list[str] = []
    started = time.monotonic()
    async with Lifecycle("svc", grace_s=0.5) as life:
        await life.enter("a", _step("a", log, hang=True))
        await life.enter("b", _step("b", log, hang=True))
        await life.enter("c", _step("c", log, hang=True))
    # Each step takes what is left of the grace; the three together stay within it (plus the
    # short abandon wait per overrunning step).
    assert time.monotonic() - started < 0.5 + 3 * 0.2 + 0.5
    assert life.timed_out == ["c", "b", "a"]


async def test_background_tasks_are_cancelled_on_exit() -> None:
    async with Lifecycle("svc") as life:
        loops = await life.tasks("loops")
        task = loops.spawn("ticker", asyncio.sleep(3600))
        assert task.get_name() == "svc-ticker"
    assert task.cancelled()
    assert len(loops) == 0


async def test_a_task_swallowing_its_cancellation_is_named_and_does_not_hang_shutdown() -> None:
    ended = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        started = time.monotonic()
        async with Lifecycle("svc", grace_s=0.3) as life:
            loops = await life.tasks("loops")
            loops.spawn("node-register", _stubborn(2, ended))
            await asyncio.sleep(0)
        assert time.monotonic() - started < 2.0
    assert life.timed_out == ["loops"]
    stuck = [e for e in logs if e["event"] == "tasks_still_running"]
    assert stuck
    assert stuck[0]["step"] == "loops"
    assert stuck[0]["tasks"][0].startswith("svc-node-register at _stubborn (test_lifecycle.py:")
    assert (
        stuck[0]["tasks"][0].endswith("> sleep (tasks.py:649)")
        or "> sleep (" in stuck[0]["tasks"][0]
    )
    # Left behind, not forgotten: the second cancel ends it.
    for task in loops.tasks:
        task.cancel()
    await ended.wait()


async def test_a_task_spending_its_first_cancel_on_clean_up_is_cancelled_again() -> None:
    ended = asyncio.Event()
    started = time.monotonic()
    async with Lifecycle("svc", grace_s=5.0) as life:
        loops = await life.tasks("leadership", within=1.0)
        loops.spawn("lease", _stubborn(1, ended))
        await asyncio.sleep(0)
    assert ended.is_set()
    assert life.timed_out == []
    assert time.monotonic() - started < 1.5


async def test_a_failing_task_stops_the_service_and_its_error_comes_out() -> None:
    stop = asyncio.Event()
    log: list[str] = []

    async def crash() -> None:
        await asyncio.sleep(0)
        raise LookupError("watch broke")

    async def serve() -> asyncio.Task[None]:
        async with Lifecycle("svc") as life:
            await life.enter("client", _step("client", log))
            loops = await life.tasks("loops")
            loops.spawn("watch", crash())
            other = loops.spawn("other", asyncio.sleep(3600))
            await life.run_until(stop)
        return other

    with pytest.raises(ServiceFailedError) as caught:
        await serve()
    assert not stop.is_set()
    assert caught.value.task == "svc-watch"
    assert isinstance(caught.value.error, LookupError)
    others = [t for t in asyncio.all_tasks() if t.get_name() == "svc-other"]
    assert others == []
    assert log == ["enter client", "exit client"]


async def test_run_until_returns_when_stop_is_set() -> None:
    stop = asyncio.Event()
    async with Lifecycle("svc") as life:
        waiter = asyncio.create_task(life.run_until(stop))
        await asyncio.sleep(0)
        assert not waiter.done()
        stop.set()
        await waiter


async def test_stop_tasks_returns_nothing_for_finished_tasks() -> None:
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    assert await stop_tasks([done], within=0.1, what="none") == []


async def test_a_task_set_alone_stops_its_tasks() -> None:
    async with TaskSet("solo") as tasks:
        task = tasks.spawn("sleeper", asyncio.sleep(3600))
    assert task.cancelled()


def test_a_grace_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        Lifecycle("svc", grace_s=0)


# --- embedded services -----------------------------------------------------------------------


@pytest.mark.looptime  # its waits are the loop's: 2.2 s of them take no real time
async def test_an_embedded_service_that_does_not_stop_is_reported() -> None:
    ended = asyncio.Event()

    async def run(stop: asyncio.Event, on_started: Callable[[str], None]) -> None:
        on_started("up")
        await _stubborn(1, ended)

    clock = asyncio.get_running_loop()
    started = clock.time()
    with pytest.raises(ServiceDidNotStopError, match=r"svc did not stop within 0\.2s"):
        async with embedded(run, name="svc", stop_within=0.2):
            pass
    # Its bound, then the short slack it gives a cancelled service to unwind.
    assert clock.time() - started == pytest.approx(0.2 + 2.0)
    # It swallowed the one cancel it got; a second one ends it.
    for task in asyncio.all_tasks():
        if task.get_name() == "svc":
            task.cancel()
    await ended.wait()


async def test_an_embedded_service_failing_after_start_raises_on_exit() -> None:
    async def run(stop: asyncio.Event, on_started: Callable[[str], None]) -> None:
        on_started("up")
        await stop.wait()
        raise LookupError("late failure")

    with pytest.raises(LookupError, match="late failure"):
        async with embedded(run, name="svc"):
            pass


# --- the process end ---------------------------------------------------------------------------


def test_run_does_not_wait_for_a_leftover_task_that_ignores_cancellation() -> None:
    async def main() -> str:
        async def deaf() -> None:
            while True:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(3600)

        asyncio.get_running_loop().create_task(deaf(), name="deaf")
        await asyncio.sleep(0)
        return "done"

    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        assert loop.run(main()) == "done"
    assert time.monotonic() - started < loop.LEFTOVER_S + 2.0
    assert any(
        e["event"] == "tasks_still_running" and e["tasks"][0].startswith("deaf") for e in logs
    )


def test_a_second_signal_ends_the_process_at_once() -> None:
    code = (
        "import asyncio, os, signal\n"
        "from hami_runtime.signals import install_stop_signals\n"
        "async def main():\n"
        "    stop = asyncio.Event()\n"
        "    install_stop_signals(stop, component='svc')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    await stop.wait()\n"
        "    print('stopping', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    await asyncio.sleep(30)\n"
        "asyncio.run(main())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=20, check=False
    )
    assert "stopping" in result.stdout
    assert result.returncode == 130
    assert "second_stop_signal_exiting_now" in result.stdout + result.stderr
    assert signal.SIGTERM.name in result.stdout + result.stderr
