"""Namespace quotas on device memory and cores: the pure admission check.

HAMi lets an operator cap what one namespace may hold with an ordinary ResourceQuota whose
``spec.hard`` names ``limits.<memory resource>`` / ``limits.<core resource>`` of a device vendor
(``limits.nvidia.com/gpumem: 4000``, ``limits.nvidia.com/gpucores: 200``).  The rules, as HAMi's
quota manager applies them:

* only whole-number limits count; a key of another resource is ignored;
* several ResourceQuota objects in one namespace all apply, so the effective limit of a resource
  is the smallest one set; a resource no object names is unlimited;
* an explicit ``0`` is a limit like any other and blocks every request;
* the memory limit is counted in MiB like requests and usage are: multiplied by the vendor's
  memory unit (Cambricon and Iluvatar 256, Moore Threads 512, MetaX sGPU 1024) and by its
  ``memoryFactor`` when above 1 (:attr:`~hami_protocol.vendor.table.Vendor.memory_scale`);
* a pod fits when ``used + requested <= limit`` for memory and for cores.

:func:`check_quota` is the decision over a :class:`QuotaView`; what is used and what the limits
are is kept by :class:`~hami_webhook.quota.cache.QuotaCache`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from hami_protocol.vendor.table import Vendor

__all__ = [
    "LIMITS_PREFIX",
    "QuotaLimit",
    "QuotaView",
    "QuotaViolation",
    "check_quota",
]

LIMITS_PREFIX: Final = "limits."


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """The effective limit of one device resource in one namespace, and which object set it."""

    quota: str
    """Name of the ResourceQuota holding the smallest limit."""
    resource: str
    limit: int


@dataclass(frozen=True, slots=True)
class QuotaViolation:
    """Why a pod does not fit a namespace quota."""

    namespace: str
    quota: str
    resource: str
    limit: int
    """Effective limit, in MiB for memory (after the vendor's unit and memory factor)."""
    used: int
    requested: int

    @property
    def message(self) -> str:
        return (
            f"exceeding resource quota: ResourceQuota {self.namespace}/{self.quota} "
            f"{LIMITS_PREFIX}{self.resource}={self.limit}, used {self.used}, "
            f"requested {self.requested}"
        )


class QuotaView(Protocol):
    """Read access to namespace quotas, as the admission check needs it."""

    def has_limits(self, namespace: str) -> bool:
        """Whether any device resource of ``namespace`` has a limit (fast path)."""
        ...

    def limit(self, namespace: str, resource: str) -> QuotaLimit | None: ...

    def used(self, namespace: str, resource: str) -> int: ...


def check_quota(
    view: QuotaView, *, namespace: str, vendor: Vendor, memory: int, cores: int
) -> QuotaViolation | None:
    """HAMi's ``FitQuota`` for one vendor's share of a pod (memory in MiB, cores in percent)."""
    if vendor.memory_resource:
        found = view.limit(namespace, vendor.memory_resource)
        if found is not None:
            limit = found.limit * vendor.memory_scale
            used = view.used(namespace, vendor.memory_resource)
            if used + memory > limit:
                return QuotaViolation(
                    namespace, found.quota, vendor.memory_resource, limit, used, memory
                )
    if vendor.cores_resource:
        found = view.limit(namespace, vendor.cores_resource)
        if found is not None:
            used = view.used(namespace, vendor.cores_resource)
            if used + cores > found.limit:
                return QuotaViolation(
                    namespace, found.quota, vendor.cores_resource, found.limit, used, cores
                )
    return None
