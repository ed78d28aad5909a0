"""core/v1 Events about pods, written the way kube-scheduler's recorder leaves them.

A repeat of the same reason and message for the same pod bumps ``count`` and ``lastTimestamp`` of
the existing Event instead of creating another one (client-go's event correlator does the same),
so a pod retried every few seconds does not flood the namespace.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog

from hami_kubesim.scheduling_kubeapi import ApiError, KubeApi

__all__ = ["EventRecorder", "rfc3339_now"]

log = structlog.get_logger(__name__)

_REMEMBERED = 4096


def rfc3339_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Creates (or bumps) Events whose ``involvedObject`` is a pod."""

    def __init__(self, api: KubeApi, *, component: str, instance: str) -> None:
        self._api = api
        self._component = component
        self._instance = instance
        self._recent: OrderedDict[tuple[str, str, str, str], tuple[str, int]] = OrderedDict()

    async def record(
        self,
        pod: Mapping[str, Any],
        *,
        event_type: str,
        reason: str,
        message: str,
        action: str = "Scheduling",
    ) -> None:
        """Write the Event; failures are logged, never raised (events are best effort)."""
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name") or "")
        uid = str(metadata.get("uid") or "")
        signature = (namespace, uid or name, reason, message)
        try:
            previous = self._recent.get(signature)
            if previous is not None and await self._bump(namespace, *previous):
                self._recent[signature] = (previous[0], previous[1] + 1)
                self._recent.move_to_end(signature)
                return
            event_name = f"{name}.{time.time_ns():x}"
            await self._api.post(
                f"/api/v1/namespaces/{namespace}/events",
                self._event(
                    pod=pod,
                    event_name=event_name,
                    event_type=event_type,
                    reason=reason,
                    message=message,
                    action=action,
                ),
            )
            self._recent[signature] = (event_name, 1)
            if len(self._recent) > _REMEMBERED:
                self._recent.popitem(last=False)
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning(
                "could not record event", pod=f"{namespace}/{name}", reason=reason, error=str(exc)
            )

    async def _bump(self, namespace: str, event_name: str, count: int) -> bool:
        try:
            await self._api.patch(
                f"/api/v1/namespaces/{namespace}/events/{event_name}",
                {"count": count + 1, "lastTimestamp": rfc3339_now()},
                content_type="application/merge-patch+json",
            )
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _event(
        self,
        *,
        pod: Mapping[str, Any],
        event_name: str,
        event_type: str,
        reason: str,
        message: str,
        action: str,
    ) -> dict[str, Any]:
        metadata = pod.get("metadata") or {}
        now = rfc3339_now()
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": metadata.get("namespace") or "default"},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": metadata.get("namespace") or "default",
                "name": metadata.get("name") or "",
                "uid": metadata.get("uid") or "",
                "resourceVersion": metadata.get("resourceVersion") or "",
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "action": action,
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
