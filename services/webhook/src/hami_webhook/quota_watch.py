"""Feeds the :class:`~hami_webhook.quota.QuotaCache` from two watches on the API server.

* every ResourceQuota in the cluster (only ``limits.<device resource>`` keys are kept);
* pods carrying the ``hami.io/vgpu-node`` label, which the scheduler sets together with the
  annotation of the same name on every pod it places (HAMi's ``PatchPodAnnotations`` does the
  same), so the webhook never holds the cluster's other pods in memory.

The reflectors re-list on expiry and back off on errors; the request path only reads the cache.
"""

from __future__ import annotations

import dataclasses

from hami_kube.reflector import Reflector, ReflectorConfig, ReflectorGroup, upserting
from hami_kube.resources import PODS, RESOURCE_QUOTAS
from hami_kube.rest import KubeClient
from hami_protocol import keys
from hami_webhook.quota_cache import QuotaCache

__all__ = ["QuotaWatcher"]


class QuotaWatcher(ReflectorGroup):
    """Two named reflectors keeping ``cache`` equal to the cluster's quotas and placed pods."""

    def __init__(
        self,
        client: KubeClient,
        cache: QuotaCache,
        *,
        config: ReflectorConfig | None = None,
    ) -> None:
        base = config or ReflectorConfig()
        self.cache = cache
        self.quotas = Reflector(
            client,
            RESOURCE_QUOTAS,
            config=base,
            handlers=[upserting(cache.set_quota, cache.remove_quota)],
            name="webhook-resourcequotas",
        )
        self.pods = Reflector(
            client,
            PODS,
            config=dataclasses.replace(base, label_selector=keys.VGPU_NODE),
            handlers=[upserting(cache.set_pod, cache.remove_pod)],
            name="webhook-pods",
        )
        super().__init__(self.quotas, self.pods)
