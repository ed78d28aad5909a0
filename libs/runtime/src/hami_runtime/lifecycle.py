"""One lifecycle for every service: ordered steps on one exit stack, left in reverse, each under a
bound.

A service enters its parts in dependency order — API client, caches and watches, leadership,
HTTP/gRPC sites, background loops — each as an async context manager (a *step*) with a name.
When the service stops (its stop event, a signal, or a background task failing), the steps are
left in reverse order, so a site stops accepting and finishes its in-flight requests while the
caches, the leadership and the client it needs are still there.

Every exit is bounded.  Shutdown as a whole must end within ``grace_s`` (the documented grace
period, inside the pod's ``terminationGracePeriodSeconds``); a step gets the smaller of its own
bound and what is left of the grace.  A step that overruns is logged as
``shutdown_step_timed_out`` with the names of the tasks still running in it, cancelled, and left
behind: one stuck peer (a kubelet that stops reading, an API server that stops answering, a client
holding a keep-alive connection) cannot keep the process alive.

Background loops run in a :class:`TaskSet` step: named tasks, cancelled together on exit.  A
loop that *fails* (an exception other than cancellation) is logged with its name and stops the
service, whose ``async with`` then re-raises that error once every step has been left — the
process exits non-zero instead of limping on without the loop.

    async with Lifecycle("scheduler", grace_s=settings.shutdown_grace_s) as life:
        client = await life.enter("api-client", open_client(settings.kube), within=2.0)
        loops = await life.enter("loops", TaskSet("scheduler"))
        loops.spawn("handshakes", handshakes.run())
        await life.run_until(stop)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Final, Self, TypeVar

import structlog

__all__ = [
    "DEFAULT_GRACE_S",
    "Lifecycle",
    "ServiceFailedError",
    "TaskSet",
    "describe_tasks",
    "stop_tasks",
]

T = TypeVar("T")

DEFAULT_GRACE_S: Final = 10.0
"""The default shutdown grace period (``--shutdown-grace-period``): well inside Kubernetes'
default ``terminationGracePeriodSeconds`` of 30 s."""

_MAX_AWAIT_DEPTH: Final = 64
_SHOWN_FRAMES: Final = 3

_ABANDON_S: Final = 0.2
"""After a step overran and was cancelled: how long to let it unwind before moving on."""

_log = structlog.get_logger("hami_runtime.lifecycle")


class ServiceFailedError(Exception):
    """A background task of the service failed; the service stopped because of it."""

    def __init__(self, task: str, error: BaseException) -> None:
        super().__init__(f"{task} failed: {error!r}")
        self.task = task
        self.error = error


def describe_tasks(tasks: Iterable[asyncio.Task[Any]]) -> list[str]:
    """``name at f (file:line) > g (file:line)`` for each task, for the log line of a stuck
    shutdown: the last few coroutines of its ``await`` chain, innermost last — the task's outer
    function alone would not say where it is stuck."""
    described = []
    for task in tasks:
        where = ""
        with contextlib.suppress(Exception):
            frames = _await_chain(task.get_coro())[-_SHOWN_FRAMES:]
            if frames:
                where = " at " + " > ".join(
                    f"{f.f_code.co_name} ({f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno})"
                    for f in frames
                )
        described.append(f"{task.get_name()}{where}")
    return sorted(described)


def _await_chain(coro: object) -> list[FrameType]:
    frames: list[FrameType] = []
    for _ in range(_MAX_AWAIT_DEPTH):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if coro is None:
            break
    return frames


async def stop_tasks(
    tasks: Iterable[asyncio.Task[Any]], *, within: float, what: str, component: str = ""
) -> list[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait at most ``within`` seconds for them to end.

    A task still running then is cancelled once more (a task may spend its first cancellation
    on clean-up, such as releasing a Lease, that now has to stop too) and given a moment.
    Returns the tasks still running after that, logging them by name: a task that swallows its
    cancellation (Python 3.11's ``asyncio.wait_for`` can) is named instead of hanging the caller.
    """
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return []
    within = max(within, 0.0)
    second = min(_ABANDON_S, within / 4)
    _, still = await asyncio.wait(pending, timeout=within - second)
    if still:
        for task in still:
            task.cancel()
        _, still = await asyncio.wait(still, timeout=second)
    if still:
        _log.warning(
            "tasks_still_running",
            component=component,
            step=what,
            waited_s=round(within, 3),
            tasks=describe_tasks(still),
        )
    return list(still)


