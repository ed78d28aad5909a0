"""Feeds the :class:`~hami_webhook.quota.QuotaCache` from two watches on the API server.

* every ResourceQuota in the cluster (only ``limits.<device resource>`` keys are kept);
* pods carrying the ``hami.io/vgpu-node`` label, which the scheduler sets together with the
  annotation of the same name on every pod it places (HAMi's ``PatchPodAnnotations`` does the
  same), so the webhook never holds the cluster's other pods in memory.

The reflectors re-list on expiry and back off on errors; the request path only reads the cache.
"""

from __future__ import annotations

import asyncio
import dataclasses

from hami_kube.reflector import EventHandlers, Reflector, ReflectorConfig
from hami_kube.resources import PODS, RESOURCE_QUOTAS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol import keys
from hami_webhook.quota import QuotaCache

__all__ = ["QuotaWatcher"]


class QuotaWatcher:
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

        def update_quota(_old: JsonObject, new: JsonObject) -> None:
            cache.set_quota(new)

        def update_pod(_old: JsonObject, new: JsonObject) -> None:
            cache.set_pod(new)

        self.quotas = Reflector(
            client,
            RESOURCE_QUOTAS,
            config=base,
            handlers=[
                EventHandlers(
                    on_add=cache.set_quota, on_update=update_quota, on_delete=cache.remove_quota
                )
            ],
            name="webhook-resourcequotas",
        )
        pod_config = dataclasses.replace(base, label_selector=keys.VGPU_NODE)
        self.pods = Reflector(
            client,
            PODS,
            config=pod_config,
            handlers=[
                EventHandlers(
                    on_add=cache.set_pod, on_update=update_pod, on_delete=cache.remove_pod
                )
            ],
            name="webhook-pods",
        )

    @property
    def synced(self) -> bool:
        return self.quotas.has_synced and self.pods.has_synced

    async def wait_synced(self) -> None:
        await self.quotas.wait_synced()
        await self.pods.wait_synced()

    def start(self, group: asyncio.TaskGroup) -> list[asyncio.Task[None]]:
        """Run both reflectors as named tasks of ``group``; cancel them to stop."""
        return [
            group.create_task(self.quotas.run(), name="reflector-webhook-resourcequotas"),
            group.create_task(self.pods.run(), name="reflector-webhook-pods"),
        ]
