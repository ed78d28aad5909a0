"""What answers the extender's ``/filter``, ``/prioritize``, ``/bind`` and ``/preempt``, and what
looks after them: the planner shared by filter, bind and preempt (and the holds of nominated
preemptors), the node locker with its overdue-lock tracking, and the upkeep loop.

Built in one place because they share the planner, the lock owners and the pending binds; the
lifecycle (:mod:`.lifecycle`) only starts what this returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from hami_kube.rest import KubeClient
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.bind.service import BindService
from hami_scheduler.bind.upkeep import OverdueLocks, Upkeep
from hami_scheduler.cache.watch import CacheWatcher
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.gpumap.verdicts import Verdicts
from hami_scheduler.leader import Leadership
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.nodelock.locker import NodeLocker
from hami_scheduler.nodelock.owners import LockOwners
from hami_scheduler.nodelock.waits import LockWaits
from hami_scheduler.preempt import PreemptService
from hami_scheduler.preempt_events import PreemptionEvents
from hami_scheduler.selection.plan import Planner
from hami_scheduler.selection.select import hold_planner
from hami_scheduler.settings import Settings

__all__ = ["Deciders", "build_deciders"]


@dataclass(frozen=True, slots=True)
class Deciders:
    filters: FilterService
    binder: BindService
    upkeep: Upkeep
    preempts: PreemptService
    planner: Planner


def build_deciders(
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
) -> Deciders:
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
    return Deciders(filters, binder, upkeep, preempts, planner)
