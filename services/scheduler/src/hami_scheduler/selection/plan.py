"""From a pod in a request to a :class:`~hami_scheduler.core.PodPlan`, and from a decision to
the annotations that record it.

* :class:`Planner` parses the pod's device requests and policy annotations — NVIDIA's selectors
  and every other requested vendor's own ``use/nouse`` keys — with the scheduler's default
  policies, and attaches the namespace quota of each requested vendor that has one;
* :func:`decision_record` turns a :class:`~hami_scheduler.core.NodeDecision` into the pod
  annotations HAMi writes at filter and the Binding carries here (``hami.io/vgpu-node``,
  ``hami.io/vgpu-time``, each vendor's ``-devices-to-allocate`` and ``-devices-allocated`` and
  what its own plugin reads (:mod:`hami_protocol.pod.vendor_annotations`); the
  record's ``labels`` are HAMi's ``hami.io/vgpu-node`` label, which a Binding cannot carry: the
  device plugin sets it) and the :class:`~hami_scheduler.cache.pods.Holding` the cache
  assumes; a joint decision adds its RDMA and Koordinator annotations and the holding's NIC
  part (:mod:`hami_scheduler.selection.joint_plan`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_kube.objects import PodView
from hami_protocol import keys
from hami_protocol.pod.devices import encode_pod_devices
from hami_protocol.pod.mig import encode_mig_reservations
from hami_protocol.pod.policy import GpuPolicy, NodePolicy, SelectorKeys, parse_pod_policy
from hami_protocol.pod.vendor_annotations import vendor_pod_annotations
from hami_protocol.request.containers import PodDeviceRequests, pod_device_requests
from hami_protocol.vendor.table import NVIDIA, Vendor
from hami_scheduler.cache.pods import (
    MIG_KEY_WORD,
    NIC_KEY_WORD,
    Holding,
    PodNicAllocation,
    allocation_key,
    mig_key_value,
    shared_usage,
)
from hami_scheduler.core import (
    DeviceSelectors,
    NodeDecision,
    PodPlan,
    VendorQuota,
    decision_usage,
    pod_plan,
)
from hami_scheduler.core.mig import mig_holds

__all__ = ["DecisionRecord", "Planner", "decision_record"]

QuotaLookup = Callable[[str, str], VendorQuota | None]
"""``(namespace, vendor word) -> quota view`` (``None``: unlimited)."""


def _selector_keys(vendor: Vendor) -> SelectorKeys:
    return SelectorKeys(
        use_type=vendor.use_type_key,
        nouse_type=vendor.nouse_type_key,
        use_uuid=vendor.use_uuid_key,
        nouse_uuid=vendor.nouse_uuid_key,
    )


@dataclass(frozen=True, slots=True)
class Planner:
    """Builds plans with the scheduler's vendors and default policies."""

    vendors: Sequence[Vendor]
    node_policy: NodePolicy = "binpack"
    gpu_policy: GpuPolicy | None = None

    def requests(self, pod: Mapping[str, Any]) -> PodDeviceRequests:
        """The pod's per-container requests; raises ``RequestError`` for a malformed pod."""
        return pod_device_requests(pod, vendors=self.vendors)

    def plan(
        self,
        pod: PodView,
        requests: PodDeviceRequests,
        *,
        quota: QuotaLookup | None = None,
    ) -> PodPlan:
        """The plan; raises ``ValidationError`` for invalid device-scoring weights."""
        defaults: dict[str, Any] = {"default_node_policy": self.node_policy}
        if self.gpu_policy is not None:
            defaults["default_gpu_policy"] = self.gpu_policy
        policy = parse_pod_policy(pod.annotations, **defaults)
        words = requests.vendors()
        selectors: dict[str, DeviceSelectors] = {}
        quotas: dict[str, VendorQuota] = {}
        for vendor in self.vendors:
            word = vendor.common_word
            if word not in words:
                continue
            if word != NVIDIA and (vendor.use_uuid_key or vendor.use_type_key):
                own = parse_pod_policy(pod.annotations, selector_keys=_selector_keys(vendor))
                selectors[word] = DeviceSelectors.from_policy(own)
            if quota is not None:
                view = quota(pod.namespace, word)
                if view is not None:
                    quotas[word] = view
        return pod_plan(requests, policy, quota=quotas, selectors=selectors)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """What recording a decision writes and what the cache assumes meanwhile."""

    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    holding: Holding


def decision_record(
    decision: NodeDecision,
    plan: PodPlan,
    *,
    namespace: str,
    vendors: Sequence[Vendor],
    now_unix: int,
    name: str = "",
    extra_annotations: Mapping[str, str] | None = None,
    nics: PodNicAllocation | None = None,
) -> DecisionRecord:
    """``extra_annotations`` (a joint decision's RDMA and Koordinator annotations) are written
    with them; ``nics`` is the NIC part the cache assumes with the GPUs."""
    node = decision.node
    annotations: dict[str, str] = {keys.VGPU_NODE: node, keys.VGPU_TIME: str(now_unix)}
    written: dict[str, str] = {}
    by_word = {vendor.common_word: vendor for vendor in vendors}
    for word, pod_devices in decision.devices.entries:
        vendor = by_word.get(word)
        if vendor is None:
            continue
        value = encode_pod_devices(pod_devices)
        if vendor.devices_to_allocate_key:
            annotations[vendor.devices_to_allocate_key] = value
        if vendor.devices_allocated_key:
            annotations[vendor.devices_allocated_key] = value
            written[word] = value
        annotations.update(vendor_pod_annotations(word, pod_devices, node=node, now_unix=now_unix))
    annotations.update(extra_annotations or {})
    listed = None if nics is None else nics.rdma_list
    if listed is not None:
        written[NIC_KEY_WORD] = listed
    if decision.mig:
        annotations[keys.NVIDIA_MIG_ALLOCATIONS] = encode_mig_reservations(decision.mig)
        written[MIG_KEY_WORD] = mig_key_value(decision.mig)
    holding = Holding(
        node=sys.intern(node),
        namespace=sys.intern(namespace),
        usage=shared_usage(decision_usage(decision, plan)),
        key=allocation_key(node, written),
        nics=nics,
        mig=mig_holds(f"{namespace}/{name}", decision.mig),
        reservations=decision.mig,
    )
    return DecisionRecord(annotations, {keys.VGPU_NODE: node}, holding)
