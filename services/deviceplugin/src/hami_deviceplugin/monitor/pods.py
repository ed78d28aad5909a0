"""The pods whose regions may be on this node: a watch of the pods labelled
``hami.io/vgpu-node=<node>`` (the scheduler sets the label at filter, with the annotation), and
the copy of them the worker threads read (:class:`PodIndex`, taken on the event loop).

A pod deleted lately is remembered by UID (the last :data:`ENDED_KEPT`), so the directory it
leaves behind until it is removed is not counted as an unknown pod's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from hami_kube.objects import PodView
from hami_kube.reflector import EventHandlers, Reflector, ReflectorConfig
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol.keys import VGPU_NODE

__all__ = ["ENDED_KEPT", "NodePodIndex", "PodIndex", "PodRef"]

ENDED_KEPT: Final = 4096
"""How many deleted pods' UIDs are remembered."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """What a region's series are labelled with, and which container names the pod has."""

    uid: str
    namespace: str
    name: str
    containers: frozenset[str]
    """``spec.containers`` names (init containers are not reported, as in HAMi)."""


@dataclass(frozen=True, slots=True)
class PodIndex:
    """The pods on this node by UID, and the UIDs of pods deleted lately."""

    pods: Mapping[str, PodRef] = field(default_factory=dict)
    ended: frozenset[str] = frozenset()


def pod_ref(pod: JsonObject) -> PodRef:
    view = PodView(pod)
    return PodRef(
        uid=view.uid,
        namespace=view.namespace,
        name=view.name,
        containers=frozenset(c.name for c in view.containers),
    )


class NodePodIndex:
    """The watch; :meth:`snapshot` on the event loop, hand the copy to threads."""

    def __init__(self, client: KubeClient, node_name: str, *, watch_timeout_s: int = 300) -> None:
        self.reflector = Reflector(
            client,
            PODS,
            config=ReflectorConfig(
                label_selector=f"{VGPU_NODE}={node_name}", watch_timeout_s=watch_timeout_s
            ),
            handlers=[EventHandlers(on_delete=self._deleted)],
            name=f"vgpu-pods-{node_name}",
        )
        self._ended: dict[str, None] = {}

    @property
    def synced(self) -> bool:
        return self.reflector.has_synced

    def _deleted(self, pod: JsonObject) -> None:
        uid = PodView(pod).uid
        if not uid:
            return
        self._ended.pop(uid, None)
        self._ended[uid] = None
        while len(self._ended) > ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    def snapshot(self) -> PodIndex:
        refs = {}
        for pod in self.reflector.store.objects():
            ref = pod_ref(pod)
            if ref.uid:
                refs[ref.uid] = ref
        return PodIndex(pods=refs, ended=frozenset(self._ended.keys() - refs.keys()))
