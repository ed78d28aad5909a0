"""The pods whose regions may be on this node: a watch of the pods bound to it
(``fieldSelector=spec.nodeName=<node>``), kept as a UID index from the watch's events, and the
copy of it the worker threads read (:class:`PodIndex`, taken on the event loop).

HAMi's monitor lists pods by the label ``hami.io/vgpu-node=<node>``.  A pod placed by a HAMi
release before v2.5 carries only the annotation: such a monitor sees its regions as an unknown
pod's and removes its directory after the resync interval while the container still runs, so new
processes in it lose their shared cache.  Every pod bound to the node is watched here instead, so
a directory is removed only when no pod of that UID is on the node.

A pod's realised MIG reservations (``hami.io/vgpu-mig-allocations`` entries with runtime ids)
are kept with it (:class:`MigDevice`) for ``hami_mig_device_info``; an annotation that does not
decode gives none.

A pod deleted lately is remembered by UID (the last :data:`ENDED_KEPT`), so the directory it
leaves behind until it is removed is not counted as an unknown pod's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from hami_kube.objects import PodView
from hami_kube.reflector import Reflector, ReflectorConfig, upserting
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import NVIDIA_MIG_ALLOCATIONS
from hami_protocol.pod.mig import decode_mig_reservations

__all__ = ["ENDED_KEPT", "MigDevice", "NodePodIndex", "PodIndex", "PodRef"]

ENDED_KEPT: Final = 4096
"""How many deleted pods' UIDs are remembered."""


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One realised MIG instance of a container."""

    container: str
    device_index: int
    gpu_uuid: str
    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(frozen=True, slots=True)
class PodRef:
    """What a region's series are labelled with, and which container names the pod has."""

    uid: str
    namespace: str
    name: str
    containers: frozenset[str]
    """``spec.containers`` names (init containers are not reported, as in HAMi)."""
    init_containers: frozenset[str] = frozenset()
    """``spec.initContainers`` names: their directories are the pod's, not unknown ones."""
    mig: tuple[MigDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class PodIndex:
    """The pods on this node by UID, and the UIDs of pods deleted lately."""

    pods: Mapping[str, PodRef] = field(default_factory=dict)
    ended: frozenset[str] = frozenset()


def _mig_devices(view: PodView) -> tuple[MigDevice, ...]:
    value = view.annotations.get(NVIDIA_MIG_ALLOCATIONS)
    if not value:
        return ()
    try:
        reservations = decode_mig_reservations(value)
    except ProtocolError:
        return ()
    names = [c.name for c in view.init_containers] + [c.name for c in view.containers]
    return tuple(
        MigDevice(
            container=names[r.container_index],
            device_index=r.device_index,
            gpu_uuid=r.gpu_uuid,
            mig_uuid=r.runtime.mig_uuid,
            profile=r.profile,
            gpu_instance_id=r.runtime.gpu_instance_id,
            compute_instance_id=r.runtime.compute_instance_id,
        )
        for r in reservations
        if r.runtime is not None and r.container_index < len(names)
    )


def pod_ref(pod: JsonObject) -> PodRef:
    view = PodView(pod)
    return PodRef(
        uid=view.uid,
        namespace=view.namespace,
        name=view.name,
        containers=frozenset(c.name for c in view.containers),
        init_containers=frozenset(c.name for c in view.init_containers),
        mig=_mig_devices(view),
    )


class NodePodIndex:
    """The watch; :meth:`snapshot` on the event loop, hand the copy to threads."""

    def __init__(self, client: KubeClient, node_name: str, *, watch_timeout_s: int = 300) -> None:
        self.reflector = Reflector(
            client,
            PODS,
            config=ReflectorConfig(
                field_selector=f"spec.nodeName={node_name}", watch_timeout_s=watch_timeout_s
            ),
            handlers=[upserting(self._upsert, self._deleted)],
            name=f"vgpu-pods-{node_name}",
        )
        self._refs: dict[str, PodRef] = {}
        self._ended: dict[str, None] = {}

    def _upsert(self, pod: JsonObject) -> None:
        ref = pod_ref(pod)
        if ref.uid and self._refs.get(ref.uid) != ref:
            self._refs[ref.uid] = ref

    @property
    def synced(self) -> bool:
        return self.reflector.has_synced

    def _deleted(self, pod: JsonObject) -> None:
        uid = PodView(pod).uid
        if not uid:
            return
        self._refs.pop(uid, None)
        self._ended.pop(uid, None)
        self._ended[uid] = None
        while len(self._ended) > ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    def snapshot(self) -> PodIndex:
        """A copy for the worker threads (cheap: the index is kept from the watch's events)."""
        refs = dict(self._refs)
        return PodIndex(pods=refs, ended=frozenset(self._ended.keys() - refs.keys()))
