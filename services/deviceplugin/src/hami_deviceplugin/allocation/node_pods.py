"""The pods bound to this node, as Allocate reads them: a node-scoped watch
(``fieldSelector=spec.nodeName=<node>``) plus what this process wrote or read since.

Allocate and GetPreferredAllocation read pods from here, not from the API server.  Reads cost
only on a miss: :meth:`NodePods.fetch` (one GET: a pod the kubelet's pod-resources listing names
before the watch delivered it) and :meth:`NodePods.relist` (one LIST: the identity rule without
pod-resources must see every pod bound here, and a watch may lag behind the kubelet's).  Both are
counted in :attr:`NodePods.reads`.

A pod this process patched (or read) is served in that newer version until the watch catches up:
the remembered copy is used while the watch still shows the version it replaced (or nothing),
and forgotten as soon as the watch shows anything else, or after :data:`REMEMBER_S`.  So the
second container's Allocate sees the first one's commit even when the watch lags, and a stale
copy never outlives the watch's next word on that pod.  Commits carry the resourceVersion they
were decided on, so whatever is read here is checked by the API server before it counts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from hami_kube.errors import NotFoundError
from hami_kube.objects import ObjectView, PodView, object_key
from hami_kube.reflector import Reflector, ReflectorConfig
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient

__all__ = ["REMEMBER_S", "NodePods"]

REMEMBER_S: Final = 60.0
"""How long a pod this process wrote or read is preferred to an unchanged watch copy."""


@dataclass(frozen=True, slots=True)
class _Remembered:
    pod: JsonObject
    replaces: str | None
    """The watch's resourceVersion of the pod when it was remembered (None: not in the watch)."""
    at: float


class NodePods:
    def __init__(self, client: KubeClient, node_name: str, *, watch_timeout_s: int = 300) -> None:
        self._client = client
        self._node = node_name
        self._selector = f"spec.nodeName={node_name}"
        self.reflector = Reflector(
            client,
            PODS,
            config=ReflectorConfig(field_selector=self._selector, watch_timeout_s=watch_timeout_s),
            name=f"pods-{node_name}",
        )
        self._remembered: dict[str, _Remembered] = {}
        self.reads = 0
        """GETs and LISTs made on a miss."""

    def _watched_version(self, key: str) -> str | None:
        pod = self.reflector.store.get(key)
        return None if pod is None else ObjectView(pod).resource_version

    def _current(self, key: str, now: float) -> JsonObject | None:
        watched = self.reflector.store.get(key)
        remembered = self._remembered.get(key)
        if remembered is None:
            return watched
        version = None if watched is None else ObjectView(watched).resource_version
        if version == remembered.replaces and now - remembered.at < REMEMBER_S:
            return remembered.pod
        del self._remembered[key]
        return watched

    def snapshot(self) -> dict[str, JsonObject]:
        """Every pod known to be bound here, by ``namespace/name``."""
        now = asyncio.get_running_loop().time()
        keys = {*self.reflector.store.keys(), *self._remembered}
        pods = {key: self._current(key, now) for key in keys}
        return {key: pod for key, pod in pods.items() if pod is not None}

    def remember(self, pod: JsonObject) -> None:
        """A version of a pod newer than the watch's, from a write or a read of ours."""
        key = object_key(pod)
        now = asyncio.get_running_loop().time()
        self._remembered[key] = _Remembered(pod, self._watched_version(key), now)

    async def fetch(self, key: str) -> JsonObject | None:
        """One GET of ``namespace/name``; None when the pod no longer exists."""
        namespace, _, name = key.partition("/")
        self.reads += 1
        try:
            pod = await self._client.get(PODS, name, namespace=namespace)
        except NotFoundError:
            return None
        if PodView(pod).node_name != self._node:
            return None
        self.remember(pod)
        return pod

    async def relist(self) -> dict[str, JsonObject]:
        """One LIST of the pods bound here, as the API server has them now."""
        self.reads += 1
        listing = await self._client.list(PODS, field_selector=self._selector)
        pods: dict[str, JsonObject] = {}
        for item in listing.get("items") or []:
            if isinstance(item, dict):
                self.remember(item)
                pods[object_key(item)] = item
        return pods
