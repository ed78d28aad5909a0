"""The GPU map's parts as the service assembles them (:mod:`hami_scheduler.app`): the verdicts
the filter records, the pending-pods watch, and the application serving both with the cache.

Nothing here exists when ``--gpumap-bind-address`` is empty: no watch, no verdicts, no port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from hami_kube.reflector import Reflector, ReflectorConfig, upserting
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.gpumap.fit import FitProbe
from hami_scheduler.gpumap.pending import PENDING_PODS, PendingPods
from hami_scheduler.gpumap.server import GpuMapState, build_gpumap_app
from hami_scheduler.gpumap.verdicts import Verdicts
from hami_scheduler.leader import LeaderView
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.plan import Planner
from hami_scheduler.settings import Settings

__all__ = ["GpuMap", "RunningGpuMap", "gpumap_parts"]


@dataclass(frozen=True, slots=True)
class RunningGpuMap:
    """A served GPU map (for tests and the demo)."""

    port: int
    verdicts: Verdicts
    pending: PendingPods
    watch: Reflector
    probe: FitProbe

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"


@dataclass(slots=True)
class GpuMap:
    """The parts before the site starts; :meth:`app` builds the application once."""

    verdicts: Verdicts
    pending: PendingPods
    watch: Reflector
    probe: FitProbe | None = None

    def app(
        self,
        cache: SchedulerCache,
        planner: Planner,
        leadership: LeaderView,
        metrics: SchedulerMetrics,
        settings: Settings,
        *,
        now: Callable[[], datetime],
    ) -> web.Application:
        self.probe = FitProbe(cache, planner)
        state = GpuMapState(
            cache=cache,
            probe=self.probe,
            pending=self.pending,
            pending_synced=lambda: self.watch.has_synced,
            leadership=leadership,
            identity=settings.leader.identity,
            scheduler_name=settings.component,
            metrics=metrics,
            frame_ancestors=settings.gpumap_frame_ancestors,
            now=now,
        )
        return build_gpumap_app(state)

    def running(self, port: int | None) -> RunningGpuMap:
        assert port is not None, "the site has started"
        assert self.probe is not None, "the application was built"
        return RunningGpuMap(port, self.verdicts, self.pending, self.watch, self.probe)


def gpumap_parts(
    settings: Settings, client: KubeClient, config: ReflectorConfig | None
) -> GpuMap | None:
    """The verdict store and the pending-pods watch; ``None`` when the map is disabled."""
    if not settings.gpumap_bind_address:
        return None
    verdicts = Verdicts()
    pending = PendingPods(
        settings.vendors,
        verdicts=verdicts,
        node_policy=settings.node_policy,
        gpu_policy=settings.gpu_policy,
    )
    watch_config = dataclasses.replace(
        config or ReflectorConfig(),
        label_selector=None,
        field_selector=PENDING_PODS,
        keep=pending.wanted,
    )
    watch = Reflector(
        client,
        PODS,
        config=watch_config,
        handlers=[upserting(pending.upsert, pending.remove)],
        name="scheduler-pending-pods",
    )
    return GpuMap(verdicts, pending, watch)
