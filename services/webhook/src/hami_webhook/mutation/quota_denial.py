"""The pod's devices against its namespace's quotas (rule 8 of
:mod:`hami_webhook.mutation.admit`), pure.

Per vendor, memory = max(Σ app containers memory×count, largest init container) and the same for
cores; :func:`quota_denial` is the denial when that exceeds a namespace quota
(:func:`~hami_webhook.quota.check.check_quota`), else ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_protocol.request.containers import PodDeviceRequests, pod_device_requests
from hami_webhook.mutation.decision import Decision, denied
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.quota.check import QuotaView, check_quota

__all__ = ["pod_effective", "quota_denial"]


def pod_effective(requests: PodDeviceRequests, word: str) -> tuple[int, int]:
    """``(memory, cores)`` the pod holds of one vendor: max(Σ apps, largest init container)."""
    app_mem = app_cores = init_mem = init_cores = 0
    for slot in requests.slots:
        request = slot.requests.get(word)
        if request is None:
            continue
        memory, cores = request.memreq * request.nums, request.coresreq * request.nums
        if slot.is_init:
            init_mem, init_cores = max(init_mem, memory), max(init_cores, cores)
        else:
            app_mem, app_cores = app_mem + memory, app_cores + cores
    return max(app_mem, init_mem), max(app_cores, init_cores)


def quota_denial(
    pod: Mapping[str, Any], namespace: str, rules: MutationRules, quota: QuotaView
) -> Decision | None:
    """The denial naming the first quota the pod's devices exceed, else ``None``."""
    requests = pod_device_requests(pod, vendors=rules.vendors)
    for vendor in rules.vendors:
        if vendor.common_word not in requests.vendors():
            continue
        memory, cores = pod_effective(requests, vendor.common_word)
        if memory == 0 and cores == 0:
            continue
        violation = check_quota(
            quota, namespace=namespace, vendor=vendor, memory=memory, cores=cores
        )
        if violation is not None:
            return denied(
                violation.message,
                namespace=namespace,
                quota=violation.quota,
                resource=violation.resource,
                limit=violation.limit,
                used=violation.used,
                requested=violation.requested,
            )
    return None
