"""Wiring: the scheduler's parts as the steps of one bounded lifecycle
(:class:`~hami_runtime.lifecycle.Lifecycle`).

:func:`run` enters, in this order:

1. ``api-client`` — the Kubernetes client;
2. ``event-writer`` / ``event-flush`` — the Event recorder's writer task; on the way out the
   queued Events are flushed first (bounded), then the writer is cancelled;
3. ``watches`` — the node, pod and ResourceQuota reflectors feeding the cache;
4. ``leadership`` — none, follow or campaign (``--leader-elect-mode``); a campaigning leader
   releases its Lease when cancelled, so a successor need not wait for it to expire;
5. ``metrics-site``, ``extender-site`` and ``gpumap-site`` — ``/metrics``, the extender (HTTPS
   when a certificate is configured) and the read-only GPU map (``--gpumap-bind-address``, when
   set: :mod:`hami_scheduler.gpumap`, whose pending-pods watch runs in ``watches``, after
   ``gpumap-monitors``, the HTTP session reading the vGPU monitors' usage); leaving a
   site stops accepting and lets in-flight requests finish (until the step's bound), while the
   caches, the leadership and the client they use are still there;
6. ``loops`` — handshakes, the upkeep (overdue node locks, stale pending binds), the
   certificate reloader, the after-sync step and the role label.

Then it logs ``scheduler_started`` with the bound ports (``--http_bind 127.0.0.1:0`` picks a free
one) and waits for the stop event (SIGTERM/SIGINT when run as a process) or for a loop to fail.
Once every watch has listed, the after-sync step builds every node's open-device view, freezes the
heap built so far out of the garbage collector (``gc.freeze()``: the cache's hundreds of
thousands of long-lived objects would otherwise be rescanned by every full collection, a latency
spike per filter that happens to trigger one), wakes the handshakes and logs ``caches_synced``;
``/readyz`` answers 200 from then on.

**Stopping** leaves the steps in reverse order, the whole within ``--shutdown-grace-period``;
each step gets a share of it (:data:`EXIT_SHARES`), so one stuck peer — an API server that stops
answering, a client holding a request open — cannot take the time the others need.  A step
that overruns is logged with the tasks still running in it and abandoned.  ``scheduler_stopped``
is the last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import structlog

from hami_kube.events import EventRecorder
from hami_kube.reflector import ReflectorConfig
from hami_kube.rest import KubeClient, open_client
from hami_kube.timefmt import utc_now
from hami_protocol.selectors import parse_selector_string
from hami_runtime.embedded import embedded
from hami_runtime.lifecycle import Lifecycle
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, site
from hami_runtime.tls import ReloadingServerTLS
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.bind.service import BindService
from hami_scheduler.bind.upkeep import OverdueLocks, Upkeep
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.cache.watch import CacheWatcher
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.gpumap.parts import RunningGpuMap, gpumap_parts
from hami_scheduler.gpumap.server import MAX_LINE
from hami_scheduler.gpumap.verdicts import Verdicts
from hami_scheduler.handshake import HandshakeLoop
from hami_scheduler.http import ExtenderState, build_app
from hami_scheduler.leader import AlwaysLeader, Leadership, LeaseCampaign, LeaseFollower
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.nodelock.locker import NodeLocker
from hami_scheduler.nodelock.owners import LockOwners
from hami_scheduler.nodelock.waits import LockWaits
from hami_scheduler.pod_writes import RoleLabeller
from hami_scheduler.preempt import PreemptService
from hami_scheduler.preempt_events import PreemptionEvents
from hami_scheduler.selection.plan import Planner
from hami_scheduler.selection.select import hold_planner
from hami_scheduler.settings import Settings

__all__ = ["EXIT_SHARES", "RunningScheduler", "run", "serving"]

log = structlog.get_logger("hami_scheduler")

EXIT_SHARES: Final = {
    "loops": 0.05,
    "gpumap-site": 0.03,
    "gpumap-monitors": 0.02,
    "extender-site": 0.45,
    "metrics-site": 0.05,
    "leadership": 0.15,
    "watches": 0.05,
    "event-flush": 0.1,
    "event-writer": 0.02,
    "api-client": 0.08,
}
"""The share of the grace period each step may take to exit (they add up to the whole)."""


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
    upkeep: Upkeep
    gpumap: RunningGpuMap | None = None
    """The GPU map's parts, when ``--gpumap-bind-address`` is set."""

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}"

    def ready(self) -> bool:
        return self.watcher.synced


