"""The work queue kube-controller-manager's controllers share (client-go's rate-limited
workqueue, as far as the stand-ins need it): keys are processed in order, each at most once
while waiting; a sync that fails is retried after a per-key exponential backoff (from 5 ms,
doubling, at most 60 s), and one bad key never stops the controller."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Final, Generic, TypeVar

import structlog

from hami_kube.backoff import BackoffPolicy
from hami_kube.errors import KubeError

log = structlog.get_logger(__name__)

K = TypeVar("K", bound=Hashable)
RETRY: Final = BackoffPolicy(initial=0.005, factor=2.0, cap=60.0, jitter=0.0)
"""The controllers' per-item rate limiter: from 5 ms, doubling."""


class WorkQueue(Generic[K]):
    """``add`` keys (now or ``later``); ``await run(sync)`` processes them until cancelled;
    ``close`` cancels pending timers."""

    def __init__(self, name: str, *, retry: BackoffPolicy = RETRY) -> None:
        self.name = name
        self._retry = retry
        self._due: dict[K, None] = {}  # in order, each once
        self._wake = asyncio.Event()
        self._failures: dict[K, int] = {}
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: K) -> None:
        self._due[key] = None
        self._wake.set()

    def later(self, seconds: float, key: K) -> None:
        def fire() -> None:
            self._timers.discard(timer)
            self.add(key)

        timer = asyncio.get_running_loop().call_later(seconds, fire)
        self._timers.add(timer)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    async def run(self, sync: Callable[[K], Awaitable[None]]) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._due:
                key = next(iter(self._due))
                del self._due[key]
                await self._attempt(key, sync)

    async def _attempt(self, key: K, sync: Callable[[K], Awaitable[None]]) -> None:
        try:
            await sync(key)
        except Exception as error:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            delay = self._retry.base_delay(failures)
            if isinstance(error, KubeError):
                log.info(f"{self.name} retries", key=key, error=str(error), after_s=delay)
            else:
                log.exception(f"{self.name} sync crashed", key=key)
            self.later(delay, key)
        else:
            self._failures.pop(key, None)
