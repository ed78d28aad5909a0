"""Feeds the :class:`~hami_webhook.quota.cache.QuotaCache` from two watches on the API server.

* every ResourceQuota in the cluster (only ``limits.<device resource>`` keys are kept);
* every bound pod (``fieldSelector=spec.nodeName!=``), of which only those carrying some
  vendor's allocation (``hami.io/<vendor>-devices-allocated``, :func:`carries_allocation`) are
  kept — what the quota cache counts.  The scheduler's decision reaches a pod with its Binding,
  so a pod counts from the moment it is bound; pods placed by HAMi releases before 2.5 (the
  annotation, no ``hami.io/vgpu-node`` label) count too, and the webhook never holds the
  cluster's other pods in memory.

The reflectors re-list on expiry and back off on errors; the request path only reads the cache.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from hami_kube.objects import PodView
from hami_kube.reflector import Reflector, ReflectorConfig, ReflectorGroup, upserting
from hami_kube.resources import PODS, RESOURCE_QUOTAS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol.keys import HAMI_PREFIX
from hami_webhook.quota.cache import QuotaCache

__all__ = ["BOUND_PODS", "QuotaWatcher", "carries_allocation"]

BOUND_PODS: Final = "spec.nodeName!="
"""The pod watch's field selector: every pod bound to a node."""
_ALLOCATED_SUFFIX: Final = "-devices-allocated"


def carries_allocation(obj: JsonObject) -> bool:
    """Whether the pod carries a ``hami.io/<vendor>-devices-allocated`` annotation (every
    vendor's allocated list has that form)."""
    return any(
        key.startswith(HAMI_PREFIX) and key.endswith(_ALLOCATED_SUFFIX)
        for key in PodView(obj).annotations
    )


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
            config=dataclasses.replace(
                base, label_selector=None, field_selector=BOUND_PODS, keep=carries_allocation
            ),
            handlers=[upserting(cache.set_pod, cache.remove_pod)],
            name="webhook-pods",
        )
        super().__init__(self.quotas, self.pods)
