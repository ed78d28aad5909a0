"""The pending-pod queue: active, backing off, or parked as unschedulable.

Modelled on kube-scheduler's ``PriorityQueue``:

- *active*: ready to be tried, highest ``spec.priority`` first, then oldest;
- *backoff*: failed recently, ready again at ``last failure + backoff(attempts)`` where the
  backoff doubles from ``initial`` up to ``maximum``;
- *unschedulable*: no node fits; waits for a cluster event (node added or changed, a pod freeing
  resources) that might change that, or for ``unschedulable_timeout`` as a safety net.  An event
  never bypasses the backoff: a pod woken early goes to *backoff* until its time comes.

A failure reported for a pod whose attempt started before the last cluster event goes straight to
*backoff*: the event may already have made it schedulable, and parking it would lose the wake-up.

Nothing here polls: :meth:`pop` sleeps until a pod is added or the next backoff expires.  Times
are read from the running event loop's clock (``loop.time()``, the monotonic clock unless a test
runs the loop on virtual time), so the deadlines and the sleeps that wait for them agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SchedulingQueue", "backoff_duration"]


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def backoff_duration(attempts: int, *, initial: float, maximum: float) -> float:
    """``initial`` doubled for every attempt after the first, capped at ``maximum``."""
    duration = initial
    for _ in range(1, attempts):
        if duration > maximum - duration:
            return maximum
        duration += duration
    return min(duration, maximum)


_DUE_TOLERANCE_S = 1e-6
"""A deadline this close is due (see ``_flush``)."""


@dataclass(slots=True)
class _Entry:
    priority: int
    created: str
    attempts: int = 0
    failed_at: float = 0.0
    parked_at: float = 0.0
    popped_cycle: int = -1


class SchedulingQueue:
    """Pod keys waiting to be scheduled; see the module docstring for the three states."""

    def __init__(
        self,
        *,
        initial_backoff: float,
        max_backoff: float,
        unschedulable_timeout: float = 300.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._initial = initial_backoff
        self._maximum = max_backoff
        self._unschedulable_timeout = unschedulable_timeout
        self._clock = clock or _loop_time
        self._entries: dict[str, _Entry] = {}
        self._active: list[tuple[int, str, int, str]] = []
        self._active_keys: set[str] = set()
        self._backoff: dict[str, float] = {}
        self._unschedulable: set[str] = set()
        self._in_flight: set[str] = set()
        self._sequence = 0
        self._move_cycle = 0
        self._wakeup = asyncio.Event()

    # -- queries -----------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def state_of(self, key: str) -> str | None:
        """``active``, ``backoff``, ``unschedulable``, ``in-flight`` or ``None``."""
        if key in self._in_flight:
            return "in-flight"
        if key in self._active_keys:
            return "active"
        if key in self._backoff:
            return "backoff"
        if key in self._unschedulable:
            return "unschedulable"
        return None

    def retrying(self) -> frozenset[str]:
        """Keys it will hand out again without a cluster event: active, backing off or in
        flight (everything but the parked unschedulable pods)."""
        return frozenset(self._entries.keys() - self._unschedulable)

    def attempts(self, key: str) -> int:
        entry = self._entries.get(key)
        return entry.attempts if entry else 0

    # -- producers ---------------------------------------------------------------------------

    def add(self, key: str, *, priority: int = 0, created: str = "") -> None:
        """A pending pod appeared (or changed in a way that may matter): make it eligible."""
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(priority=priority, created=created)
            self._push_active(key)
            return
        entry.priority, entry.created = priority, created
        if key in self._unschedulable:
            self._unschedulable.discard(key)
            self._wake(key)

    def delete(self, key: str) -> None:
        """The pod is gone or no longer pending."""
        self._entries.pop(key, None)
        self._active_keys.discard(key)
        self._backoff.pop(key, None)
        self._unschedulable.discard(key)
        self._in_flight.discard(key)

    def move_all_unschedulable(self) -> None:
        """A cluster event that may make parked pods schedulable."""
        self._move_cycle += 1
        for key in list(self._unschedulable):
            self._unschedulable.discard(key)
            self._wake(key)

    # -- the consumer ------------------------------------------------------------------------

    async def pop(self) -> str:
        """The next key to try; waits for one.  The key is *in flight* until reported back."""
        while True:
            self._flush()
            while self._active:
                _, _, _, key = heapq.heappop(self._active)
                if key in self._active_keys:
                    self._active_keys.discard(key)
                    self._in_flight.add(key)
                    self._entries[key].popped_cycle = self._move_cycle
                    return key
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._next_due()):
                    await self._wakeup.wait()

    def done(self, key: str) -> None:
        """The pod was scheduled (or dropped): forget it and its backoff history."""
        self.delete(key)

    def failed(self, key: str, *, unschedulable: bool) -> float:
        """The attempt failed; queue it again.  Returns the backoff applied, in seconds.

        ``unschedulable``: no node fits (park until an event); otherwise an error (retry after the
        backoff).
        """
        self._in_flight.discard(key)
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        now = self._clock()
        entry.attempts += 1
        entry.failed_at = now
        backoff = backoff_duration(entry.attempts, initial=self._initial, maximum=self._maximum)
        if unschedulable and entry.popped_cycle == self._move_cycle:
            entry.parked_at = now
            self._unschedulable.add(key)
        else:
            self._backoff[key] = now + backoff
            self._wakeup.set()
        return backoff

    def requeue(self, key: str) -> None:
        """Put an in-flight pod back as active without counting an attempt."""
        self._in_flight.discard(key)
        if key in self._entries:
            self._push_active(key)

    # -- internals ---------------------------------------------------------------------------

    def _wake(self, key: str) -> None:
        entry = self._entries[key]
        ready_at = entry.failed_at + backoff_duration(
            entry.attempts, initial=self._initial, maximum=self._maximum
        )
        if entry.attempts and ready_at > self._clock():
            self._backoff[key] = ready_at
            self._wakeup.set()
        else:
            self._push_active(key)

    def _push_active(self, key: str) -> None:
        if key in self._active_keys or key in self._in_flight:
            return
        self._backoff.pop(key, None)
        entry = self._entries[key]
        self._sequence += 1
        heapq.heappush(self._active, (-entry.priority, entry.created, self._sequence, key))
        self._active_keys.add(key)
        self._wakeup.set()

    def _flush(self) -> None:
        # A timer set for a deadline can fire a hair before it in floating point (``now`` is
        # ``start + (deadline - start)``); without the tolerance the pod would wait for a timer
        # of a few femtoseconds, which a virtual clock runs at the same instant, forever.
        now = self._clock() + _DUE_TOLERANCE_S
        for key, ready_at in list(self._backoff.items()):
            if ready_at <= now:
                del self._backoff[key]
                self._push_active(key)
        for key in list(self._unschedulable):
            if now - self._entries[key].parked_at >= self._unschedulable_timeout:
                self._unschedulable.discard(key)
                self._push_active(key)

    def _next_due(self) -> float | None:
        now = self._clock()
        deadlines = list(self._backoff.values())
        deadlines.extend(
            self._entries[key].parked_at + self._unschedulable_timeout
            for key in self._unschedulable
        )
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - now)
