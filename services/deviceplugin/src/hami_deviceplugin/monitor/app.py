"""Wiring of the vGPU monitor: API client, GPU backend, pod watch, the pass loop over the regions
and the metrics site, all on one :class:`~hami_runtime.lifecycle.Lifecycle`.

:func:`run` enters these steps in dependency order; a shutdown (SIGTERM/SIGINT, the stop event,
or a background loop failing) leaves them in reverse, each under its bound and all within
``--shutdown-grace-period`` (``settings.shutdown_grace_s``):

============= ============================================ =====================================
step          entered                                      left (reverse order)
============= ============================================ =====================================
api-client    the Kubernetes client                        closed
gpu-backend   the GPU backend opened (on failure: no host  closed (NVML shut down)
              GPU series, the regions are still read)
gpu-feed      the backend's GPU list followed              cancelled
pod-watch     the watch of the pods bound to this node     cancelled
              (``spec.nodeName=<node>``)
regions       —                                            every region file closed (after a pass
                                                           or scrape in flight has let go)
scan          a pass every ``--feedback-interval`` from    cancelled
              the pod watch's first sync
metrics-site  ``/metrics``, ``/healthz``, ``/readyz``      stopped (scrapes in flight get a
                                                           share of the bound)
============= ============================================ =====================================

A step that overruns is logged as ``shutdown_step_timed_out`` and left behind, so an API server
that stops answering cannot keep the monitor from exiting.  The last log line of a clean stop is
``vgpu monitor stopped`` with the node's name.

``/readyz`` answers 200 once the pod watch has synced and the first pass has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

import structlog

from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.gpu.backends.base import CLOSE_WITHIN_S, Backend, Gpu
from hami_deviceplugin.gpu.backends.choice import choose_backend
from hami_deviceplugin.gpu.backends.nvml import HealthChecks
from hami_deviceplugin.monitor.metrics import MonitorMetrics
from hami_deviceplugin.monitor.pods import NodePodIndex, PodIndex
from hami_deviceplugin.monitor.problems import ProblemLog
from hami_deviceplugin.monitor.regions import RegionTable
from hami_deviceplugin.monitor.scan import HostGpus, Scanner
from hami_deviceplugin.monitor.settings import Settings
from hami_kube.rest import open_client
from hami_runtime.embedded import embedded
from hami_runtime.lifecycle import Lifecycle
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import rendered_metrics_app, site

__all__ = ["COMPONENT", "RunningMonitor", "make_backend", "run", "serving"]

log = structlog.get_logger("hami_deviceplugin.monitor")

COMPONENT: Final = "vgpu-monitor"
"""The lifecycle's name: its log lines and task names (``vgpu-monitor-scan``, ...)."""

QUICK_EXIT_S: Final = 2.0
"""Bounds the exits of the client, the loops, closing the region files and the metrics site."""
USAGE_TIMEOUT_S: Final = 2.0
"""How long a scrape waits for the backend's usage figures."""


@dataclass(frozen=True, slots=True)
class RunningMonitor:
    """A started monitor (for tests and the demo)."""

    settings: Settings
    metrics_port: int
    metrics: MonitorMetrics
    table: RegionTable
    pods: NodePodIndex
    scanner: Scanner
    problems: ProblemLog

    def ready(self) -> bool:
        return _ready(self.pods, self.scanner)


def _ready(pods: NodePodIndex, scanner: Scanner) -> bool:
    """``/readyz``: the pod watch has synced and the first pass has finished."""
    return pods.synced and scanner.passes > 0


def make_backend(settings: Settings) -> Backend:
    # The monitor reports usage only: the device plugin beside it watches health.
    return choose_backend(
        settings.device_backend,
        sysfs_root=settings.sysfs_root,
        fake_devices=settings.fake_devices,
        fake_poll_interval_s=settings.fake_poll_interval_s,
        health=HealthChecks(enabled=False),
    )


