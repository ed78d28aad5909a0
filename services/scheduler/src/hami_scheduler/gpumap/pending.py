"""Pending GPU pods (``GET api/v1/pending``): what each waits for, sorted by wait.

The scheduler's own watches never see an unbound pod (only bound ones and nominated
preemptors), so the GPU map adds one: unbound, non-terminal pods
(``fieldSelector=spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed``), of which it keeps
only those naming a resource some vendor manages
(:func:`~hami_protocol.request.containers.pod_mentions_managed_resources`), each reduced at once
to a :class:`PendingPod` — the object itself is cut down to its metadata, so a burst of 10,000
pending pods costs a few MiB.  At most ``capacity`` pods are kept (the rest are counted as
``notShown``).

Per pod the document shows, kept apart:

* the extender's last verdict (:mod:`.verdicts`) — ``null`` when this replica never filtered the
  pod (it was never sent to the extender, or another replica answered);
* the Kubernetes side, as the pod object says it (the cache reads no Events): scheduling gates
  (``SchedulingGated``: kube-scheduler does not even try); a ``spec.schedulerName`` that is not
  this scheduler's (``NotThisScheduler``: the webhook did not mutate the pod, so the extender
  never sees it); else the ``PodScheduled`` condition when false — its reason
  (``Unschedulable``) and message, the text kube-scheduler's last ``FailedScheduling`` Event
  carried, CPU, taints and affinity included;
* the policy in effect (the pod's annotations over the scheduler's defaults) and
  ``status.nominatedNodeName``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kube.timefmt import parse_time
from hami_protocol.errors import ProtocolError
from hami_protocol.pod.policy import GpuPolicy, NodePolicy, parse_pod_policy
from hami_protocol.request.containers import (
    PERCENTAGE_UNSET,
    pod_device_requests,
    pod_mentions_managed_resources,
)
from hami_protocol.vendor.table import NVIDIA, Vendor
from hami_scheduler.gpumap.query import DEFAULT_PAGE, Page, document, moment, page_of, text
from hami_scheduler.gpumap.verdicts import Verdict, Verdicts, kubernetes_causes

__all__ = [
    "PENDING_PODS",
    "PendingPod",
    "PendingPods",
    "PendingQuery",
    "pending_document",
    "read_pending",
]

PENDING_PODS: Final = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"
"""The pending-pods watch's field selector."""
_KEPT_META: Final = ("name", "namespace", "uid", "resourceVersion")


@dataclass(frozen=True, slots=True)
class PendingPod:
    uid: str
    namespace: str
    name: str
    created: float | None
    """``metadata.creationTimestamp`` in Unix seconds (``None``: unreadable)."""
    scheduler_name: str
    request: tuple[Mapping[str, Any], ...]
    """One entry per container and vendor asked (the ``request.containers`` of the document)."""
    request_error: str
    node_policy: str
    gpu_policy: str
    gates: tuple[str, ...]
    condition: tuple[str, str] | None
    """``(reason, message)`` of a false ``PodScheduled`` condition."""
    nominated: str
    deleting: bool


def _created(pod: PodView) -> float | None:
    try:
        return parse_time(pod.creation_timestamp).timestamp()
    except ValueError:
        return None


def _requests(
    raw: Mapping[str, Any], vendors: Sequence[Vendor], types: Sequence[str]
) -> tuple[tuple[Mapping[str, Any], ...], str]:
    try:
        requests = pod_device_requests(raw, vendors=vendors)
    except ProtocolError as exc:
        return (), str(exc)
    rows: list[Mapping[str, Any]] = []
    for slot in requests.slots:
        for word, asked in slot.requests.items():
            percentage = asked.mem_percentagereq
            rows.append(
                {
                    "name": slot.name,
                    "init": slot.is_init,
                    "vendor": word,
                    "count": asked.nums,
                    "memory": asked.memreq or None,
                    "memoryPercentage": None if percentage >= PERCENTAGE_UNSET else percentage,
                    "cores": asked.coresreq,
                    "type": list(types) if word == NVIDIA else [],
                }
            )
    return tuple(rows), ""


def read_pending(
    raw: Mapping[str, Any],
    vendors: Sequence[Vendor],
    *,
    node_policy: NodePolicy,
    gpu_policy: GpuPolicy | None,
) -> PendingPod:
    """What the GPU map keeps of a pending pod; never raises on bad input."""
    pod = PodView(raw)
    defaults: dict[str, Any] = {"default_node_policy": node_policy}
    if gpu_policy is not None:
        defaults["default_gpu_policy"] = gpu_policy
    try:
        policy = parse_pod_policy(pod.annotations, **defaults)
        node, gpu, types = policy.node_policy, policy.gpu_policy.text, policy.use_types
    except ProtocolError:
        node, gpu, types = node_policy, "", ()
    request, error = _requests(raw, vendors, types)
    gates = tuple(
        str(gate.get("name", "")) for gate in pod.spec.get("schedulingGates") or () if gate
    )
    scheduled = pod.condition("PodScheduled")
    condition = None
    if scheduled is not None and scheduled.get("status") == "False":
        condition = (str(scheduled.get("reason", "")), str(scheduled.get("message", "")))
    return PendingPod(
        pod.uid,
        pod.namespace,
        pod.name,
        _created(pod),
        pod.scheduler_name,
        request,
        error,
        node,
        gpu,
        gates,
        condition,
        pod.nominated_node_name,
        pod.deleting,
    )


