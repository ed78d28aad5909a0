"""A stand-in's background task (scheduling loop, kubelet, admission dispatcher): started, waited
on until ready, and stopped — every wait bounded.

Each stand-in runs as one named task that sets its ``ready`` event once its caches are synced.
:class:`BackgroundRunner` starts that task and returns once ``ready`` is set; if the task stops
first its error is raised, if ``ready_within`` seconds pass ``TimeoutError`` is, and in both cases
(and when the caller is cancelled) the task is stopped before the error propagates.

Stopping cancels the task and waits at most ``stop_within`` seconds
(:func:`hami_runtime.lifecycle.stop_tasks`): a task that does not end by then is logged by name
with where it waits (``tasks_still_running``) and left behind, so one stuck stand-in cannot hang
the cluster's shutdown.  A task that had *failed* (an exception other than cancellation) has its
error raised from :meth:`BackgroundRunner.stop`, so a crash is not silently lost — unless
``on_crash`` is set: it is called as the task fails and takes charge of the error, as
:func:`crash_cancels_the_block` does for the stand-ins of a whole cluster.

:class:`RunsInBackground` gives a stand-in its ``async with`` and ``wait_ready`` on top of a
runner: the stand-in only writes ``run()``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Final, Self

import structlog

from hami_runtime.lifecycle import stop_tasks

__all__ = [
    "READY_WITHIN_S",
    "STOP_WITHIN_S",
    "BackgroundRunner",
    "RunsInBackground",
    "crash_cancels_the_block",
]

READY_WITHIN_S: Final = 30.0
"""Default bound on a stand-in's start: its first list of every cache it follows."""
STOP_WITHIN_S: Final = 5.0
"""Default bound on a stand-in's stop: closing its watches, client and servers."""
_COMPONENT: Final = "kubesim"

log = structlog.get_logger(__name__)


class BackgroundRunner:
    """Runs one stand-in's coroutine as the task ``name`` (see the module docstring).

    The stand-in sets :attr:`ready` when it can serve (and clears it when it stops).
    """

    def __init__(
        self,
        name: str,
        *,
        what: str,
        ready_within: float = READY_WITHIN_S,
        stop_within: float = STOP_WITHIN_S,
    ) -> None:
        self.name = name
        self.what = what
        self.ready_within = ready_within
        self.stop_within = stop_within
        self.ready = asyncio.Event()
        self.on_crash: Callable[[str, BaseException], None] | None = None
        """Called when the task fails while running (not while starting or stopping)."""
        self._task: asyncio.Task[None] | None = None
        self._crash_reported = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self, run: Coroutine[Any, Any, None]) -> None:
        """Run ``run`` as the task; return once :attr:`ready` is set."""
        if self._task is not None:
            run.close()
            raise RuntimeError(f"{self.what} is already running")
        task = asyncio.get_running_loop().create_task(run, name=self.name)
        try:
            await self._until_ready(task)
        except BaseException:
            await stop_tasks(
                [task], within=self.stop_within, what=f"{self.what} start", component=_COMPONENT
            )
            raise
        self._task = task
        self._crash_reported = False
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task is not self._task or task.cancelled() or self.on_crash is None:
            return  # being stopped, or nobody to tell: stop() raises the error
        error = task.exception()
        if error is not None:
            self._crash_reported = True
            self.on_crash(self.name, error)

    async def stop(self) -> None:
        """Cancel the task and wait for it, at most ``stop_within`` seconds."""
        task, self._task = self._task, None
        if task is None:
            return
        await stop_tasks([task], within=self.stop_within, what=self.what, component=_COMPONENT)
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None and not self._crash_reported:
            raise error

    async def _until_ready(self, task: asyncio.Task[None]) -> None:
        """Wait for :attr:`ready` while ``task`` runs: re-raise if the task ends first,
        ``TimeoutError`` after ``ready_within`` seconds."""
        waiter = asyncio.get_running_loop().create_task(
            self.ready.wait(), name=f"{self.name}-wait-ready"
        )
        try:
            done, _ = await asyncio.wait(
                {task, waiter}, timeout=self.ready_within, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            await stop_tasks([waiter], within=self.stop_within, what=f"{self.what} ready")
        if waiter in done:
            return
        if task in done:
            task.result()  # re-raise why it stopped
            raise RuntimeError(f"{self.what}: stopped before it was ready")
        raise TimeoutError(f"{self.what} not ready within {self.ready_within} s")


class RunsInBackground(ABC):
    """A stand-in run by a :class:`BackgroundRunner`: ``async with stand_in:`` runs
    :meth:`run` until the block ends, entering once the stand-in set ``runner.ready``."""

    def __init__(self, runner: BackgroundRunner) -> None:
        self.runner = runner

    @abstractmethod
    async def run(self) -> None:
        """Serve until cancelled; set ``self.runner.ready`` once ready."""

    async def __aenter__(self) -> Self:
        await self.runner.start(self.run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.runner.stop()

    async def wait_ready(self) -> None:
        """Until the stand-in is ready (for a caller that runs :meth:`run` itself)."""
        await self.runner.ready.wait()


@asynccontextmanager
async def crash_cancels_the_block(stand_ins: Sequence[RunsInBackground]) -> AsyncIterator[None]:
    """Cancel the task running the block when a stand-in fails; raise that failure instead."""
    body = asyncio.current_task()
    crashes: list[BaseException] = []

    def crashed(name: str, error: BaseException) -> None:
        log.error("stand-in crashed", task=name, error=str(error), error_type=type(error).__name__)
        if not crashes and body is not None:
            body.cancel()
        crashes.append(error)

    for stand_in in stand_ins:
        stand_in.runner.on_crash = crashed
    try:
        yield
    except asyncio.CancelledError:
        if crashes and body is not None and body.uncancel() == 0:
            raise crashes[0] from None
        raise
    finally:
        for stand_in in stand_ins:
            stand_in.runner.on_crash = None
