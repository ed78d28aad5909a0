"""Feeds the :class:`~hami_scheduler.cache.view.SchedulerCache` from five watches.

* every Node (the ``--node-label-selector`` is applied by the cache, so a node that loses its
  label leaves the cache on its next event);
* every bound pod (``fieldSelector=spec.nodeName!=``, as kube-scheduler watches them), of which
  only those carrying an allocation annotation are kept
  (:func:`~hami_scheduler.cache.pods.carries_allocation`: some vendor's ``-devices-allocated``
  or ``-devices-to-allocate``, the RDMA lists, Koordinator's ``device-allocated``) — so pods
  placed by HAMi releases before 2.5 (annotations, no ``hami.io/vgpu-node`` label) are counted,
  and so is a pod whose decision arrives with its Binding, while memory holds only placed pods.
  Unbound pods never reach this process: a decision is counted from the filter's assumption
  until its Binding shows up here.  After each (re)list of this watch, a decision whose Binding
  had succeeded before the list began and whose pod the list lacks is forgotten
  (:meth:`~hami_scheduler.cache.view.SchedulerCache.forget_unlisted`, logged as
  ``assumption_forgotten``): the pod was bound and deleted while the watch was down, and
  neither the list nor the watch after it will ever show it;
* every ResourceQuota;
* every pod with a nomination (``fieldSelector=status.nominatedNodeName!=``), of which only the
  pending ones are kept (:func:`~hami_scheduler.cache.nominated.nominated`: unbound, not being
  deleted) — the preemptors the cache holds freed devices for; kept whole, they are few;
* every ``policy/v1`` PodDisruptionBudget (the preempt verb ranks victims by them).

``listeners`` (the bind's :class:`~hami_scheduler.nodelock.waits.LockWaits` and
:class:`~hami_scheduler.nodelock.owners.LockOwners`) hear of every node event and every event of a
kept pod, after the cache has applied it; ``nominee_listeners`` of every event of a nominated
pod (deleted or no longer pending: ``deleted=True``).

Objects are stripped to the fields the cache reads before the reflector keeps them
(:func:`~hami_scheduler.cache.pods.slim_pod`, :func:`~hami_scheduler.cache.nodes.slim_node`), the
equivalent of client-go's informer transform: at 100,000 pods that is the difference between
megabytes and gigabytes.  The reflectors re-list on expiry and back off on errors; handlers run
in stream order on the event loop, so the cache needs no locking.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Final, Protocol

import structlog

from hami_kube.objects import ObjectView
from hami_kube.reflector import (
    EventHandlers,
    Reflector,
    ReflectorConfig,
    ReflectorGroup,
    upserting,
)
from hami_kube.resources import NODES, PODS, RESOURCE_QUOTAS, JsonObject, Resource
from hami_kube.rest import KubeClient
from hami_protocol.pod.allocation import allocation_keys
from hami_scheduler.cache.holdings import BoundDecision
from hami_scheduler.cache.nodes import slim_node
from hami_scheduler.cache.nominated import nominated
from hami_scheduler.cache.pods import carries_allocation, slim_pod
from hami_scheduler.cache.view import SchedulerCache

__all__ = ["BOUND_PODS", "NOMINATED_PODS", "PDBS", "CacheListener", "CacheWatcher"]

BOUND_PODS: Final = "spec.nodeName!="
"""The pod watch's field selector: every pod bound to a node."""
NOMINATED_PODS: Final = "status.nominatedNodeName!="
"""The nominated-pods watch's field selector: every pod with a nomination."""
PDBS: Final = Resource("poddisruptionbudgets", "PodDisruptionBudget", group="policy")

log = structlog.get_logger("hami_scheduler")

NomineeListener = Callable[[JsonObject, bool], None]
"""``(pod, deleted)`` — told of every event of the nominated-pods watch."""


class CacheListener(Protocol):
    """Told of watch events once the cache has applied them (objects already slimmed)."""

    def node_event(self, obj: JsonObject, *, deleted: bool) -> None: ...

    def pod_event(self, obj: JsonObject, *, deleted: bool) -> None: ...