class PendingPods:
    """The pending GPU pods, by UID, fed by the pending-pods watch (module docstring)."""

    def __init__(
        self,
        vendors: Sequence[Vendor],
        *,
        verdicts: Verdicts,
        node_policy: NodePolicy = "binpack",
        gpu_policy: GpuPolicy | None = None,
        capacity: int = 50_000,
    ) -> None:
        self.vendors = tuple(vendors)
        self.verdicts = verdicts
        self._node_policy = node_policy
        self._gpu_policy = gpu_policy
        self.capacity = capacity
        self.pods: dict[str, PendingPod] = {}
        self.not_shown = 0

    def wanted(self, obj: Mapping[str, Any]) -> bool:
        """The watch's client-side filter: a pod naming a managed resource."""
        return pod_mentions_managed_resources(obj, vendors=self.vendors)

    def upsert(self, obj: dict[str, Any]) -> None:
        pending = read_pending(
            obj, self.vendors, node_policy=self._node_policy, gpu_policy=self._gpu_policy
        )
        # The reflector keeps the object: only what identifies it stays.
        meta = obj.get("metadata") or {}
        kind, version = obj.get("kind"), obj.get("apiVersion")
        obj.clear()
        obj["metadata"] = {k: meta[k] for k in _KEPT_META if k in meta}
        if kind is not None:
            obj["kind"], obj["apiVersion"] = kind, version
        if not pending.uid:
            return
        if pending.uid not in self.pods and len(self.pods) >= self.capacity:
            self.not_shown += 1
            return
        self.pods[pending.uid] = pending

    def remove(self, obj: Mapping[str, Any]) -> None:
        """Bound, deleted or ended: its verdict goes too."""
        uid = PodView(obj).uid
        if self.pods.pop(uid, None) is None and self.not_shown:
            self.not_shown -= 1
        self.verdicts.drop(uid)


@dataclass(frozen=True, slots=True)
class PendingQuery:
    namespace: str = ""
    page: Page = DEFAULT_PAGE

    @classmethod
    def read(cls, query: Mapping[str, str]) -> PendingQuery:
        return cls(text(query, "namespace"), Page.read(query))


def _kubernetes(pod: PendingPod, scheduler: str, verdict: Verdict | None) -> dict[str, Any] | None:
    if pod.gates:
        return {"reason": "SchedulingGated", "message": "scheduling gates: " + ", ".join(pod.gates)}
    if scheduler and pod.scheduler_name != scheduler:
        return {
            "reason": "NotThisScheduler",
            "message": (
                f"spec.schedulerName is {pod.scheduler_name or 'default-scheduler'}, not "
                f"{scheduler}: the HAMi webhook did not mutate this pod, so this extender "
                "never sees it"
            ),
        }
    if pod.condition is not None:
        reason, message = pod.condition
        causes, preemption = kubernetes_causes(message, verdict.texts if verdict else ())
        return {
            "reason": reason,
            "message": message,
            "causes": causes,
            "preemption": preemption or None,
        }
    return None


def _verdict(verdict: Verdict | None) -> dict[str, Any] | None:
    if verdict is None:
        return None
    return {
        "at": moment(verdict.at),
        "nodes": verdict.nodes,
        "fitting": verdict.fitting,
        "chosen": verdict.chosen,
        "error": verdict.error or None,
        "reasons": [
            {"reason": group.reason, "nodes": group.nodes, "examples": list(group.examples)}
            for group in verdict.reasons
        ],
    }


def pending_document(
    pods: PendingPods,
    query: PendingQuery,
    *,
    now: datetime,
    scheduler: str,
    complete: bool,
    replica: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``PendingGpuPods`` document (docs/gpumap.md); ``complete``: the watch has listed."""
    chosen = [
        pod for pod in pods.pods.values() if not query.namespace or pod.namespace == query.namespace
    ]
    unix = now.timestamp()
    chosen.sort(key=lambda pod: (pod.created or unix, pod.namespace, pod.name))
    shown, page = page_of(chosen, query.page)
    doc = document("PendingGpuPods", now, replica)
    doc["complete"] = complete
    doc["notShown"] = pods.not_shown
    doc["page"] = page
    items: list[dict[str, Any]] = []
    for pod in shown:
        waited = max(unix - pod.created, 0.0) if pod.created is not None else None
        items.append(
            {
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
                "since": None if pod.created is None else moment(pod.created),
                "waitingSeconds": None if waited is None else int(waited),
                "schedulerName": pod.scheduler_name,
                "deleting": pod.deleting,
                "request": {"containers": list(pod.request), "error": pod.request_error or None},
                "policy": {"node": pod.node_policy, "gpu": pod.gpu_policy},
                "verdict": _verdict(verdict := pods.verdicts.get(pod.uid)),
                "kubernetes": _kubernetes(pod, scheduler, verdict),
                "nominatedNode": pod.nominated or None,
            }
        )
    doc["items"] = items
    return doc
