"""The kubelet's node-status rule for extended resources and its admission check on them, pure.

Node status (``MachineInfo`` setter, ``pkg/kubelet/nodestatus/setters.go``): at every status
sync allocatable is recomputed from capacity; extended resources have no reservation, so an
extended resource someone else patched into capacity (``PATCH nodes/<n>/status``, the
documented way to advertise one) shows up in allocatable with the same value, and an extended
allocatable entry whose capacity entry is gone is deleted.  Device-plugin resources are the
device manager's (allocatable = healthy devices): :func:`allocatable_follows_capacity` leaves
them out.

Admission (predicate admit handler, ``pkg/kubelet/lifecycle/predicate.go``): after the device
manager's ``Allocate``, the pod's requests (as the scheduler adds them up) are checked against
allocatable minus what the other active pods request.  ``removeMissingExtendedResources`` first
drops the extended resources the node's allocatable does not list, so a pod naming a resource
nobody advertises is admitted.  A shortfall rejects the pod with reason ``OutOf<name>`` and
``Node didn't have enough resource: <name>, requested: N, used: N, capacity: N``.  Checked here:
extended resources other than the device-plugin ones (the device manager has already decided
those, and the kubelet raises their allocatable to what it allocated before this check); cpu,
memory and pod count are not checked by the stand-in.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from hami_kube.objects import NodeView, PodView
from hami_kubesim.kubelet.deviceplugins.devices import is_extended_resource_name
from hami_kubesim.scheduler.predicates import node_allocatable, pod_requests

__all__ = ["InsufficientResource", "allocatable_follows_capacity", "insufficient_extended"]


def allocatable_follows_capacity(
    capacity: Mapping[str, object], allocatable: Mapping[str, object], *, managed: Collection[str]
) -> dict[str, object | None]:
    """The allocatable entries a kubelet status sync changes for extended resources not in
    ``managed`` (the device-plugin resources): copied from capacity, or ``None`` (deleted) where
    capacity has none.  Empty when allocatable already follows."""
    changes: dict[str, object | None] = {}
    for name, value in capacity.items():
        if (
            name not in managed
            and is_extended_resource_name(name)
            and allocatable.get(name) != value
        ):
            changes[name] = value
    for name in allocatable:
        if name not in managed and name not in capacity and is_extended_resource_name(name):
            changes[name] = None
    return changes


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    """The kubelet's ``InsufficientResourceError`` (``capacity`` is the node's allocatable)."""

    name: str
    requested: int
    used: int
    capacity: int

    @property
    def reason(self) -> str:
        return f"OutOf{self.name}"

    @property
    def message(self) -> str:
        return (
            f"Node didn't have enough resource: {self.name}, requested: {self.requested}, "
            f"used: {self.used}, capacity: {self.capacity}"
        )


def insufficient_extended(
    pod: PodView, node: NodeView, others: Iterable[PodView], *, managed: Collection[str]
) -> InsufficientResource | None:
    """The first (by name) extended resource, advertised by ``node`` and not in ``managed``,
    that ``pod`` asks more of than allocatable minus what ``others`` (the node's other active
    pods) request; ``None`` when the pod fits."""
    allocatable = node_allocatable(node)
    wanted = {
        name: amount
        for name, amount in pod_requests(pod).items()
        if amount > 0
        and name in allocatable
        and name not in managed
        and is_extended_resource_name(name)
    }
    if not wanted:
        return None
    used = dict.fromkeys(wanted, 0)
    for other in others:
        for name, amount in pod_requests(other).items():
            if name in used:
                used[name] += amount
    for name in sorted(wanted):
        if wanted[name] > allocatable[name] - used[name]:
            return InsufficientResource(name, wanted[name], used[name], allocatable[name])
    return None
