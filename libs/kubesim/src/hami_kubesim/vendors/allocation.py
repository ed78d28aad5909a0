"""What a vendor plugin stand-in does at ``Allocate``: find the pod, take its next container's
devices from the scheduler's annotations, and say what to write back.  Pure.

``Allocate`` carries replica IDs but no pod, so a vendor plugin finds the pod itself, as HAMi's
vendor plugins do (``GetPendingPod`` + ``GetNextDeviceRequest``):

* the pods bound to the node that are not running and wait for this vendor — their
  :class:`~.profiles.BindMarker` reads *waiting* (``hami.io/bind-phase: allocating``,
  ``CAMBRICON_DSMLU_ASSIGNED: false`` …) where the vendor has one — the oldest bind first;
* the container: the first entry of ``-devices-to-allocate`` that still lists devices, which is
  then erased; a vendor the scheduler writes only ``-allocated`` for (Moore Threads, Kunlun,
  Enflame DRS, AWS) takes the first non-empty entry of that list it has not given yet (the
  stand-in remembers which, as those plugins keep their own state).

Once no list of the pod has a pending entry (every vendor's, NVIDIA's too: a pod may ask for
two vendors), the marker gets its *done* value (``bind-phase: success`` …) and the node lock is
released if the pod holds it: ``hami.io/mutex.lock`` for HAMi's locking vendors, Cambricon's
``cambricon.com/dsmlu.lock`` (a bare time, no owner) for MLU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kubesim.vendors.profiles import Profile, known_words, profile_for
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.node.lock import decode_node_lock
from hami_protocol.pod.devices import (
    ContainerDevices,
    decode_pod_devices_canonical,
    encode_container_devices,
    encode_pod_devices,
    erase_container,
)

__all__ = [
    "GIVEN_ANNOTATION",
    "Grant",
    "grant_for",
    "lock_release",
    "waiting_pods",
]

GIVEN_ANNOTATION: Final = "kubesim.hami.io/vendor-devices"
"""Our own key on a ``ContainerAllocateResponse``: ``<word>;<index>;<devices>`` — the vendor, the
container's index in the pod's device lists and the devices (``UUID,Type,mem,cores:``) the
stand-in gave it.  The kubelet stand-in keeps it in its allocation record; invariants read it."""


@dataclass(frozen=True, slots=True)
class Grant:
    """One container's devices and the pod annotations to write for it."""

    index: int
    devices: ContainerDevices
    pod_annotations: Mapping[str, str]
    finished: bool
    """No list of the pod has a pending container left: the pod's devices are all given."""

    def given_value(self, word: str) -> str:
        return f"{word};{self.index};{encode_container_devices(self.devices)}"


def parse_given(value: str) -> tuple[str, int, str] | None:
    """``(word, container index, devices)`` of a :data:`GIVEN_ANNOTATION` value."""
    word, _, rest = value.partition(";")
    index, _, devices = rest.partition(";")
    return (word, int(index), devices) if word and index.isdigit() else None


def _devices(pod: PodView, key: str | None) -> tuple[ContainerDevices, ...] | None:
    raw = pod.annotations.get(key or "")
    if not raw:
        return None
    try:
        return decode_pod_devices_canonical(raw, key=key or "")
    except ProtocolError:
        return None


def _pending(pod: PodView, profile: Profile, given: Iterable[int]) -> int | None:
    taken = frozenset(given)
    if profile.to_allocate_key is not None:
        listed = _devices(pod, profile.to_allocate_key) or ()
        return next((i for i, c in enumerate(listed) if c), None)
    listed = _devices(pod, profile.allocated_key) or ()
    return next((i for i, c in enumerate(listed) if c and i not in taken), None)


def waiting_pods(
    pods: Iterable[Mapping[str, Any]],
    profile: Profile,
    *,
    node: str,
    given: Mapping[str, Iterable[int]],
) -> list[PodView]:
    """Pods on ``node`` that wait for this vendor's ``Allocate``, oldest bind first."""
    found: list[PodView] = []
    for raw in pods:
        pod = PodView(raw)
        if pod.node_name != node or pod.terminal or pod.deleting or pod.phase == "Running":
            continue
        marker = profile.marker
        if marker is not None and pod.annotations.get(marker.key) != marker.waiting:
            continue
        if _pending(pod, profile, given.get(pod.uid, ())) is not None:
            found.append(pod)
    return sorted(
        found,
        key=lambda p: (p.annotations.get(keys.BIND_TIME, ""), p.creation_timestamp or "", p.key),
    )


def _other_lists_pending(pod: PodView, profile: Profile) -> bool:
    others = {keys.NVIDIA_DEVICES_TO_ALLOCATE}
    others.update(
        key for key in (profile_for(w).to_allocate_key for w in known_words()) if key is not None
    )
    others.discard(profile.to_allocate_key or "")
    return any(any(listed) for listed in (_devices(pod, key) or () for key in others))


def grant_for(pod: PodView, profile: Profile, given: Iterable[int]) -> Grant | None:
    """The next container of ``pod`` this vendor gives devices to; ``None`` when none waits."""
    index = _pending(pod, profile, given)
    if index is None:
        return None
    written: dict[str, str] = {}
    if profile.to_allocate_key is not None:
        listed = _devices(pod, profile.to_allocate_key) or ()
        devices = listed[index]
        rest = erase_container(listed, index)
        written[profile.to_allocate_key] = encode_pod_devices(rest)
        left = any(rest)
    else:
        devices = (_devices(pod, profile.allocated_key) or ())[index]
        left = _pending(pod, profile, (*given, index)) is not None
    finished = not left and not _other_lists_pending(pod, profile)
    if finished and profile.marker is not None:
        written[profile.marker.key] = profile.marker.done
    return Grant(index=index, devices=devices, pod_annotations=written, finished=finished)


def lock_release(
    profile: Profile, node_annotations: Mapping[str, str], pod: PodView
) -> dict[str, str | None]:
    """The node patch releasing the vendor's lock held for ``pod`` (empty: nothing to release).

    HAMi's lock names its owner and is released only by it; Cambricon's holds a bare time and is
    released by whichever pod finishes."""
    key = profile.lock_key
    if key is None or key not in node_annotations:
        return {}
    if key == keys.NODE_LOCK:
        try:
            lock = decode_node_lock(node_annotations[key])
        except ProtocolError:
            return {}
        if not (lock.legacy or lock.owned_by(pod.namespace, pod.name)):
            return {}
    return {key: None}
