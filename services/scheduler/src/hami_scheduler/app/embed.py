"""The scheduler run inside the caller's event loop for the duration of a block: how the
service tests and the demo start one or several schedulers in one process.

The same :func:`~hami_scheduler.app.lifecycle.run` as the process, with a stop event of its own
instead of signal handlers and without ``gc.freeze()`` (the heap is shared with the caller).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import datetime
from typing import Any

from hami_kube.reflector import ReflectorConfig
from hami_kube.timefmt import utc_now
from hami_runtime.embedded import embedded
from hami_scheduler.app.lifecycle import run
from hami_scheduler.app.parts import RunningScheduler
from hami_scheduler.settings import Settings

__all__ = ["serving"]


@contextlib.asynccontextmanager
async def serving(
    settings: Settings,
    *,
    reflector_config: ReflectorConfig | None = None,
    now: Callable[[], datetime] = utc_now,
) -> AsyncIterator[RunningScheduler]:
    """Run the service in this event loop for the duration of the block (no ``gc.freeze``)."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningScheduler], None]
    ) -> Coroutine[Any, Any, None]:
        return run(
            settings,
            stop=stop,
            on_started=on_started,
            freeze_gc=False,
            reflector_config=reflector_config,
            now=now,
        )

    grace_s = settings.shutdown_grace_s
    async with embedded(start, name="hami-scheduler", grace_s=grace_s) as running:
        yield running
