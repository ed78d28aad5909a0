"""Feeds the :class:`~hami_scheduler.cache.view.SchedulerCache` from three watches.

* every Node (the ``--node-label-selector`` is applied by the cache, so a node that loses its
  label leaves the cache on its next event);
* pods carrying the ``hami.io/vgpu-node`` label — the scheduler sets it with the annotation of
  the same name on every pod it places (HAMi's ``PatchPodAnnotations`` does too), so the
  cluster's other pods never reach this process;
* every ResourceQuota.

Objects are stripped to the fields the cache reads before the reflector keeps them
(:func:`~hami_scheduler.cache.pods.slim_pod`, :func:`~hami_scheduler.cache.nodes.slim_node`), the
equivalent of client-go's informer transform: at 100,000 pods that is the difference between
megabytes and gigabytes.  The reflectors re-list on expiry and back off on errors; handlers run
in stream order on the event loop, so the cache needs no locking.
"""

from __future__ import annotations

import dataclasses

from hami_kube.reflector import Reflector, ReflectorConfig, ReflectorGroup, upserting
from hami_kube.resources import NODES, PODS, RESOURCE_QUOTAS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol import keys
from hami_scheduler.cache.nodes import slim_node
from hami_scheduler.cache.pods import slim_pod
from hami_scheduler.cache.view import SchedulerCache

__all__ = ["CacheWatcher"]


class CacheWatcher(ReflectorGroup):
    """Three named reflectors keeping ``cache`` equal to the cluster."""

    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        *,
        config: ReflectorConfig | None = None,
    ) -> None:
        base = config or ReflectorConfig()
        vendors = cache.vendors
        self.cache = cache

        def upsert_node(obj: JsonObject) -> None:
            slim_node(obj, vendors)
            cache.upsert_node(obj)

        def upsert_pod(obj: JsonObject) -> None:
            slim_pod(obj, vendors)
            cache.upsert_pod(obj)

        self.nodes = Reflector(
            client,
            NODES,
            config=base,
            handlers=[upserting(upsert_node, cache.remove_node)],
            name="scheduler-nodes",
        )
        self.pods = Reflector(
            client,
            PODS,
            config=dataclasses.replace(base, label_selector=keys.VGPU_NODE),
            handlers=[upserting(upsert_pod, cache.remove_pod)],
            name="scheduler-pods",
        )
        self.quotas = Reflector(
            client,
            RESOURCE_QUOTAS,
            config=base,
            handlers=[upserting(cache.upsert_quota, cache.remove_quota)],
            name="scheduler-resourcequotas",
        )
        super().__init__(self.nodes, self.pods, self.quotas)

    def ready(self) -> bool:
        """``/readyz``: every watch has completed its first list."""
        return self.synced
