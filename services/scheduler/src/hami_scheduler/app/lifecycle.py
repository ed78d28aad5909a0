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
from collections.abc import Callable
from datetime import datetime
from typing import Final

import structlog

from hami_kube.events import EventRecorder
from hami_kube.reflector import ReflectorConfig
from hami_kube.rest import open_client
from hami_kube.timefmt import utc_now
from hami_runtime.lifecycle import Lifecycle
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, site
from hami_scheduler.app.deciders import build_deciders
from hami_scheduler.app.parts import (
    RoleChange,
    RunningScheduler,
    after_sync,
    choose_leadership,
    scheduler_cache,
    server_tls,
)
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.cache.watch import CacheWatcher
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.gpumap.parts import gpumap_parts
from hami_scheduler.gpumap.server import MAX_LINE
from hami_scheduler.handshake import HandshakeLoop
from hami_scheduler.http import ExtenderState, build_app
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.nodelock.owners import LockOwners
from hami_scheduler.nodelock.waits import LockWaits
from hami_scheduler.pod_writes import RoleLabeller
from hami_scheduler.preempt_events import PreemptionEvents
from hami_scheduler.settings import Settings

__all__ = ["EXIT_SHARES", "run"]

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
    tls = server_tls(settings)
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

        cache = scheduler_cache(settings, events, now)
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
            if gpumap.dra is not None:
                # Not part of readiness: the map goes on without DRA cards until it lists.
                watches.spawn("gpumap-dra", gpumap.dra.run())

        labeller = RoleLabeller(
            client, pod_name=settings.pod_name, pod_namespace=settings.pod_namespace
        )
        handshake_due = asyncio.Event()
        leadership = choose_leadership(
            client,
            settings,
            RoleChange(metrics=metrics, labeller=labeller, handshake_due=handshake_due),
        )
        leading = await life.tasks("leadership", within=bound("leadership"))
        # On its first cancel a campaigning leader releases its Lease; the step's bound cuts
        # that short (a second cancel) when the API server does not answer.
        leading.spawn("leadership", leadership.run())

        deciders = build_deciders(
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
        loops.spawn("after-sync", after_sync(watcher, handshakes, freeze_gc=freeze_gc))
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
