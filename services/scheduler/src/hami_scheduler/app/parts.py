"""The pieces :func:`hami_scheduler.app.lifecycle.run` builds that need more than a constructor
call: the cache with what it logs and records, the leadership ``--leader-elect-mode`` asks for
and what a change of role sets off, the reloading server certificate, the after-sync step, and
:class:`RunningScheduler`, what a started service hands to its caller (tests, the demo).

Apart from the lifecycle so that it reads as its sequence of steps.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from hami_kube.rest import KubeClient
from hami_protocol.selectors import parse_selector_string
from hami_runtime.tls import ReloadingServerTLS
from hami_scheduler.bind.service import BindService
from hami_scheduler.bind.upkeep import Upkeep
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.cache.watch import CacheWatcher
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.gpumap.parts import RunningGpuMap
from hami_scheduler.handshake import HandshakeLoop
from hami_scheduler.leader import AlwaysLeader, Leadership, LeaseCampaign, LeaseFollower
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.pod_writes import RoleLabeller
from hami_scheduler.settings import Settings

__all__ = [
    "RoleChange",
    "RunningScheduler",
    "after_sync",
    "choose_leadership",
    "scheduler_cache",
    "server_tls",
]

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


class RoleChange:
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


def choose_leadership(client: KubeClient, settings: Settings, on_change: RoleChange) -> Leadership:
    election = settings.leader
    if not election.enabled:
        return AlwaysLeader(election.identity, on_change=on_change)
    if election.mode == "campaign":
        return LeaseCampaign(client, election, on_change=on_change)
    return LeaseFollower(client, election, on_change=on_change)


def scheduler_cache(
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


def server_tls(settings: Settings) -> ReloadingServerTLS | None:
    if not (settings.cert_file and settings.key_file):
        return None
    return ReloadingServerTLS(
        settings.cert_file, settings.key_file, poll_interval=settings.tls_reload_interval_s
    )


async def after_sync(watcher: CacheWatcher, handshakes: HandshakeLoop, *, freeze_gc: bool) -> None:
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
