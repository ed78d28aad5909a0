"""Virtual time for an asyncio event loop: sleeps, timeouts and back-offs without waiting.

``with virtual_time(loop):`` makes ``loop.time()`` a virtual clock that stands still while the
loop has work and, when the loop is idle, jumps straight to its next timer.  Every
``asyncio.sleep``, ``asyncio.timeout``, ``call_later`` and ``loop.time()`` reading inside the
block follows it, so a test of a 15 s lease or a 10 s back-off runs in milliseconds, and timers
fire in the order of their deadlines, not in the order a loaded machine happens to reach them.

Idleness is decided where the loop would block, in its selector's ``select(timeout)``:

1. no timer pending (``timeout is None``): block on real I/O, as a real loop would;
2. callbacks ready (``timeout == 0``): poll, no jump;
3. otherwise a real ``select`` with no wait sees what is already there; then, unless a thread
   is still working for the loop (``run_in_executor``, ``getaddrinfo``; its result wakes the loop
   through the self-pipe), one more real ``select`` of ``idle_confirm_s`` gives in-process
   peers — kubesim serving on a socket in the same loop, a client's request on its way — the
   chance to deliver.  Only when both find nothing does the clock jump by ``timeout``.

While an executor job is outstanding the clock never jumps: the loop waits for it in real time
(in slices of at most 50 ms), so a DNS lookup cannot be overtaken by a timeout.  Work in other
processes or in threads the loop does not know about (a gRPC core, a child process) *can* be
overtaken; keep such tests on real time.

Costs: each jump spends up to ``idle_confirm_s`` of real time (default 1 ms).  Code must read
time from its loop; ``time.monotonic()`` keeps running in real time.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any, Final, TypeVar

__all__ = ["IDLE_CONFIRM_S", "VirtualClock", "virtual_time"]

T = TypeVar("T")

IDLE_CONFIRM_S: Final = 0.001
"""Real time a ``select`` waits, before each jump, for I/O already on its way."""
_BUSY_SLICE_S: Final = 0.05
"""Real-time slices in which the loop waits for its executor jobs."""

_Select = Callable[[float | None], list[tuple[selectors.SelectorKey, int]]]


class VirtualClock:
    """The virtual clock of one loop; see the module docstring.  Use :func:`virtual_time`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, idle_confirm_s: float) -> None:
        selector = getattr(loop, "_selector", None)
        if selector is None or not hasattr(selector, "select"):
            raise TypeError(f"virtual time needs a selector event loop, not {type(loop)!r}")
        self.loop = loop
        self.now = loop.time()
        """The virtual time (starts at the loop's real time, so timers already set still fit)."""
        self.idle_confirm_s = idle_confirm_s
        self.jumps = 0
        self.skipped = 0.0
        """Virtual seconds jumped over in total."""
        self._selector: selectors.BaseSelector = selector
        self._real_select: _Select = selector.select
        self._real_run_in_executor = loop.run_in_executor
        self._busy = 0

    def time(self) -> float:
        return self.now

    def run_in_executor(
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future = self._real_run_in_executor(executor, func, *args)
        self._busy += 1
        future.add_done_callback(self._job_done)
        return future

    def _job_done(self, _: asyncio.Future[Any]) -> None:
        self._busy -= 1

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:
            return self._real_select(timeout)
        events = self._real_select(0)
        if events:
            return events
        if self._busy:
            return self._real_select(min(timeout, _BUSY_SLICE_S))
        if self.idle_confirm_s > 0:
            events = self._real_select(min(timeout, self.idle_confirm_s))
            if events:
                return events
        self.now += timeout
        self.jumps += 1
        self.skipped += timeout
        return []

    def install(self) -> None:
        loop: Any = self.loop
        loop.time = self.time
        loop.run_in_executor = self.run_in_executor
        selector: Any = self._selector
        selector.select = self.select

    def uninstall(self) -> None:
        loop: Any = self.loop
        for name in ("time", "run_in_executor"):
            loop.__dict__.pop(name, None)
        selector: Any = self._selector
        selector.__dict__.pop("select", None)


@contextmanager
def virtual_time(
    loop: asyncio.AbstractEventLoop, *, idle_confirm_s: float = IDLE_CONFIRM_S
) -> Iterator[VirtualClock]:
    """Run ``loop`` on a :class:`VirtualClock` for the duration of the block.

    Leaving the block puts the loop back on real time; timers set meanwhile keep their virtual
    deadlines, which lie ahead of real time by what was skipped.
    """
    clock = VirtualClock(loop, idle_confirm_s=idle_confirm_s)
    clock.install()
    try:
        yield clock
    finally:
        clock.uninstall()
