"""Namespace device quotas from ResourceQuota objects: limits per namespace and vendor.

A ResourceQuota limits a vendor through ``spec.hard["limits.<memory resource>"]`` and
``spec.hard["limits.<core resource>"]`` (:func:`~hami_scheduler.core.limits_from_hard` reads
them: whole numbers only, memory scaled by the vendor's unit and memory factor).  Several
objects in one namespace all apply; the smallest limit of each resource wins.  What a namespace
*uses* is the :class:`~hami_scheduler.core.QuotaLedger` the pod cache keeps; this module only
holds the limits and recomputes a namespace's merged limits when one of its objects changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_kube.objects import ObjectView
from hami_protocol.vendor.table import Vendor
from hami_scheduler.core import QuotaLimits, limits_from_hard

__all__ = ["QuotaLimitCache", "QuotaObject"]


@dataclass(frozen=True, slots=True)
class QuotaObject:
    """The device limits one ResourceQuota sets, by vendor word (limited vendors only)."""

    namespace: str
    name: str
    limits: Mapping[str, QuotaLimits]


class QuotaLimitCache:
    """ResourceQuota key → :class:`QuotaObject`, and namespace → vendor → merged limits.

    Limits only: what a namespace uses is the pod cache's ledger (the webhook's own quota cache,
    which also counts usage, is a different thing)."""

    def __init__(self, vendors: Sequence[Vendor]) -> None:
        self._vendors = tuple(vendors)
        self._objects: dict[str, QuotaObject] = {}
        self._merged: dict[str, dict[str, QuotaLimits]] = {}

    def __len__(self) -> int:
        return len(self._objects)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        quota = ObjectView(obj)
        namespace, name = quota.namespace, quota.name
        if not namespace or not name:
            return
        hard = quota.spec.get("hard")
        if not isinstance(hard, Mapping):
            hard = {}
        limits = {}
        for vendor in self._vendors:
            found = limits_from_hard(hard, vendor)
            if found.limited:
                limits[vendor.common_word] = found
        key = quota.key
        before = self._objects.get(key)
        if not limits:
            if before is not None:
                del self._objects[key]
                self._merge(namespace)
            return
        self._objects[key] = QuotaObject(namespace, name, limits)
        self._merge(namespace)

    def remove(self, obj: Mapping[str, Any]) -> None:
        quota = ObjectView(obj)
        if self._objects.pop(quota.key, None) is not None:
            self._merge(quota.namespace)

    def _merge(self, namespace: str) -> None:
        merged: dict[str, QuotaLimits] = {}
        for item in self._objects.values():
            if item.namespace != namespace:
                continue
            for word, limits in item.limits.items():
                merged[word] = merged.get(word, QuotaLimits()).merged(limits)
        if merged:
            self._merged[namespace] = merged
        else:
            self._merged.pop(namespace, None)

    def limits(self, namespace: str, word: str) -> QuotaLimits | None:
        """The namespace's merged limits on vendor ``word``; ``None`` when unlimited."""
        found = self._merged.get(namespace)
        return None if found is None else found.get(word)

    def namespaces(self) -> Iterator[tuple[str, Mapping[str, QuotaLimits]]]:
        """``(namespace, vendor word → merged limits)`` for every limited namespace."""
        return iter(list(self._merged.items()))
