"""A client-side token bucket (qps with burst), like client-go's default request throttle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` per second; ``acquire`` waits for one.

    Callers reserve a token immediately (the balance may go negative) and then sleep off their
    share of the deficit, so waiters are served in arrival order without polling.
    """

    __slots__ = ("_clock", "_last", "_tokens", "burst", "qps")

    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token now; returns how long the caller must wait before using it."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


__all__ = [
    "TokenBucket",
]