class TaskSet(AbstractAsyncContextManager["TaskSet"]):
    """Named background tasks that end together: a lifecycle step.

    Entering returns the set; :meth:`spawn` starts a task in it.  Leaving cancels every task
    still running and waits for them within the step's bound.  A task that raises reports to the
    lifecycle (``on_failure``), which stops the service.
    """

    def __init__(self, component: str = "") -> None:
        self._component = component
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_failure: Callable[[str, BaseException], None] | None = None
        self.step = ""

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        return frozenset(self._tasks)

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        full = f"{self._component}-{name}" if self._component else name
        task = asyncio.get_running_loop().create_task(coro, name=full)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        _log.error(
            "task_failed",
            component=self._component,
            task=task.get_name(),
            error=str(error),
            error_type=type(error).__name__,
            exc_info=error,
        )
        if self._on_failure is not None:
            self._on_failure(task.get_name(), error)

    async def stop(self, within: float) -> list[asyncio.Task[Any]]:
        return await stop_tasks(
            list(self._tasks), within=within, what=self.step, component=self._component
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The lifecycle bounds this from outside; stopping here without a bound of our own
        # keeps a TaskSet usable on its own too.
        await self.stop(within=3600.0)


@dataclass(slots=True)
class _Step:
    name: str
    exit: Callable[
        [type[BaseException] | None, BaseException | None, TracebackType | None],
        Awaitable[Any],
    ]
    within: float | None
    tasks: TaskSet | None = None


class Lifecycle:
    """The ordered, bounded start and stop of one service (see the module docstring)."""

    def __init__(self, component: str, *, grace_s: float = DEFAULT_GRACE_S) -> None:
        if grace_s <= 0:
            raise ValueError(f"grace period must be positive, got {grace_s!r}")
        self.component = component
        self.grace_s = grace_s
        self._steps: list[_Step] = []
        self._failed: tuple[str, BaseException] | None = None
        self._wake = asyncio.Event()
        self.timed_out: list[str] = []
        """Steps that overran their bound during the last shutdown (for tests and metrics)."""

    # --- starting -----------------------------------------------------------------------------
    async def enter(
        self, name: str, manager: AbstractAsyncContextManager[T], *, within: float | None = None
    ) -> T:
        """Enter ``manager`` as the next step; ``within`` bounds its exit (else the grace)."""
        value = await manager.__aenter__()
        step = _Step(name, manager.__aexit__, within)
        if isinstance(manager, TaskSet):
            manager.step = name
            manager._on_failure = self._task_failed
            step.tasks = manager
        self._steps.append(step)
        return value

    async def tasks(self, name: str, *, within: float | None = None) -> TaskSet:
        """A :class:`TaskSet` as the next step."""
        return await self.enter(name, TaskSet(self.component), within=within)

    def on_exit(
        self, name: str, cleanup: Callable[[], Awaitable[Any]], *, within: float | None = None
    ) -> None:
        """Run ``cleanup()`` at this point of the exit order (closing a backend, say)."""

        async def exit_(*_: object) -> None:
            await cleanup()

        self._steps.append(_Step(name, exit_, within))

    def _task_failed(self, task: str, error: BaseException) -> None:
        if self._failed is None:
            self._failed = (task, error)
        self._wake.set()

    @property
    def failed(self) -> tuple[str, BaseException] | None:
        """The first background task that failed, and its error."""
        return self._failed

    async def run_until(self, stop: asyncio.Event) -> None:
        """Wait for ``stop``, or for a background task to fail."""
        if self._failed is not None or stop.is_set():
            return
        stopped = asyncio.get_running_loop().create_task(stop.wait(), name="lifecycle-stop")
        woken = asyncio.get_running_loop().create_task(self._wake.wait(), name="lifecycle-wake")
        try:
            await asyncio.wait({stopped, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            woken.cancel()
            await asyncio.wait({stopped, woken})

    # --- stopping -----------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(exc_type, exc, tb)
        if exc is None and self._failed is not None:
            task, error = self._failed
            raise ServiceFailedError(task, error) from error

    async def close(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        """Leave every step in reverse order within the grace period."""
        # The loop's clock, not the wall's: the bounds below are loop timers, so under a virtual
        # clock (tests) the grace shrinks as they fire.
        clock = asyncio.get_running_loop().time
        started = clock()
        deadline = started + self.grace_s
        self.timed_out = []
        while self._steps:
            step = self._steps.pop()
            left = deadline - clock()
            bound = left if step.within is None else min(step.within, left)
            await self._leave(step, max(bound, 0.0), (exc_type, exc, tb))
        _log.debug(
            "shutdown_finished",
            component=self.component,
            seconds=round(clock() - started, 3),
            timed_out=self.timed_out,
        )

    async def _leave(
        self,
        step: _Step,
        bound: float,
        exc_info: tuple[type[BaseException] | None, BaseException | None, TracebackType | None],
    ) -> None:
        if step.tasks is not None:
            # Cancelling and waiting is the exit of a task set: bounded here, named if stuck.
            if await step.tasks.stop(within=bound):
                self.timed_out.append(step.name)
            return
        leaving = asyncio.get_running_loop().create_task(
            _await(step.exit(*exc_info)), name=f"{self.component}-exit-{step.name}"
        )
        done, _ = await asyncio.wait({leaving}, timeout=bound)
        if done:
            error = None if leaving.cancelled() else leaving.exception()
            if error is not None:
                _log.error(
                    "shutdown_step_failed",
                    component=self.component,
                    step=step.name,
                    error=str(error),
                    error_type=type(error).__name__,
                )
            return
        self.timed_out.append(step.name)
        _log.warning(
            "shutdown_step_timed_out",
            component=self.component,
            step=step.name,
            bound_s=round(bound, 3),
            waiting_in=describe_tasks([leaving]),
            tasks=describe_tasks(t for t in asyncio.all_tasks() if t is not leaving),
        )
        leaving.cancel()
        await asyncio.wait({leaving}, timeout=_ABANDON_S)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable
