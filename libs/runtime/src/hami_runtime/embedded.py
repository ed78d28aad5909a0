"""Running a service inside an existing event loop for the length of an ``async with`` block.

Tests and the emulator's demo start the real services this way: the same ``run()`` that the
process entry point calls, stopped through its ``stop`` event instead of a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, TypeVar

from hami_runtime.lifecycle import DEFAULT_GRACE_S, describe_tasks

__all__ = ["ServiceDidNotStopError", "embedded"]

R = TypeVar("R")

Starter = Callable[[asyncio.Event, Callable[[R], None]], Coroutine[Any, Any, None]]
"""``start(stop, on_started)``: the service's ``run`` with its stop event and started hook."""

_SLACK_S: Final = 2.0
"""Beyond the service's own grace period, before the block gives up on it."""


class ServiceDidNotStopError(RuntimeError):
    """The service was still running after its grace period: a shutdown bug, named."""


@contextlib.asynccontextmanager
async def embedded(
    start: Starter[R],
    *,
    name: str,
    grace_s: float = DEFAULT_GRACE_S,
    stop_within: float | None = None,
) -> AsyncIterator[R]:
    """Yield what the service hands ``on_started``; stop it and wait for it on exit.

    ``grace_s`` is the service's own shutdown grace period; the block waits that long plus a
    little slack (``stop_within`` overrides the total).

    A service that fails before it has started raises its error here instead of leaving the
    block waiting forever.  One that has not stopped ``stop_within`` seconds after its stop event
    is cancelled and reported as :class:`ServiceDidNotStopError`, with where it was waiting.
    """
    if stop_within is None:
        stop_within = grace_s + _SLACK_S
    stop = asyncio.Event()
    started: asyncio.Future[R] = asyncio.get_running_loop().create_future()

    def on_started(running: R) -> None:
        if not started.done():
            started.set_result(running)

    def on_done(task: asyncio.Task[None]) -> None:
        if not started.done():
            error = None if task.cancelled() else task.exception()
            started.set_exception(error or RuntimeError(f"{name} stopped before it started"))

    task = asyncio.create_task(start(stop, on_started), name=name)
    task.add_done_callback(on_done)
    try:
        yield await started
    finally:
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=stop_within)
        if not done:
            where = describe_tasks([task])
            task.cancel()
            await asyncio.wait({task}, timeout=_SLACK_S)
            raise ServiceDidNotStopError(
                f"{name} did not stop within {stop_within:g}s of its stop event ({where[0]})"
            )
        if not task.cancelled() and task.exception() is not None and started.done():
            task.result()
