"""What kube-scheduler's preemption does to a victim once it picked a node, and to nominations.

From ``pkg/scheduler/framework/preemption/preemption.go`` (``prepareCandidate``,
``PreemptPod``) and ``pkg/scheduler/util/utils.go`` (``PatchPodStatus``, ``DeletePod``,
``ClearNominatedNodeName``), for each victim of the chosen candidate:

1. a victim already being deleted is skipped (no call, no event);
2. its status gets the condition ``DisruptionTarget=True``, reason ``PreemptionByScheduler``,
   message ``<preemptor's schedulerName>: preempting to accommodate a higher priority pod``: a
   strategic merge patch of ``pods/<name>/status``, sent only when the condition changes and
   retried on 500/503 and lost connections;
3. the victim is deleted with a plain ``DELETE`` (empty DeleteOptions: the API server applies
   the pod's ``terminationGracePeriodSeconds``; no Eviction API, so no PDB is enforced);
4. a ``Normal`` Event ``Preempted`` on the victim: ``Preempted by pod <preemptor uid> on node
   <node>``.

A victim that is gone (404) at step 2 or 3 ends its treatment there, without the Event; any
other error is raised, as the real preemption then fails for this cycle.  The deleted victim
keeps holding its node (the scheduling cycle counts a pod until its DELETED event) until its
kubelet finishes the graceful deletion.

The preemption loop itself is not here; these are the writes it makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_kube.backoff import BackoffPolicy
from hami_kube.errors import ApiError, NotFoundError, TransportError
from hami_kube.events import EventRecorder, EventType
from hami_kube.objects import PodView
from hami_kube.patch import with_retries
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient, PatchType
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.scheduler.config import scheduler_name_of

__all__ = [
    "DISRUPTION_TARGET",
    "PREEMPTION_BY_SCHEDULER",
    "clear_nomination",
    "disruption_condition",
    "preempt_victim",
]

DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
_PATCH_ATTEMPTS: Final = 4
_PATCH_BACKOFF: Final = BackoffPolicy(initial=0.01, factor=5.0, cap=10.0, jitter=0.1)
"""``retry.DefaultBackoff``: 4 steps from 10 ms, times 5."""


def _retriable(error: BaseException) -> bool:
    """``util.Retriable``: 500, 503 and connections that failed."""
    if isinstance(error, TransportError):
        return True
    return isinstance(error, ApiError) and error.status in (500, 503)


def disruption_condition(preemptor: PodView, now: str) -> dict[str, Any]:
    """The condition a victim of ``preemptor`` gets."""
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now,
        "reason": PREEMPTION_BY_SCHEDULER,
        "message": (
            f"{scheduler_name_of(preemptor)}: preempting to accommodate a higher priority pod"
        ),
    }


def _condition_patch(victim: PodView, condition: Mapping[str, Any]) -> JsonObject | None:
    """``UpdatePodCondition`` then the two-way strategic merge patch of the status: ``None``
    when the victim already carries that condition (same status, reason and message)."""
    conditions = [c for c in victim.status.get("conditions") or () if isinstance(c, dict)]
    current = next((c for c in conditions if c.get("type") == DISRUPTION_TARGET), None)
    new = dict(condition)
    if current is not None:
        same = all(current.get(k) == new[k] for k in ("status", "reason", "message"))
        if same:
            return None
        if current.get("status") == new["status"]:
            new["lastTransitionTime"] = current.get("lastTransitionTime")
    order = [{"type": c.get("type")} for c in conditions]
    if current is None:
        order.append({"type": DISRUPTION_TARGET})
    return {"status": {"$setElementOrder/conditions": order, "conditions": [new]}}


async def preempt_victim(
    client: KubeClient,
    events: EventRecorder,
    victim: PodView,
    *,
    preemptor: PodView,
    node: str,
) -> bool:
    """Treat ``victim`` as kube-scheduler's preemption does (see the module doc).  Returns
    whether this call deleted it (``False``: it was already being deleted, or is gone)."""
    if victim.deleting:
        return False
    namespace = victim.namespace or "default"
    patch = _condition_patch(victim, disruption_condition(preemptor, format_time(utc_now())))
    try:
        if patch is not None:
            await with_retries(
                lambda: client.patch(
                    PODS,
                    victim.name,
                    patch,
                    namespace=namespace,
                    patch_type=PatchType.STRATEGIC,
                    subresource="status",
                ),
                attempts=_PATCH_ATTEMPTS,
                backoff=_PATCH_BACKOFF,
                retry_on=_retriable,
            )
        await client.delete(PODS, victim.name, namespace=namespace)
    except NotFoundError:
        return False
    await events.record(
        victim.raw,
        EventType.NORMAL,
        "Preempted",
        f"Preempted by pod {preemptor.uid} on node {node}",
    )
    return True


async def clear_nomination(client: KubeClient, pod: PodView) -> bool:
    """``ClearNominatedNodeName``: drop ``status.nominatedNodeName`` (a lower-priority pod
    nominated to the node a preemptor takes).  Returns whether a write was needed; a pod that
    is gone needs none."""
    if not pod.status.get("nominatedNodeName"):
        return False
    try:
        await with_retries(
            lambda: client.patch(
                PODS,
                pod.name,
                {"status": {"nominatedNodeName": None}},
                namespace=pod.namespace or "default",
                patch_type=PatchType.STRATEGIC,
                subresource="status",
            ),
            attempts=_PATCH_ATTEMPTS,
            backoff=_PATCH_BACKOFF,
            retry_on=_retriable,
        )
    except NotFoundError:
        return False
    return True
