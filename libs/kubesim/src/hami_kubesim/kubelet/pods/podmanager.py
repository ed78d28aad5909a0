"""The kubelet stand-in's view of its node's pods, and its pod manager.

:class:`PodManager` keeps the latest view of every pod bound to the node (from the stand-in's
pod watch) and, among them, the pods the kubelet's pod manager holds: a pod enters when its
admission starts — before any device-plugin ``Allocate`` — or, already running when first seen,
when it is adopted; it leaves when the pod is deleted. A pod is *active* while it is neither
terminal, being deleted, nor rejected at admission (a rejection counts at once, before its
status is written). It is the :class:`~..podresources.PodResourcesSource` the pod-resources
server reads: devices come from the device manager's ledger, recorded per container as each
``Allocate`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hami_kube.objects import PodView
from hami_kubesim.kubelet.deviceplugins.devicemanager import DeviceManager
from hami_kubesim.kubelet.podresources import ListedPod, listed_pod
from hami_kubesim.kubelet.status import (
    ALLOCATIONS_ANNOTATION,
    PodAllocation,
    parse_allocation_record,
)


class PodManager:
    """Pods of one node, by UID; see the module docstring."""

    def __init__(self, devices: DeviceManager, *, node: str) -> None:
        self._devices = devices
        self._node = node
        self.views: dict[str, PodView] = {}
        """The latest view of every pod bound to the node, by UID."""
        self._members: dict[str, None] = {}
        self._rejected: set[str] = set()

    def enter(self, uid: str) -> None:
        """The pod's admission starts: from now on it is listed."""
        self._members[uid] = None

    def reject(self, uid: str) -> None:
        """The pod was rejected at admission: no longer active."""
        self._rejected.add(uid)

    def adopt(self, pod: PodView) -> PodAllocation | None:
        """A pod that was running before the stand-in saw it enters with the devices its
        allocation record names for this node (the kubelet's checkpoint), returned; ``None``
        when it has no readable record for this node (it then holds nothing)."""
        self.enter(pod.uid)
        value = pod.annotations.get(ALLOCATIONS_ANNOTATION)
        allocation = None if value is None else parse_allocation_record(value, pod=pod)
        if allocation is None or allocation.node not in ("", self._node):
            return None
        self._devices.restore(allocation)
        return allocation

    def forget(self, uid: str) -> PodView | None:
        """The pod is gone from the node; returns its last view."""
        self._members.pop(uid, None)
        self._rejected.discard(uid)
        return self.views.pop(uid, None)

    # ----- what pod-resources answers ----------------------------------------------------

    def active_pods(self) -> Sequence[ListedPod]:
        """``List``: the active pods and the devices their containers hold so far."""
        return [listed_pod(pod, self._devices.pod_devices(pod.uid)) for pod in self.active_views()]

    def active_views(self) -> list[PodView]:
        """The active pods as the pod watch last showed them (the kubelet's ``GetActivePods``)."""
        return [
            pod
            for uid, pod in self._managed()
            if not (pod.terminal or pod.deleting or uid in self._rejected)
        ]

    def known_pod(self, namespace: str, name: str) -> ListedPod | None:
        """``Get``: a pod of the pod manager by namespace and name (terminal ones too)."""
        for uid, pod in self._managed():
            if (pod.namespace or "default", pod.name) == (namespace, name):
                return listed_pod(pod, self._devices.pod_devices(uid))
        return None

    def allocatable_devices(self) -> Mapping[str, Sequence[str]]:
        """``GetAllocatableResources``: the healthy devices of every resource."""
        return {name: sorted(d.healthy) for name, d in self._devices.resources().items()}

    def _managed(self) -> list[tuple[str, PodView]]:
        return [(uid, self.views[uid]) for uid in self._members if uid in self.views]
