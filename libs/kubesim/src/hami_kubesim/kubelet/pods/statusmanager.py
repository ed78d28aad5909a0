"""The kubelet stand-in's status manager: pod status writes, retried as the kubelet's are.

What is written is built in :mod:`..status` (pure); here it is sent: ``PATCH pods/<name>/status``
through ``KubeClient``, retried on 5xx, 429 and lost connections with backoff
(``hami_kube.patch.with_retries``), a pod gone (404) read as ``None`` rather than an error.
The status manager also sends the final ``DELETE`` (grace 0) that ends a graceful deletion.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from hami_kube.errors import ConflictError, NotFoundError
from hami_kube.objects import PodView
from hami_kube.patch import with_retries
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient, PatchType
from hami_kubesim.access import RECONNECT_BACKOFF

__all__ = ["KUBELET_CONDITIONS", "delete_stopped_pod", "patch_pod_status"]

KUBELET_CONDITIONS: Final = frozenset(
    {"PodScheduled", "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"}
)
"""The pod conditions the kubelet owns (``PodConditionsByKubelet``); it writes no other."""

_WRITE_ATTEMPTS = 10


async def _write(operation: Callable[[], Awaitable[JsonObject]]) -> JsonObject | None:
    """``operation()``, retried as the kubelet's status manager retries (5xx, 429, lost
    connections) with backoff; ``None`` when the pod is gone (404)."""
    try:
        return await with_retries(operation, attempts=_WRITE_ATTEMPTS, backoff=RECONNECT_BACKOFF)
    except NotFoundError:
        return None


async def patch_pod_status(
    client: KubeClient,
    pod: PodView,
    status: Mapping[str, Any],
    *,
    annotations: Mapping[str, str] | None = None,
) -> JsonObject | None:
    """``PATCH pods/<name>/status`` (the API server keeps metadata changes made there for pods,
    owner references aside).

    A strategic merge patch carrying only the conditions the kubelet owns
    (:data:`KUBELET_CONDITIONS`), as the kubelet's status manager merges its status into the
    API's latest (``mergePodStatus``) and sends a strategic merge patch: a condition another
    writer owns — kube-scheduler's ``DisruptionTarget`` on a preemption victim, a readiness
    gate's — is never overwritten by a status this kubelet built from an older view of the pod.
    (A merge patch of the whole list did exactly that: a victim's Running status, built before
    the scheduler marked it, wiped the mark, and the preemptor preempted a second time.)"""
    sent = dict(status)
    if "conditions" in sent:
        sent["conditions"] = [
            c for c in sent["conditions"] or [] if c.get("type") in KUBELET_CONDITIONS
        ]
    body: dict[str, Any] = {"status": sent}
    if annotations:
        body["metadata"] = {"annotations": dict(annotations)}
    return await _write(
        lambda: client.patch(
            PODS,
            pod.name,
            body,
            namespace=pod.namespace,
            patch_type=PatchType.STRATEGIC,
            subresource="status",
        )
    )


async def delete_stopped_pod(client: KubeClient, pod: PodView) -> None:
    """Finish the graceful deletion of ``pod`` once its containers stopped: ``DELETE`` with grace
    0 and the pod's UID as precondition (``canBeDeleted`` then ``Delete`` in the kubelet's
    status manager), retried like the status writes.  A pod already gone, or replaced by a new
    pod of the same name (the precondition fails: 409), needs nothing more."""
    try:
        await _write(
            lambda: client.delete(
                PODS, pod.name, namespace=pod.namespace, uid=pod.uid, grace_period_seconds=0
            )
        )
    except ConflictError:
        return
