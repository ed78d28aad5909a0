"""Koordinator's side of a pod in a request: its RDMA demands and hints, and the record of a
joint GPU + NIC decision.

* :func:`managed` says whether the extender handles the pod at all (HAMi's device requests,
  or RDMA);
* :func:`joint_request` reads ``scheduling.koordinator.sh/device-joint-allocate`` and
  ``…/device-allocate-hint`` against the pod's plan.  A pod with neither and no RDMA request
  gets :data:`~hami_scheduler.core.joint.hints.NO_JOINT` without parsing anything (the common case
  stays on the fast path).  A pod this scheduler already placed (it carries
  ``hami.io/vgpu-node``) has its own earlier ``device-allocated`` on it: that names no VFs for
  the new decision;
* :func:`joint_record` turns a :class:`~hami_scheduler.core.joint.decide.JointDecision` into the
  annotations its Binding carries: HAMi's GPU annotations
  (:func:`~hami_scheduler.selection.plan.decision_record`) plus
  ``hami.io/rdma-devices-to-allocate`` / ``-allocated`` and
  ``scheduling.koordinator.sh/device-allocated``, and the holding the cache assumes — its NIC
  part is the :class:`~hami_scheduler.cache.pods.PodNicAllocation` the pod will carry once
  bound, so the watch event confirming it changes nothing.

Every error is a :class:`~hami_protocol.errors.ProtocolError` naming the annotation or resource.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_kube.objects import PodView
from hami_protocol import keys
from hami_protocol.request.containers import PodDeviceRequests
from hami_protocol.vendor.table import Vendor
from hami_scheduler.cache.pods import pod_nic_allocation
from hami_scheduler.core import NodeUsage, PodPlan
from hami_scheduler.core.joint.decide import JointDecision, pod_gpu_uuids
from hami_scheduler.core.joint.hints import (
    NO_JOINT,
    JointRequest,
    KoordRequests,
    read_joint_request,
)
from hami_scheduler.core.joint.nics import NicLayout
from hami_scheduler.core.joint.wire import joint_annotations
from hami_scheduler.selection.plan import DecisionRecord, decision_record, stale_allocations

__all__ = ["joint_record", "joint_request", "managed", "wants_rdma"]


def wants_rdma(koord: KoordRequests, *, app_only: bool = False, init_count: int = 0) -> bool:
    """Whether any container (``app_only``: any app container) asks for ``koordinator.sh/rdma``."""
    quantities = koord.rdma[init_count:] if app_only else koord.rdma
    return any(quantity > 0 for quantity in quantities)


def managed(requests: PodDeviceRequests, koord: KoordRequests) -> bool:
    """Whether the pod asks for anything this extender allocates."""
    return requests.has_requests or wants_rdma(koord)


def joint_request(pod: PodView, plan: PodPlan, koord: KoordRequests) -> JointRequest:
    """The pod's :class:`JointRequest` (see the module doc); raises ``ProtocolError``."""
    notes = pod.annotations
    if (
        not wants_rdma(koord)
        and keys.KOORD_DEVICE_ALLOCATE_HINT not in notes
        and keys.KOORD_DEVICE_JOINT_ALLOCATE not in notes
    ):
        return NO_JOINT
    return read_joint_request(plan, notes, koord, honour_designated=keys.VGPU_NODE not in notes)


def joint_record(
    decision: JointDecision,
    plan: PodPlan,
    request: JointRequest,
    *,
    pod: PodView,
    node: NodeUsage,
    layout: NicLayout,
    vendors: Sequence[Vendor],
    now_unix: int,
) -> DecisionRecord:
    """The annotations and the assumed holding for a fitting joint decision on ``node``."""
    extra = joint_annotations(decision, node=node, layout=layout, plan=plan, request=request)
    # The NICs assumed are the ones the Binding leaves on the pod (stale lists blanked).
    source = pod_nic_allocation(
        {**pod.annotations, **stale_allocations(pod.annotations, vendors, extra), **extra},
        init_count=plan.requests.init_count,
        gpu_uuids=pod_gpu_uuids(decision.devices),
    )
    return decision_record(
        decision.node_decision(),
        plan,
        namespace=pod.namespace,
        vendors=vendors,
        now_unix=now_unix,
        extra_annotations=extra,
        nics=source,
        pod=pod,
    )
