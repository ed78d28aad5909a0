"""The order in which the kubelet stand-in admits pods, and the knob that slows or stops it.

The kubelet (``HandlePodAdditions``) takes the pods its sources delivered together as one batch,
sorts the batch by creation time, and admits them one at a time: a pod enters the pod manager,
is admitted (device-plugin ``Allocate`` included), and only then does the next one start. Pods
that arrive while a batch is admitted form the next batch. :class:`AdmissionQueue` hands out
pod UIDs in that order: :meth:`AdmissionQueue.next` returns the next pod to admit once the
previous one is done (the caller admits one pod per call).

The knob, per node (tests and fault scenarios): :meth:`AdmissionQueue.pause` holds every
admission not yet started until :meth:`AdmissionQueue.resume` (a kubelet that is down or
stuck; on resume every pod not admitted yet — the rest of the batch it was in and the pods bound
meanwhile — forms one batch sorted by creation time, as after a kubelet restart, so pods may be
admitted in another order than they were bound); :attr:`AdmissionQueue.delay`
makes every admission start that many seconds late (a slow kubelet). Both are measured on the
event loop's clock, so virtual time applies.

Ties in creation time (the API server stamps it to the second) keep arrival order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class _Arrival:
    uid: str
    created: str
    """``metadata.creationTimestamp`` (RFC 3339 in UTC, so text order is time order)."""


class AdmissionQueue:
    """Pods waiting for admission on one node; see the module docstring."""

    def __init__(self) -> None:
        self._arrived: list[_Arrival] = []
        self._batch: deque[_Arrival] = deque()
        self._wake = asyncio.Event()
        self._open = asyncio.Event()
        self._open.set()
        self._delay = 0.0
        self.batches = 0
        """Batches formed so far."""

    def put(self, uid: str, created: str) -> None:
        """A pod the kubelet has to admit arrived."""
        self._arrived.append(_Arrival(uid, created))
        self._wake.set()

    @property
    def waiting(self) -> int:
        """Pods whose admission has not started."""
        return len(self._arrived) + len(self._batch)

    # ----- the knob ----------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        """Start no admission until :meth:`resume` (one already started finishes)."""
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    @property
    def delay(self) -> float:
        """Seconds every admission waits before it starts (0: none)."""
        return self._delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        if not seconds >= 0:  # also refuses NaN
            raise ValueError(f"an admission delay must be a non-negative number, got {seconds}")
        self._delay = float(seconds)

    def describe(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "admissionDelaySeconds": self._delay,
            "waiting": self.waiting,
        }

    # ----- the consumer ------------------------------------------------------------------

    async def next(self) -> str:
        """The UID of the next pod to admit: the next of the current batch, or the first of a
        new batch formed from every pod that arrived since; waits while paused and for the
        delay."""
        while True:
            if not self._open.is_set():
                await self._open.wait()
                # Like a kubelet that comes back: everything not admitted yet is one batch.
                self._arrived[:0] = self._batch
                self._batch.clear()
            if not self._batch:
                await self._next_batch()
            if self._delay > 0:
                await asyncio.sleep(self._delay)
            if self._open.is_set():
                return self._batch.popleft().uid

    async def _next_batch(self) -> None:
        while not self._arrived:
            self._wake.clear()
            await self._wake.wait()
        # sorted() is stable: pods created in the same second keep their arrival order.
        self._batch.extend(sorted(self._arrived, key=lambda arrival: arrival.created))
        self._arrived.clear()
        self.batches += 1
