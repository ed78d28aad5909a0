"""Waiting on the cluster: poll snapshots with a deadline, and wait until pods have settled.

Nothing here sleeps for a fixed time to let something happen: every wait polls a condition over a
fresh :class:`~hami_kubesim.stack.state.ClusterState` and gives up at a deadline with an error
naming what it waited for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from hami_kubesim.stack.state import ClusterState, Outcome, outcome, pod_key

__all__ = ["POLL_INTERVAL", "settled", "unsettled", "until", "wait_for"]

POLL_INTERVAL = 0.05


async def wait_for(
    snapshot: Callable[[], ClusterState],
    condition: Callable[[ClusterState], bool],
    *,
    within: float,
    what: str,
    progress: Callable[[ClusterState, float], None] | None = None,
    interval: float = POLL_INTERVAL,
) -> ClusterState:
    """Poll ``snapshot()`` until ``condition`` holds and return that snapshot.

    ``progress(state, elapsed)`` is called on every poll (e.g. to print a progress line).
    ``TimeoutError`` after ``within`` seconds.
    """
    started = time.monotonic()
    while True:
        state = snapshot()
        elapsed = time.monotonic() - started
        if progress is not None:
            progress(state, elapsed)
        if condition(state):
            return state
        if elapsed > within:
            raise TimeoutError(f"not reached within {within:.0f} s: {what}")
        await asyncio.sleep(interval)


async def until(
    check: Callable[[], Awaitable[bool]],
    *,
    within: float,
    what: str,
    interval: float = POLL_INTERVAL,
) -> None:
    """Await ``check()`` until it is true; ``TimeoutError`` naming ``what`` after ``within``."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {within:.0f} s: {what}")
        await asyncio.sleep(interval)


def unsettled(state: ClusterState, keys: Iterable[str] | None = None) -> list[str]:
    """Pods (``namespace/name``; all pods when ``keys`` is None) still in flight."""
    wanted = None if keys is None else set(keys)
    return [
        pod_key(pod)
        for pod in state.pods
        if (wanted is None or pod_key(pod) in wanted) and outcome(state, pod) is Outcome.IN_FLIGHT
    ]


def settled(keys: Iterable[str] | None = None) -> Callable[[ClusterState], bool]:
    """A condition: every pod named (or every pod) is Running, ended, or unschedulable with a
    reason and parked by the scheduling loop (not backing off for another try: see
    :attr:`~hami_kubesim.stack.state.ClusterState.retrying`)."""
    frozen = None if keys is None else tuple(keys)
    return lambda state: not unsettled(state, frozen)