async def _open_backend(backend: Backend) -> tuple[Gpu, ...]:
    try:
        return await backend.open()
    except BackendError as exc:
        log.error("GPU backend failed; no host GPU series", backend=backend.name, error=str(exc))
        return ()


def _scrape(
    host: HostGpus, pods: NodePodIndex, table: RegionTable, metrics: MonitorMetrics
) -> Callable[[], Coroutine[Any, Any, bytes]]:
    """``/metrics``: the backend's usage, then the regions read and the text rendered in a worker
    thread.  One scrape at a time: they read the same regions and set the same host gauges."""
    lock = asyncio.Lock()

    async def scrape() -> bytes:
        async with lock:
            metrics.host.set_usage(host.gpus, await host.usage())
            # Before the watch has synced every pod would look unknown: no container series yet.
            index = pods.snapshot() if pods.synced else PodIndex()
            return await asyncio.to_thread(
                lambda: metrics.render(table.read(index), now=time.time(), pods=index.pods.values())
            )

    return scrape


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningMonitor], None] | None = None,
    backend: Backend | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given); the steps are
    described in the module docstring."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop, component=COMPONENT)
    backend = backend or make_backend(settings)
    node_name = settings.node_name
    metrics = MonitorMetrics(node=node_name, legacy=settings.legacy_metrics)
    problems = ProblemLog(metrics.count_error)
    table = RegionTable(
        settings.containers_dir,
        problems,
        resync_s=settings.resync_interval_s,
        pause_file=settings.mig_lock_file,
    )
    async with Lifecycle(COMPONENT, grace_s=settings.shutdown_grace_s) as life:
        client = await life.enter("api-client", open_client(settings.kube), within=QUICK_EXIT_S)
        life.on_exit("gpu-backend", backend.close, within=CLOSE_WITHIN_S)
        host = HostGpus(backend, await _open_backend(backend), timeout_s=USAGE_TIMEOUT_S)
        feed = await life.tasks("gpu-feed", within=QUICK_EXIT_S)
        feed.spawn("gpus", host.follow())

        pods = NodePodIndex(client, node_name)
        watch = await life.tasks("pod-watch", within=QUICK_EXIT_S)
        watch.spawn("pod-watch", pods.reflector.run())

        life.on_exit("regions", lambda: asyncio.to_thread(table.close), within=QUICK_EXIT_S)
        scanner = Scanner(
            table,
            pods,
            metrics,
            interval=settings.feedback_interval_s,
            pause_file=str(settings.mig_lock_file),
        )
        loops = await life.tasks("scan", within=QUICK_EXIT_S)
        loops.spawn("scan", scanner.run())

        metrics_port = await life.enter(
            "metrics-site",
            site(
                rendered_metrics_app(
                    _scrape(host, pods, table, metrics), ready=lambda: _ready(pods, scanner)
                ),
                settings.metrics_bind_address,
                within=QUICK_EXIT_S,
            ),
            within=QUICK_EXIT_S,
        )
        running = RunningMonitor(
            settings=settings,
            metrics_port=metrics_port,
            metrics=metrics,
            table=table,
            pods=pods,
            scanner=scanner,
            problems=problems,
        )
        log.info(
            "vgpu monitor started",
            node=node_name,
            backend=backend.name,
            gpus=[g.uuid for g in host.gpus],
            containers_dir=str(settings.containers_dir),
            metrics_port=metrics_port,
            legacy_metrics=settings.legacy_metrics,
        )
        if on_started is not None:
            on_started(running)
        await life.run_until(stop)
        log.info("vgpu monitor stopping", node=node_name)
    log.info("vgpu monitor stopped", node=node_name)


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, *, backend: Backend | None = None
) -> AsyncIterator[RunningMonitor]:
    """Run the monitor in this event loop for the duration of the block."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningMonitor], None]
    ) -> Coroutine[Any, Any, None]:
        return run(settings, stop=stop, on_started=on_started, backend=backend)

    async with embedded(
        start,
        name="hami-vgpu-monitor",
        grace_s=settings.shutdown_grace_s,
    ) as running:
        yield running
