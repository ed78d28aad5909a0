"""Signal handling: SIGTERM/SIGINT set an event that the service's TaskGroup waits on."""

from __future__ import annotations

import asyncio
import signal


def install_stop_signals(stop: asyncio.Event) -> None:
    """Make SIGTERM and SIGINT set ``stop`` instead of killing the process mid-request."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def wait_then_cancel(stop: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Wait for ``stop``, then cancel the long-lived tasks so the TaskGroup can unwind."""
    await stop.wait()
    for task in tasks:
        task.cancel()
