"""When pods were created, bound and Running, followed through a watch, and latency figures as
the benches print them.

:class:`PodTimes` records the moments (``time.monotonic()``) from a watch on one namespace's
pods in the in-process API server; :func:`latency_text` and :func:`histogram_text` write mean,
p50 and p99 in milliseconds for a list of seconds and for a service's histogram.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.stack.metrics import HistogramSummary

__all__ = ["PodTimes", "histogram_text", "latency_text"]


class PodTimes:
    """When each pod of ``namespace`` was created (set by the caller), bound, Running or
    Failed; :meth:`follow` fills the last three until cancelled."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.create_seconds: list[float] = []
        """How long each create call took (admission included), when the caller times it."""
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.failed: dict[str, float] = {}

    @property
    def ended(self) -> int:
        return len(self.running) + len(self.failed)

    async def follow(self, api: ApiServer) -> None:
        async with api.watch("pods", namespace=self.namespace) as watch:
            async for event in watch:
                name = str(event.object.get("metadata", {}).get("name"))
                now = time.monotonic()
                if event.object.get("spec", {}).get("nodeName"):
                    self.bound.setdefault(name, now)
                phase = event.object.get("status", {}).get("phase")
                if phase == "Running":
                    self.running.setdefault(name, now)
                elif phase == "Failed":
                    self.failed.setdefault(name, now)

    def to_running(self) -> list[float]:
        """Seconds from creation to Running, per Running pod."""
        return [self.running[n] - self.created[n] for n in self.running if n in self.created]

    def to_bound(self) -> list[float]:
        """Seconds from creation to bound, per Running pod."""
        return [
            self.bound[n] - self.created[n]
            for n in self.running
            if n in self.bound and n in self.created
        ]

    def bound_to_running(self) -> list[float]:
        """Seconds from bound to Running, per Running pod."""
        return [self.running[n] - self.bound[n] for n in self.running if n in self.bound]


def latency_text(values: Sequence[float]) -> str:
    """``mean … ms  p50 … ms  p99 … ms  (n=…)`` of ``values`` (seconds)."""
    if not values:
        return "n/a"
    ordered = sorted(values)
    p50 = ordered[len(ordered) // 2] * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    return (
        f"mean {statistics.fmean(ordered) * 1000:8.1f} ms  p50 {p50:8.1f} ms  "
        f"p99 {p99:8.1f} ms  (n={len(ordered)})"
    )


def histogram_text(summary: HistogramSummary | None) -> str:
    """The same figures of a service's histogram (``no samples`` without one)."""
    if summary is None:
        return "no samples"
    return (
        f"mean {summary.mean * 1000:8.1f} ms  p50 {summary.p50 * 1000:8.1f} ms  "
        f"p99 {summary.p99 * 1000:8.1f} ms  (n={summary.count})"
    )
