"""Wiring: caches, watches, leadership, handshakes, the extender and metrics servers under one
TaskGroup.

Lifecycle of :func:`run`:

1. open the Kubernetes client; build the cache, its watches, the Event recorder, the
   leadership (none, follow or campaign) and the filter/bind services;
2. serve the extender (HTTPS when a certificate is configured, reloaded when the files change)
   and ``/metrics``; log ``scheduler_started`` with the bound ports (``--http_bind
   127.0.0.1:0`` picks a free one);
3. once every watch has listed, ``/readyz`` turns 200, every node's open-device view is built,
   the heap built so far is frozen out of
   the garbage collector (``gc.freeze()``: the cache's hundreds of thousands of long-lived
   objects would otherwise be rescanned by every full collection, a latency spike per filter
   that happens to trigger one) and ``caches_synced`` is logged;
4. wait for the stop event (SIGTERM/SIGINT when run as a process);
5. shut down in order: stop accepting and let in-flight requests finish, cancel the background
   tasks (a campaigning leader releases its Lease), stop the metrics server, close the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from hami_kube.events import EventRecorder
from hami_kube.reflector import ReflectorConfig
from hami_kube.rest import KubeClient, open_client
from hami_protocol.selectors import parse_selector_string
from hami_runtime.embedded import embedded
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, serving_sites
from hami_runtime.tls import ReloadingServerTLS
from hami_scheduler.bind import BindService
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.cache.watch import CacheWatcher
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.handshake import HandshakeLoop
from hami_scheduler.http import ExtenderState, build_app
from hami_scheduler.leader import AlwaysLeader, Leadership, LeaseCampaign, LeaseFollower
from hami_scheduler.locks import NodeLocker
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.pod_writes import KubeDecisionWriter, RoleLabeller
from hami_scheduler.selection.plan import Planner
from hami_scheduler.settings import Settings

__all__ = ["RunningScheduler", "run", "serving"]

log = structlog.get_logger("hami_scheduler")


@dataclass(frozen=True, slots=True)
class RunningScheduler:
    """A started service: bound ports and the live collaborators (for tests and the demo)."""

    port: int
    metrics_port: int
    tls: ReloadingServerTLS | None
    cache: SchedulerCache
    watcher: CacheWatcher
    leadership: Leadership
    handshakes: HandshakeLoop
    filters: FilterService
    binder: BindService
    metrics: SchedulerMetrics

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}"

    def ready(self) -> bool:
        return self.watcher.synced


@dataclass(frozen=True, slots=True)
class _Parts:
    cache: SchedulerCache
    watcher: CacheWatcher
    leadership: Leadership
    handshakes: HandshakeLoop
    filters: FilterService
    binder: BindService
    recorder: EventRecorder
    labeller: RoleLabeller


def _leadership(
    client: KubeClient, settings: Settings, on_change: Callable[[bool], object]
) -> Leadership:
    election = settings.leader

    async def changed(leading: bool) -> None:
        result = on_change(leading)
        if asyncio.iscoroutine(result):
            await result

    if not election.enabled:
        return AlwaysLeader(election.identity, on_change=changed)
    if election.mode == "campaign":
        return LeaseCampaign(client, election, on_change=changed)
    return LeaseFollower(client, election, on_change=changed)


def _build(
    client: KubeClient,
    settings: Settings,
    metrics: SchedulerMetrics,
    reflector_config: ReflectorConfig | None,
) -> _Parts:
    recorder = EventRecorder(client, component=settings.component, host=settings.leader.identity)
    events = SchedulerEvents(recorder)

    def bad_annotation(node: str, key: str, problem: str, raw: str) -> None:
        log.warning("invalid_node_annotation", node=node, key=key, problem=problem, value=raw[:200])
        events.bad_node_annotation(node, key, problem)

    def health_change(node: str, word: str, healthy: bool) -> None:
        what = "vendor_available_again" if healthy else "vendor_unavailable"
        log.warning(what, node=node, vendor=word, handshake_timeout_s=settings.handshake_timeout_s)

    def pod_problem(pod: str, uid: str, problem: str) -> None:
        log.warning("invalid_pod_annotation", pod=pod, uid=uid, problem=problem)

    cache = SchedulerCache(
        settings.vendors,
        selector=parse_selector_string(settings.node_label_selector),
        handshake_timeout_s=settings.handshake_timeout_s,
        on_bad_annotation=bad_annotation,
        on_health_change=health_change,
        on_pod_problem=pod_problem,
    )
    watcher = CacheWatcher(client, cache, config=reflector_config)
    labeller = RoleLabeller(
        client, pod_name=settings.pod_name, pod_namespace=settings.pod_namespace
    )
    holder: list[Leadership] = []
    handshakes = HandshakeLoop(
        cache,
        client=client,
        is_leader=lambda: bool(holder) and holder[0].is_leader,
        interval_s=settings.handshake_interval_s,
        on_api_error=metrics.api_error,
    )

    async def on_change(leading: bool) -> None:
        metrics.leader.set(1 if leading else 0)
        if leading:
            handshakes.wake()
        await labeller.label(leading)

    leadership = _leadership(client, settings, on_change)
    holder.append(leadership)
    planner = Planner(settings.vendors, settings.node_policy, settings.gpu_policy)
    filters = FilterService(
        cache=cache,
        planner=planner,
        writer=KubeDecisionWriter(client),
        events=events,
        metrics=metrics,
        mode=settings.filter_mode,
        is_leader=lambda: leadership.is_leader,
        leader=lambda: leadership.leader,
        synced=lambda: watcher.synced,
    )
    binder = BindService(
        client=client,
        cache=cache,
        planner=planner,
        locker=NodeLocker(
            client,
            timeout_s=settings.node_lock_timeout_s,
            retry_timeout_s=settings.node_lock_retry_timeout_s,
        ),
        events=events,
        metrics=metrics,
        mode=settings.filter_mode,
        is_leader=lambda: leadership.is_leader,
        leader=lambda: leadership.leader,
    )
    return _Parts(cache, watcher, leadership, handshakes, filters, binder, recorder, labeller)


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningScheduler], None] | None = None,
    freeze_gc: bool = True,
    reflector_config: ReflectorConfig | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given).

    ``freeze_gc=False`` skips ``gc.freeze()`` (for running several instances in one process).
    """
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    metrics = SchedulerMetrics()
    tls = (
        ReloadingServerTLS(
            settings.cert_file, settings.key_file, poll_interval=settings.tls_reload_interval_s
        )
        if settings.cert_file and settings.key_file
        else None
    )
    if tls is not None:
        metrics.track_tls_reloads(lambda: tls.reloads)
    async with open_client(settings.kube) as client:
        parts = _build(client, settings, metrics, reflector_config)
        metrics.track_cache(parts.cache, lambda: parts.watcher.synced)
        await _serve(
            settings,
            parts=parts,
            metrics=metrics,
            tls=tls,
            stop=stop,
            on_started=on_started,
            freeze_gc=freeze_gc,
        )