class _RoleChange:
    """What a leadership transition sets off: the leader gauge, a handshake pass when leading
    (the leader is the one that writes them), and this replica's role label."""

    def __init__(
        self, *, metrics: SchedulerMetrics, labeller: RoleLabeller, handshake_due: asyncio.Event
    ) -> None:
        self._metrics = metrics
        self._labeller = labeller
        self._handshake_due = handshake_due

    async def __call__(self, leading: bool) -> None:
        self._metrics.leader.set(1 if leading else 0)
        if leading:
            self._handshake_due.set()
        await self._labeller.label(leading)


def _leadership(client: KubeClient, settings: Settings, on_change: _RoleChange) -> Leadership:
    election = settings.leader
    if not election.enabled:
        return AlwaysLeader(election.identity, on_change=on_change)
    if election.mode == "campaign":
        return LeaseCampaign(client, election, on_change=on_change)
    return LeaseFollower(client, election, on_change=on_change)


def _cache(
    settings: Settings, events: SchedulerEvents, now: Callable[[], datetime]
) -> SchedulerCache:
    def bad_annotation(node: str, key: str, problem: str, raw: str) -> None:
        log.warning("invalid_node_annotation", node=node, key=key, problem=problem, value=raw[:200])
        events.bad_node_annotation(node, key, problem)

    def health_change(node: str, word: str, healthy: bool) -> None:
        what = "vendor_available_again" if healthy else "vendor_unavailable"
        log.warning(what, node=node, vendor=word, handshake_timeout_s=settings.handshake_timeout_s)

    def pod_problem(pod: str, uid: str, problem: str) -> None:
        log.warning("invalid_pod_annotation", pod=pod, uid=uid, problem=problem)

    return SchedulerCache(
        settings.vendors,
        selector=parse_selector_string(settings.node_label_selector),
        handshake_timeout_s=settings.handshake_timeout_s,
        on_bad_annotation=bad_annotation,
        on_health_change=health_change,
        on_pod_problem=pod_problem,
        now=now,
    )


@dataclass(frozen=True, slots=True)
class _Deciders:
    filters: FilterService
    binder: BindService
    upkeep: Upkeep
    preempts: PreemptService
    planner: Planner


def _deciders(
    client: KubeClient,
    settings: Settings,
    *,
    watcher: CacheWatcher,
    owners: LockOwners,
    waits: LockWaits,
    pending: PendingBinds,
    events: SchedulerEvents,
    metrics: SchedulerMetrics,
    leadership: Leadership,
    chosen: PreemptionEvents,
    now: Callable[[], datetime],
    verdicts: Verdicts | None,
) -> _Deciders:
    """What answers ``/filter``, ``/prioritize``, ``/bind`` and ``/preempt``, and what looks after
    them."""
    planner = Planner(
        settings.vendors,
        settings.node_policy,
        settings.gpu_policy,
        device_config=settings.device_config,
    )
    # Nominated preemptors are planned as their own filter plans them, to hold devices for them.
    watcher.cache.nominations.planner = hold_planner(planner, watcher.cache)
    filters = FilterService(
        cache=watcher.cache,
        planner=planner,
        events=events,
        metrics=metrics,
        mode=settings.filter_mode,
        leadership=leadership,
        watches=watcher,
        pending=pending,
        clock=lambda: now().timestamp(),
        verdicts=verdicts,
    )
    locking: dict[str, list[str]] = {}
    for vendor in watcher.cache.vendors:
        if vendor.node_lock_key:
            locking.setdefault(vendor.node_lock_key, []).append(vendor.common_word)
    locker = NodeLocker(
        client,
        owners=owners,
        cached=watcher.nodes.store.get,
        timeout_s=settings.node_lock_timeout_s,
        now=now,
        on_action=lambda action: metrics.lock_actions.labels(action=action.value).inc(),
        on_miss=lambda: metrics.cache_miss("node"),
        holders=lambda node, rule: watcher.cache.holders_of(node, locking.get(rule.key, ())),
    )
    overdue = OverdueLocks(
        events, timeout=locker.timeout, leading=lambda: leadership.is_leader, now=now
    )
    binder = BindService(
        client=client,
        cache=watcher.cache,
        planner=planner,
        locker=locker,
        owners=owners,
        events=events,
        metrics=metrics,
        pending=pending,
        waits=waits,
        overdue=overdue,
        pods=watcher.pods.store.get,
        mode=settings.filter_mode,
        leadership=leadership,
        lock_wait_s=settings.node_lock_wait_s,
        group_wait_s=settings.node_lock_retry_timeout_s,
        now=now,
    )
    upkeep = Upkeep(
        client=client,
        overdue=overdue,
        locks=waits.locks,
        owners=owners,
        pending=pending,
        interval_s=settings.handshake_interval_s,
        vendor_locks=waits.vendor_locks,
        known=locker.as_known,
    )
    metrics.track_binds(
        waiting=waits.waiting, overdue=lambda: len(overdue), pending=lambda: len(pending)
    )
    preempts = PreemptService(
        cache=watcher.cache,
        planner=planner,
        metrics=metrics,
        leadership=leadership,
        watches=watcher,
        chosen=chosen,
    )
    return _Deciders(filters, binder, upkeep, preempts, planner)


