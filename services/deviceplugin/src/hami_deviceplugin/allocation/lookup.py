"""Which pod an ``Allocate`` is for (HAMi ``GetPendingPod``, §5.4 of the protocol notes).

1. The node lock ``hami.io/mutex.lock`` = ``<time>,<ns>,<pod>``: that pod, read fresh from the API
   server.  A lock naming a pod that no longer exists is an error (:class:`VanishedLockOwnerError`;
   the caller releases the lock).
2. Otherwise (no lock, a legacy lock without owner, an unreadable one): the pods bound to this
   node that are ``Pending`` with ``hami.io/bind-phase: allocating``, a ``hami.io/bind-time`` and
   ``hami.io/vgpu-node`` naming this node; the one with the oldest bind time wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hami_deviceplugin.errors import AllocateError, FailureKind, VanishedLockOwnerError
from hami_kube.errors import NotFoundError
from hami_kube.objects import NodeView, PodView
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol.errors import DecodeError
from hami_protocol.keys import (
    BIND_PHASE,
    BIND_PHASE_ALLOCATING,
    BIND_TIME,
    NODE_LOCK,
    VGPU_NODE,
)
from hami_protocol.node.lock import NodeLock, decode_node_lock

__all__ = ["FoundPod", "find_pod", "lock_owner", "pick_pending_pod"]


@dataclass(frozen=True, slots=True)
class FoundPod:
    pod: JsonObject
    via: Literal["lock", "pending"]


def lock_owner(annotations: Mapping[str, str]) -> NodeLock | None:
    """The decoded lock when it names an owner; None when absent, legacy or unreadable."""
    value = annotations.get(NODE_LOCK)
    if not value:
        return None
    try:
        lock = decode_node_lock(value)
    except DecodeError:
        return None
    return None if lock.legacy else lock


def _bind_time(annotations: Mapping[str, str]) -> int | None:
    try:
        return int(annotations.get(BIND_TIME, "").strip())
    except ValueError:
        return None


def pick_pending_pod(pods: Iterable[Mapping[str, Any]], node_name: str) -> Mapping[str, Any] | None:
    """The waiting pod with the oldest bind time among ``pods`` (pure)."""
    candidates: list[tuple[int, str, str, str, Mapping[str, Any]]] = []
    for raw in pods:
        pod = PodView(raw)
        annotations = pod.annotations
        if (
            (pod.phase or "Pending") != "Pending"
            or pod.deleting
            or pod.node_name != node_name
            or annotations.get(BIND_PHASE) != BIND_PHASE_ALLOCATING
            or annotations.get(VGPU_NODE) != node_name
        ):
            continue
        bind_time = _bind_time(annotations)
        if bind_time is None:
            continue
        candidates.append((bind_time, pod.creation_timestamp, pod.namespace, pod.name, raw))
    if not candidates:
        return None
    return min(candidates, key=lambda item: item[:4])[4]


async def find_pod(client: KubeClient, *, node_name: str, node: Mapping[str, Any]) -> FoundPod:
    """Find the pod being allocated on ``node`` (the node object just read)."""
    annotations = NodeView(node).annotations
    lock = lock_owner(annotations)
    if lock is not None:
        try:
            pod = await client.get(PODS, lock.pod, namespace=lock.namespace)
        except NotFoundError:
            raise VanishedLockOwnerError(
                lock.namespace, lock.pod, annotations.get(NODE_LOCK, "")
            ) from None
        return FoundPod(pod=pod, via="lock")
    listing = await client.list(PODS, field_selector=f"spec.nodeName={node_name}")
    items = [item for item in listing.get("items") or [] if isinstance(item, dict)]
    found = pick_pending_pod(items, node_name)
    if found is None:
        raise AllocateError(FailureKind.NO_POD, f"no binding pod found on node {node_name}")
    return FoundPod(pod=dict(found), via="pending")
