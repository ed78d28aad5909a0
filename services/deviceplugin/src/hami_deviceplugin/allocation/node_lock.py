"""Releasing the node lock (``hami.io/mutex.lock``) after an allocation, if (and only if) it names
the pod: one JSON patch that tests the lock's value and removes it, so a lock taken meanwhile by
another pod is never removed.  The lock's value comes from the node watch, read again with one
GET where the pod must have been locked for and the watch shows no lock naming it.
"""

from __future__ import annotations

from typing import Final

from hami_deviceplugin.allocation.entries import AllocatingPod
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_kube.errors import InvalidError, NotFoundError
from hami_kube.objects import NodeView
from hami_kube.resources import NODES, JsonObject
from hami_kube.rest import KubeClient, PatchType
from hami_protocol.errors import DecodeError
from hami_protocol.keys import NODE_LOCK
from hami_protocol.node.lock import decode_node_lock

__all__ = ["release_node_lock"]

_LOCK_PATH: Final = "/metadata/annotations/" + NODE_LOCK.replace("~", "~0").replace("/", "~1")


async def release_node_lock(
    client: KubeClient,
    pod: AllocatingPod,
    *,
    node_name: str,
    watched: JsonObject | None,
    conflict_attempts: int,
    expected: bool = False,
) -> None:
    """Remove the node lock if it names ``pod`` (a lock of anyone else's stays).

    ``watched``: the node as the node watch has it (None: read it).  ``expected``: the pod was
    bound under the lock (it was identified without the kubelet's pod-resources, where every
    scheduler locks the node), so a node watch showing no lock naming it may lag the lock
    write: the node is read again (one GET) rather than leave the lock to its timeout — HAMi's
    scheduler waits that long before binding here.  A lock that changes between its read and
    its removal is read again, at most ``conflict_attempts`` times."""
    node = watched
    reread = expected
    for _ in range(conflict_attempts + 1):
        if node is None:
            node = await client.get(NODES, node_name)
            reread = False
        value = NodeView(node).annotations.get(NODE_LOCK)
        try:
            lock = None if value is None else decode_node_lock(value)
        except DecodeError:
            lock = None
        if value is None or lock is None or not lock.owned_by(pod.namespace, pod.name):
            if reread:
                node, reread = None, False
                continue
            return
        test_and_remove: list[dict[str, str]] = [
            {"op": "test", "path": _LOCK_PATH, "value": value},
            {"op": "remove", "path": _LOCK_PATH},
        ]
        try:
            await client.patch(NODES, node_name, test_and_remove, patch_type=PatchType.JSON)
        except InvalidError:
            node = None  # the lock changed since it was read: read it again
            continue
        except NotFoundError:
            return
        return
    raise AllocateError(FailureKind.API, "the node lock kept changing while it was released")