def _server_tls(settings: Settings) -> ReloadingServerTLS | None:
    if not (settings.cert_file and settings.key_file):
        return None
    return ReloadingServerTLS(
        settings.cert_file, settings.key_file, poll_interval=settings.tls_reload_interval_s
    )


async def _after_sync(watcher: CacheWatcher, handshakes: HandshakeLoop, *, freeze_gc: bool) -> None:
    await watcher.wait_synced()
    cache = watcher.cache
    cache.warm()
    if freeze_gc:
        gc.collect()
        gc.freeze()
    log.info(
        "caches_synced",
        nodes=cache.node_count,
        registered_nodes=len(cache.nodes),
        pods=cache.pod_count,
        resourcequotas=len(cache.quotas),
        gc_frozen=gc.get_freeze_count() if freeze_gc else 0,
    )
    handshakes.wake()


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningScheduler], None] | None = None,
    freeze_gc: bool = True,
    reflector_config: ReflectorConfig | None = None,
    now: Callable[[], datetime] = utc_now,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given).

    ``freeze_gc=False`` skips ``gc.freeze()`` (for running several instances in one process).
    ``now`` is the clock of handshakes and node locks (tests run it on the loop's virtual time).
    Raises :class:`~hami_runtime.lifecycle.ServiceFailedError` after a clean shutdown when a
    background loop failed.
    """
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop, component="scheduler")
    metrics = SchedulerMetrics()
    tls = _server_tls(settings)
    if tls is not None:
        metrics.track_tls_reloads(lambda: tls.reloads)
    grace = settings.shutdown_grace_s
    async with Lifecycle("scheduler", grace_s=grace) as life:

        def bound(step: str) -> float:
            return EXIT_SHARES[step] * grace

        client = await life.enter(
            "api-client", open_client(settings.kube), within=bound("api-client")
        )
        identity = settings.leader.identity
        recorder = EventRecorder(client, component=settings.component, host=identity)
        writer = await life.tasks("event-writer", within=bound("event-writer"))
        writer.spawn("events", recorder.run())
        life.on_exit("event-flush", recorder.flush, within=bound("event-flush"))
        events = SchedulerEvents(recorder)

        cache = _cache(settings, events, now)
        waits = LockWaits()
        # The owners read the pod watch's store, which the watcher creates; they are told of
        # its events too, so they exist first and look the store up late.
        owners = LockOwners(
            client,
            pods=lambda key: watcher.pods.store.get(key),  # noqa: PLW0108 - not created yet
            on_miss=lambda: metrics.cache_miss("lock_owner"),
            clock=lambda: now().timestamp(),
        )
        pending = PendingBinds(cache)
        # Told of victims and nominations by the watches; records only while leading.
        chosen = PreemptionEvents(
            events,
            leading=lambda: leadership.is_leader,
        )
        gpumap = gpumap_parts(settings, client, reflector_config)
        map_listeners = () if gpumap is None else (gpumap.verdicts,)
        watcher = CacheWatcher(
            client,
            cache,
            config=reflector_config,
            listeners=(waits, owners, pending, chosen, *map_listeners),
            nominee_listeners=(chosen.nominee_event,),
        )
        metrics.track_cache(cache, watcher.ready)
        watches = await life.tasks("watches", within=bound("watches"))
        for reflector in watcher.reflectors:
            watches.spawn(f"reflector-{reflector.name}", reflector.run())
        if gpumap is not None:
            watches.spawn(f"reflector-{gpumap.watch.name}", gpumap.watch.run())

        labeller = RoleLabeller(
            client, pod_name=settings.pod_name, pod_namespace=settings.pod_namespace
        )
        handshake_due = asyncio.Event()
        leadership = _leadership(
            client,
            settings,
            _RoleChange(metrics=metrics, labeller=labeller, handshake_due=handshake_due),
        )
        leading = await life.tasks("leadership", within=bound("leadership"))
        # On its first cancel a campaigning leader releases its Lease; the step's bound cuts
        # that short (a second cancel) when the API server does not answer.
        leading.spawn("leadership", leadership.run())

        deciders = _deciders(
            client,
            settings,
            watcher=watcher,
            owners=owners,
            waits=waits,
            pending=pending,
            events=events,
            metrics=metrics,
            leadership=leadership,
            chosen=chosen,
            now=now,
            verdicts=None if gpumap is None else gpumap.verdicts,
        )
        filters, binder = deciders.filters, deciders.binder
        state = ExtenderState(
            filters=filters,
            binder=binder,
            metrics=metrics,
            ready=watcher.ready,
            preempts=deciders.preempts,
        )
        metrics_port = await life.enter(
            "metrics-site",
            site(
                metrics_app(metrics.registry, ready=watcher.ready),
                settings.metrics_bind_address,
                within=bound("metrics-site"),
            ),
            within=bound("metrics-site"),
        )
        port = await life.enter(
            "extender-site",
            site(
                build_app(state, max_body_bytes=settings.max_body_bytes),
                settings.http_bind,
                within=bound("extender-site"),
                ssl_context=tls.context if tls else None,
            ),
            within=bound("extender-site"),
        )
        gpumap_port: int | None = None
        if gpumap is not None:
            usage = gpumap.collector(cache, settings, now=now)
            if usage is not None:
                # Entered before the site, so it closes after the last request is answered.
                await life.enter("gpumap-monitors", usage, within=bound("gpumap-monitors"))
            map_app = gpumap.app(cache, deciders.planner, leadership, metrics, settings, now=now)
            gpumap_port = await life.enter(
                "gpumap-site",
                site(
                    map_app,
                    settings.gpumap_bind_address,
                    within=bound("gpumap-site"),
                    max_line_size=MAX_LINE,
                ),
                within=bound("gpumap-site"),
            )

        handshakes = HandshakeLoop(
            cache,
            client=client,
            leadership=leadership,
            due=handshake_due,
            interval_s=settings.handshake_interval_s,
            on_api_error=metrics.api_error,
            now=now,
        )
        loops = await life.tasks("loops", within=bound("loops"))
        loops.spawn("handshakes", handshakes.run())
        loops.spawn("upkeep", deciders.upkeep.run())
        loops.spawn("after-sync", _after_sync(watcher, handshakes, freeze_gc=freeze_gc))
        if tls is not None:
            loops.spawn("tls-reload", tls.watch())
        if settings.leader.enabled and labeller.enabled:
            loops.spawn("role-label", labeller.label(leadership.is_leader))

        log.info(
            "scheduler_started",
            bind=settings.http_bind,
            port=port,
            tls=tls is not None,
            metrics_port=metrics_port,
            gpumap_port=gpumap_port,
            filter_mode=settings.filter_mode,
            leader_elect=settings.leader.enabled,
            leader_mode=settings.leader.mode if settings.leader.enabled else None,
            identity=settings.leader.identity,
            vendors=[vendor.common_word for vendor in settings.vendors],
            shutdown_grace_s=grace,
        )
        if on_started is not None:
            on_started(
                RunningScheduler(
                    port=port,
                    metrics_port=metrics_port,
                    tls=tls,
                    cache=cache,
                    watcher=watcher,
                    leadership=leadership,
                    handshakes=handshakes,
                    filters=filters,
                    binder=binder,
                    metrics=metrics,
                    upkeep=deciders.upkeep,
                    gpumap=None if gpumap is None else gpumap.running(gpumap_port),
                )
            )
        await life.run_until(stop)
        log.info("scheduler_stopping")
    log.info("scheduler_stopped")


@contextlib.asynccontextmanager
async def serving(
    settings: Settings,
    *,
    reflector_config: ReflectorConfig | None = None,
    now: Callable[[], datetime] = utc_now,
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
            now=now,
        )

    grace_s = settings.shutdown_grace_s
    async with embedded(start, name="hami-scheduler", grace_s=grace_s) as running:
        yield running
