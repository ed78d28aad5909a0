"""The GPU map's parts as the service assembles them (:mod:`hami_scheduler.app`): the verdicts
the filter records, the pending-pods watch, the vGPU monitors' collector (``--gpumap-monitors``)
and the application serving them with the cache.

Nothing here exists when ``--gpumap-bind-address`` is empty: no watch, no verdicts, no port.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from aiohttp import web

from hami_kube.reflector import Reflector, ReflectorConfig, upserting
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient
from hami_scheduler.cache.dra import DraWatch
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.gpumap.answers import SharedAnswers
from hami_scheduler.gpumap.fit import FitProbe
from hami_scheduler.gpumap.locate import (
    EndpointLocator,
    Locator,
    TemplateLocator,
    parse_monitor_source,
)
from hami_scheduler.gpumap.monitors import MAX_AGE_S, UsageCollector
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
    usage: UsageCollector | None = None
    dra: DraWatch | None = None

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"


@dataclass(slots=True)
class GpuMap:
    """The parts before the site starts; :meth:`app` builds the application once."""

    verdicts: Verdicts
    pending: PendingPods
    watch: Reflector
    client: KubeClient
    probe: FitProbe | None = None
    usage: UsageCollector | None = None
    dra: DraWatch | None = None
    """DRA-managed GPUs (``--gpumap-dra``); run it beside the other watches."""

    def collector(
        self, cache: SchedulerCache, settings: Settings, *, now: Callable[[], datetime]
    ) -> UsageCollector | None:
        """The monitors' collector (enter it before serving), ``None`` when usage is off."""
        source = parse_monitor_source(settings.gpumap_monitors)
        locator: Locator
        if source.service is not None:
            locator = EndpointLocator(
                self.client, source.service, max_age_s=MAX_AGE_S, clock=time.monotonic
            )
        elif source.template:

            def address_of(node: str) -> str | None:
                facts = cache.facts(node)
                return facts.address if facts is not None else None

            locator = TemplateLocator(source.template, address_of)
        else:
            return None
        self.usage = UsageCollector(locator, timeout_s=settings.gpumap_monitor_timeout_s, now=now)
        return self.usage

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
            usage=self.usage,
            shared=SharedAnswers(settings.gpumap_max_age_s),
        )
        if self.dra is not None:
            state = dataclasses.replace(state, dra=self.dra.view)
        return build_gpumap_app(state)

    def running(self, port: int | None) -> RunningGpuMap:
        assert port is not None, "the site has started"
        assert self.probe is not None, "the application was built"
        return RunningGpuMap(
            port, self.verdicts, self.pending, self.watch, self.probe, self.usage, self.dra
        )


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
    dra = DraWatch(client, config) if settings.gpumap_dra else None
    return GpuMap(verdicts, pending, watch, client, dra=dra)