async def _after_sync(parts: _Parts, *, freeze_gc: bool) -> None:
    await parts.watcher.wait_synced()
    parts.cache.warm()
    if freeze_gc:
        gc.collect()
        gc.freeze()
    log.info(
        "caches_synced",
        nodes=parts.cache.node_count,
        registered_nodes=len(parts.cache.nodes),
        pods=parts.cache.pod_count,
        resourcequotas=len(parts.cache.quotas),
        gc_frozen=gc.get_freeze_count() if freeze_gc else 0,
    )
    parts.handshakes.wake()


async def _serve(
    settings: Settings,
    *,
    parts: _Parts,
    metrics: SchedulerMetrics,
    tls: ReloadingServerTLS | None,
    stop: asyncio.Event,
    on_started: Callable[[RunningScheduler], None] | None,
    freeze_gc: bool,
) -> None:
    state = ExtenderState(
        filters=parts.filters,
        binder=parts.binder,
        metrics=metrics,
        ready=lambda: parts.watcher.synced,
    )
    async with (
        serving_sites(
            build_app(state, max_body_bytes=settings.max_body_bytes),
            settings.http_bind,
            ssl_context=tls.context if tls else None,
            metrics=metrics_app(metrics.registry, ready=state.ready),
            metrics_bind=settings.metrics_bind_address,
        ) as sites,
        asyncio.TaskGroup() as group,
    ):
        background = parts.watcher.start(group)
        background += [
            group.create_task(parts.recorder.run(), name="scheduler-events"),
            group.create_task(parts.leadership.run(), name="scheduler-leadership"),
            group.create_task(parts.handshakes.run(), name="scheduler-handshakes"),
            group.create_task(_after_sync(parts, freeze_gc=freeze_gc), name="scheduler-after-sync"),
        ]
        if tls is not None:
            background.append(group.create_task(tls.watch(), name="scheduler-tls-reload"))
        if settings.leader.enabled and parts.labeller.enabled:
            background.append(
                group.create_task(
                    parts.labeller.label(parts.leadership.is_leader),
                    name="scheduler-role-label",
                )
            )
        log.info(
            "scheduler_started",
            bind=settings.http_bind,
            port=sites.port,
            tls=tls is not None,
            metrics_port=sites.metrics_port,
            filter_mode=settings.filter_mode,
            leader_elect=settings.leader.enabled,
            leader_mode=settings.leader.mode if settings.leader.enabled else None,
            identity=settings.leader.identity,
            vendors=[vendor.common_word for vendor in settings.vendors],
        )
        if on_started is not None:
            on_started(
                RunningScheduler(
                    port=sites.port,
                    metrics_port=sites.metrics_port,
                    tls=tls,
                    cache=parts.cache,
                    watcher=parts.watcher,
                    leadership=parts.leadership,
                    handshakes=parts.handshakes,
                    filters=parts.filters,
                    binder=parts.binder,
                    metrics=metrics,
                )
            )
        await stop.wait()
        log.info("scheduler_stopping")
        await sites.drain(background)
    log.info("scheduler_stopped")


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, *, reflector_config: ReflectorConfig | None = None
) -> AsyncIterator[RunningScheduler]:
    """Run the service in this event loop for the duration of the block (no ``gc.freeze``)."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningScheduler], None]
    ) -> Coroutine[Any, Any, None]:
        return run(
            settings,
            stop=stop,
            on_started=on_started,
            freeze_gc=False,
            reflector_config=reflector_config,
        )

    async with embedded(start, name="hami-scheduler") as running:
        yield running
