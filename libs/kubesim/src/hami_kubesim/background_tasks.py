"""Starting and stopping a stand-in's background task: start it and wait until it reports ready
(never leaving it running when that fails), and cancel it and wait for it to finish."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

__all__ = ["start", "stop"]


async def start(
    run: Coroutine[Any, Any, None],
    ready: asyncio.Event,
    *,
    name: str,
    limit: float | None,
    what: str,
) -> asyncio.Task[None]:
    """Run ``run`` as the task ``name``; return the task once ``ready`` is set.

    If the task stops first (its error is raised), ``limit`` seconds pass (``TimeoutError``;
    ``None``: no limit) or the caller is cancelled, the task is stopped before the error
    propagates.
    """
    task = asyncio.create_task(run, name=name)
    try:
        await _until_ready(task, ready, limit=limit, what=what)
    except BaseException:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise
    return task


async def _until_ready(
    task: asyncio.Task[None], ready: asyncio.Event, *, limit: float | None, what: str
) -> None:
    """Wait for ``ready`` while ``task`` runs: re-raise if the task ends first, ``TimeoutError``
    after ``limit`` seconds (``None``: no limit)."""
    waiter = asyncio.create_task(ready.wait(), name=f"wait-ready-{task.get_name()}")
    try:
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
    if waiter in done:
        return
    if task in done:
        task.result()  # re-raise why it stopped
        raise RuntimeError(f"{what}: stopped before it was ready")
    raise TimeoutError(f"{what} not ready within {limit} s")


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has finished; its cancellation is not raised."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
