"""Namespace quotas as the webhook sees them: limits from ResourceQuota objects, usage from the
pods the scheduler placed.

**What "used" is here.**  HAMi's webhook reads the scheduler's pod cache in the same process.  This
webhook is its own process, so it rebuilds usage from what the scheduler writes on the pods it
placed: the ``hami.io/<vendor>-devices-allocated`` annotation, decoded with
:mod:`hami_protocol.pod.devices` and collapsed the way the scheduler counts a pod (init containers
peak, app containers add up).  Pods in phase ``Succeeded`` or ``Failed`` hold nothing.  Pods that
were admitted but not yet placed hold nothing either (the same gap HAMi's own check has: two pods
admitted together may each fit on their own; the scheduler's quota check at filter time is the
hard stop).

:class:`QuotaCache` is fed by watch events (``set_quota``/``remove_quota``, ``set_pod``/
``remove_pod``) and answers :class:`~hami_webhook.quota.check.QuotaView` queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from hami_kube.objects import ObjectView, PodView
from hami_protocol.errors import ProtocolError
from hami_protocol.pod.devices import collapse_device_usage, decode_pod_devices_canonical
from hami_protocol.request.quantity import as_integer, json_quantity
from hami_protocol.vendor.table import Vendor
from hami_webhook.quota.check import LIMITS_PREFIX, QuotaLimit

__all__ = ["QuotaCache"]

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _PodUsage:
    namespace: str
    amounts: dict[str, int] = field(default_factory=dict)


def _whole_quantity(raw: object) -> int | None:
    """A ResourceQuota's value as a whole number; None when it is not a quantity."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    try:
        return as_integer(json_quantity(raw))
    except ProtocolError:
        return None


class QuotaCache:
    """Device quota limits and usage per namespace, kept current by watch events."""

    def __init__(self, vendors: Iterable[Vendor]) -> None:
        self._vendors = tuple(vendors)
        self._managed = frozenset(
            name
            for vendor in self._vendors
            for name in (vendor.memory_resource, vendor.cores_resource)
            if name
        )
        # namespace -> quota name -> resource -> limit
        self._objects: dict[str, dict[str, dict[str, int]]] = {}
        # namespace -> resource -> effective limit
        self._limits: dict[str, dict[str, QuotaLimit]] = {}
        self._pods: dict[str, _PodUsage] = {}
        self._used: dict[str, dict[str, int]] = {}

    # -- QuotaView -------------------------------------------------------------------------
    def has_limits(self, namespace: str) -> bool:
        return bool(self._limits.get(namespace))

    def limit(self, namespace: str, resource: str) -> QuotaLimit | None:
        return self._limits.get(namespace, {}).get(resource)

    def used(self, namespace: str, resource: str) -> int:
        return self._used.get(namespace, {}).get(resource, 0)

    # -- sizes, for metrics and readiness logs ---------------------------------------------
    @property
    def quota_count(self) -> int:
        """ResourceQuota objects that limit at least one device resource."""
        return sum(len(objects) for objects in self._objects.values())

    @property
    def pod_count(self) -> int:
        """Pods currently holding device memory or cores."""
        return len(self._pods)

    # -- ResourceQuota events --------------------------------------------------------------
    def set_quota(self, quota: Mapping[str, Any]) -> None:
        """Record (or replace) what one ResourceQuota object limits."""
        view = ObjectView(quota)
        namespace, name = view.namespace, view.name
        limits = self._device_limits(view)
        objects = self._objects.setdefault(namespace, {})
        touched = set(objects.get(name, {})) | set(limits)
        if limits:
            objects[name] = limits
        else:
            objects.pop(name, None)
        self._recompute(namespace, touched)

    def remove_quota(self, quota: Mapping[str, Any]) -> None:
        view = ObjectView(quota)
        namespace, name = view.namespace, view.name
        objects = self._objects.get(namespace, {})
        touched = set(objects.pop(name, {}))
        self._recompute(namespace, touched)

    def _device_limits(self, quota: ObjectView) -> dict[str, int]:
        hard = quota.spec.get("hard")
        if not isinstance(hard, Mapping):
            return {}
        limits: dict[str, int] = {}
        for key, raw in hard.items():
            if not isinstance(key, str) or not key.startswith(LIMITS_PREFIX):
                continue
            resource = key.removeprefix(LIMITS_PREFIX)
            if resource not in self._managed:
                continue
            value = _whole_quantity(raw)
            if value is None:
                log.warning(
                    "quota_limit_ignored",
                    quota=quota.key,
                    key=key,
                    value=str(raw)[:120],
                    reason="not a whole number",
                )
                continue
            limits[resource] = value
        return limits

    def _recompute(self, namespace: str, resources: Iterable[str]) -> None:
        objects = self._objects.get(namespace, {})
        effective = self._limits.setdefault(namespace, {})
        for resource in resources:
            best: QuotaLimit | None = None
            for quota_name in sorted(objects):
                value = objects[quota_name].get(resource)
                if value is not None and (best is None or value < best.limit):
                    best = QuotaLimit(quota=quota_name, resource=resource, limit=value)
            if best is None:
                effective.pop(resource, None)
            else:
                effective[resource] = best
        if not effective:
            self._limits.pop(namespace, None)
        if not objects:
            self._objects.pop(namespace, None)

    # -- Pod events ------------------------------------------------------------------------
    def set_pod(self, pod: Mapping[str, Any]) -> None:
        """Record (or replace) what one pod holds, from its allocation annotations."""
        view = PodView(pod)
        self._release(view.key)
        amounts = self._pod_amounts(view)
        if not amounts:
            return
        self._pods[view.key] = _PodUsage(view.namespace, amounts)
        used = self._used.setdefault(view.namespace, {})
        for resource, amount in amounts.items():
            used[resource] = used.get(resource, 0) + amount

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        self._release(PodView(pod).key)

    def _release(self, key: str) -> None:
        usage = self._pods.pop(key, None)
        if usage is None:
            return
        used = self._used.get(usage.namespace, {})
        for resource, amount in usage.amounts.items():
            remaining = used.get(resource, 0) - amount
            if remaining > 0:
                used[resource] = remaining
            else:
                used.pop(resource, None)
        if not used:
            self._used.pop(usage.namespace, None)

    def _pod_amounts(self, pod: PodView) -> dict[str, int]:
        if pod.terminal:
            return {}
        annotations = pod.annotations
        if not annotations:
            return {}
        init_count = len(pod.init_containers)
        amounts: dict[str, int] = {}
        for vendor in self._vendors:
            key = vendor.devices_allocated_key
            value = annotations.get(key) if key else None
            if not isinstance(value, str) or not value:
                continue
            try:
                devices = decode_pod_devices_canonical(value, key=key or "")
            except ProtocolError as exc:
                log.warning("pod_allocation_undecodable", pod=pod.key, error=str(exc))
                continue
            summaries = collapse_device_usage(devices, init_count=init_count)
            memory = sum(summary.usedmem for summary in summaries)
            cores = sum(summary.usedcores for summary in summaries)
            for resource, amount in (
                (vendor.memory_resource, memory),
                (vendor.cores_resource, cores),
            ):
                if resource and amount:
                    amounts[resource] = amounts.get(resource, 0) + amount
        return amounts
