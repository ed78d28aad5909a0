"""Running a service inside an existing event loop for the length of an ``async with`` block.

Tests and the emulator's demo start the real services this way: the same ``run()`` that the
process entry point calls, stopped through its ``stop`` event instead of a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["embedded"]

R = TypeVar("R")

Starter = Callable[[asyncio.Event, Callable[[R], None]], Coroutine[Any, Any, None]]
"""``start(stop, on_started)``: the service's ``run`` with its stop event and started hook."""


@contextlib.asynccontextmanager
async def embedded(start: Starter[R], *, name: str) -> AsyncIterator[R]:
    """Yield what the service hands ``on_started``; stop it and wait for it on exit.

    A service that fails before it has started raises its error here instead of leaving the
    block waiting forever.
    """
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
        await task