class CacheWatcher(ReflectorGroup):
    """Three named reflectors keeping ``cache`` equal to the cluster."""

    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        *,
        config: ReflectorConfig | None = None,
        listeners: Sequence[CacheListener] = (),
        nominee_listeners: Sequence[NomineeListener] = (),
    ) -> None:
        base = config or ReflectorConfig()
        vendors = cache.vendors
        self.cache = cache
        allocation = allocation_keys(vendors)

        def upsert_node(obj: JsonObject) -> None:
            slim_node(obj, vendors)
            cache.upsert_node(obj)
            for listener in listeners:
                listener.node_event(obj, deleted=False)

        def remove_node(obj: JsonObject) -> None:
            cache.remove_node(obj)
            for listener in listeners:
                listener.node_event(obj, deleted=True)

        def upsert_pod(obj: JsonObject) -> None:
            slim_pod(obj, vendors)
            cache.upsert_pod(obj)
            for listener in listeners:
                listener.pod_event(obj, deleted=False)

        def remove_pod(obj: JsonObject) -> None:
            cache.remove_pod(obj)
            for listener in listeners:
                listener.pod_event(obj, deleted=True)

        def placed(obj: JsonObject) -> bool:
            return carries_allocation(obj, allocation)

        def upsert_nominee(obj: JsonObject) -> None:
            cache.upsert_nominated(obj)
            for listener in nominee_listeners:
                listener(obj, False)

        def remove_nominee(obj: JsonObject) -> None:
            cache.remove_nominated(obj)
            for listener in nominee_listeners:
                listener(obj, True)

        def pending(obj: JsonObject) -> bool:
            return nominated(obj) is not None

        # What was bound and unconfirmed as the pod list began (see forget_unlisted).
        bound_before: dict[str, BoundDecision] = {}

        def pods_listing() -> None:
            bound_before.clear()
            bound_before.update(cache.bound_unconfirmed())

        def pods_listed(objects: Sequence[JsonObject]) -> None:
            listed = {ObjectView(obj).uid for obj in objects}
            for uid, pod in cache.forget_unlisted(bound_before, listed):
                log.info(
                    "assumption_forgotten",
                    pod=pod,
                    uid=uid,
                    reason="bound before the pod list, absent from it: deleted while the "
                    "pod watch was down",
                )
            bound_before.clear()

        def watch(
            resource: Resource,
            name: str,
            upsert: Callable[[JsonObject], None],
            remove: Callable[[JsonObject], None],
            config: ReflectorConfig = base,
            *,
            lists: EventHandlers | None = None,
        ) -> Reflector:
            handlers = [upserting(upsert, remove), *([lists] if lists else [])]
            return Reflector(client, resource, config=config, handlers=handlers, name=name)

        def pods(selector: str, keep: Callable[[JsonObject], bool]) -> ReflectorConfig:
            return dataclasses.replace(
                base, label_selector=None, field_selector=selector, keep=keep
            )

        unlabelled = dataclasses.replace(base, label_selector=None)
        self.nodes = watch(NODES, "scheduler-nodes", upsert_node, remove_node)
        self.pods = watch(
            PODS,
            "scheduler-pods",
            upsert_pod,
            remove_pod,
            pods(BOUND_PODS, placed),
            lists=EventHandlers(before_list=pods_listing, after_list=pods_listed),
        )
        self.quotas = watch(
            RESOURCE_QUOTAS, "scheduler-resourcequotas", cache.upsert_quota, cache.remove_quota
        )
        self.nominated = watch(
            PODS,
            "scheduler-nominated-pods",
            upsert_nominee,
            remove_nominee,
            pods(NOMINATED_PODS, pending),
        )
        self.budgets = watch(
            PDBS,
            "scheduler-poddisruptionbudgets",
            cache.upsert_budget,
            cache.remove_budget,
            unlabelled,
        )
        super().__init__(self.nodes, self.pods, self.quotas, self.nominated, self.budgets)

    def ready(self) -> bool:
        """``/readyz``: every watch has completed its first list."""
        return self.synced
