"""The loop that runs a pass over the regions every ``--feedback-interval`` (discovery, reads,
feedback: :meth:`~hami_deviceplugin.monitor.regions.RegionTable.run_pass` in a worker thread),
from the moment the pod watch has synced, and the host GPUs the scrape reports on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import structlog

from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.gpu.backends.base import Backend, Gpu, GpuUsage
from hami_deviceplugin.monitor.metrics import MonitorMetrics
from hami_deviceplugin.monitor.pods import NodePodIndex
from hami_deviceplugin.monitor.regions import PassReport, RegionTable

__all__ = ["HostGpus", "Scanner"]

log = structlog.get_logger("hami_deviceplugin.monitor")


class Scanner:
    """Passes over ``table`` every ``interval`` seconds once ``pods`` has synced."""

    def __init__(
        self,
        table: RegionTable,
        pods: NodePodIndex,
        metrics: MonitorMetrics,
        *,
        interval: float,
        pause_file: str,
    ) -> None:
        self._table = table
        self._pods = pods
        self._metrics = metrics
        self._interval = interval
        self._pause_file = pause_file
        self._paused = False
        self.passes = 0
        """Passes finished (the first one makes the monitor ready)."""
        self.last: PassReport | None = None

    async def run(self) -> None:
        await self._pods.reflector.wait_synced()
        while True:
            await self.run_once()
            await asyncio.sleep(self._interval)

    async def run_once(self) -> PassReport:
        index = self._pods.snapshot()
        started = time.perf_counter()
        report = await asyncio.to_thread(self._table.run_pass, index)
        self._metrics.observe_pass(report, time.perf_counter() - started)
        if report.paused != self._paused:
            self._paused = report.paused
            if report.paused:
                log.warning("feedback paused while the MIG lock file exists", path=self._pause_file)
            else:
                log.info("feedback resumed: the MIG lock file is gone", path=self._pause_file)
        self.last = report
        self.passes += 1
        return report


class HostGpus:
    """The backend's GPUs, kept current by :meth:`follow`; :meth:`usage` at each scrape."""

    def __init__(self, backend: Backend, gpus: tuple[Gpu, ...], *, timeout_s: float) -> None:
        self._backend = backend
        self.gpus = gpus
        self._timeout_s = timeout_s

    async def follow(self) -> None:
        async for gpus in self._backend.updates():
            self.gpus = gpus

    async def usage(self) -> Mapping[str, GpuUsage]:
        """Live usage by UUID; empty when the backend fails or does not answer in time."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._backend.usage()
        except (BackendError, TimeoutError) as exc:
            log.warning("GPU usage sample failed", error=str(exc) or type(exc).__name__)
            return {}
