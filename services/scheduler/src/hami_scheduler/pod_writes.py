"""Writes onto pods through the API server: this replica's role label.

(A decision is no longer written by the filter: it travels in the Binding,
:mod:`hami_scheduler.bind.service`.)"""

from __future__ import annotations

import asyncio

import structlog

from hami_kube.errors import KubeError
from hami_kube.patch import patch_metadata, with_retries
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient
from hami_protocol.keys import SCHEDULER_ROLE_LABEL

__all__ = ["RoleLabeller"]

log = structlog.get_logger("hami_scheduler")


class RoleLabeller:
    """Labels this replica's own pod ``hami.io/scheduler-role=leader|follower`` (the chart's
    Service selects the leader); does nothing without ``POD_NAME``/``POD_NAMESPACE``.

    Calls may overlap (the start-up label and a quick first transition): writes are serialised
    and each writes the latest wanted role, so the label ends up matching the last call.
    """

    def __init__(self, client: KubeClient, *, pod_name: str, pod_namespace: str) -> None:
        self._client = client
        self._name = pod_name
        self._namespace = pod_namespace
        self._wanted = "follower"
        self._written = ""
        self._lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self._name and self._namespace)

    async def label(self, leading: bool) -> None:
        if not self.enabled:
            return
        self._wanted = "leader" if leading else "follower"
        async with self._lock:
            role = self._wanted
            if role == self._written:
                return
            try:
                await with_retries(
                    lambda: patch_metadata(
                        self._client,
                        PODS,
                        self._name,
                        namespace=self._namespace,
                        labels={SCHEDULER_ROLE_LABEL: role},
                    )
                )
            except KubeError as exc:
                log.warning(
                    "role_label_failed", pod=f"{self._namespace}/{self._name}", error=str(exc)
                )
            else:
                self._written = role
                log.info("role_labelled", pod=f"{self._namespace}/{self._name}", role=role)
