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
from dataclasses import dataclass, field
from typing import Any, Final

from hami_kube.objects import PodView
from hami_protocol import keys
from hami_protocol.config.device import DeviceConfig
from hami_protocol.pod.allocation import allocation_keys
from hami_protocol.pod.devices import encode_pod_devices
from hami_protocol.pod.mig import encode_mig_reservations
from hami_protocol.pod.policy import GpuPolicy, NodePolicy, SelectorKeys, parse_pod_policy
from hami_protocol.pod.vendor_annotations import (
    NO_BIND_FACTS,
    BindFacts,
    DrsGrantProfile,
    vendor_pod_annotations,
    writes_annotations,
)
from hami_protocol.request.containers import PodDeviceRequests, pod_device_requests
from hami_protocol.vendor.table import AWS_NEURON, ENFLAME_DRS, METAX_SGPU, NVIDIA, Vendor
from hami_scheduler.cache.pods import (
    MIG_KEY_WORD,
    NIC_KEY_WORD,
    Holding,
    PodNicAllocation,
    allocation_key,
    mig_key_value,
    shared_usage,
)
from hami_scheduler.cache.vendor_facts import pod_vendor_facts
from hami_scheduler.core import (
    DeviceSelectors,
    NodeDecision,
    NodeUsage,
    PodPlan,
    VendorQuota,
    decision_usage,
    pod_plan,
)
from hami_scheduler.core.mig import mig_holds
from hami_scheduler.core.vendors.context import SgpuStateLookup

__all__ = ["DecisionRecord", "Planner", "bind_facts", "decision_record", "stale_allocations"]

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
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    """For the vendor defaults pods fall back to (``vnpus.hamiVnpuCore``,
    ``metax.sgpuTopologyAware``)."""

    def requests(self, pod: Mapping[str, Any]) -> PodDeviceRequests:
        """The pod's per-container requests; raises ``RequestError`` for a malformed pod."""
        return pod_device_requests(pod, vendors=self.vendors)

    def plan(
        self,
        pod: PodView,
        requests: PodDeviceRequests,
        *,
        quota: QuotaLookup | None = None,
        sgpu_state: SgpuStateLookup | None = None,
    ) -> PodPlan:
        """The plan; raises ``ValidationError`` for invalid device-scoring weights.
        ``sgpu_state`` tells the MetaX sGPU state of a node (the cache's holdings)."""
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
        facts = pod_vendor_facts(pod.annotations, words, self.device_config)
        return pod_plan(
            requests,
            policy,
            quota=quotas,
            selectors=selectors,
            vendor=facts,
            sgpu_state=sgpu_state,
        )


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
    pod: PodView | None = None,
    node_usage: NodeUsage | None = None,
    device_config: DeviceConfig | None = None,
) -> DecisionRecord:
    """``extra_annotations`` (a joint decision's RDMA and Koordinator annotations) are written
    with them; ``nics`` is the NIC part the cache assumes with the GPUs.  ``pod``,
    ``node_usage`` and ``device_config`` give the vendor annotations what they read besides the
    devices (:func:`bind_facts`)."""
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
        if writes_annotations(word):
            facts = bind_facts(
                word,
                plan,
                pod=pod,
                node=node_usage,
                config=device_config,
                vendor=vendor,
            )
            annotations.update(
                vendor_pod_annotations(word, pod_devices, node=node, now_unix=now_unix, facts=facts)
            )
    annotations.update(extra_annotations or {})
    if pod is not None:
        for key, blank in stale_allocations(pod.annotations, vendors, annotations).items():
            annotations[key] = blank
    listed = None if nics is None else nics.rdma_list
    if listed is not None:
        written[NIC_KEY_WORD] = listed
    if decision.mig:
        annotations[keys.NVIDIA_MIG_ALLOCATIONS] = encode_mig_reservations(decision.mig)
        written[MIG_KEY_WORD] = mig_key_value(decision.mig)
    sgpu = METAX_SGPU in written
    holding = Holding(
        node=sys.intern(node),
        namespace=sys.intern(namespace),
        usage=shared_usage(decision_usage(decision, plan)),
        key=allocation_key(node, written),
        nics=nics,
        mig=mig_holds(f"{namespace}/{name}", decision.mig),
        reservations=decision.mig,
        sgpu_class=plan.vendor.sgpu_app_class if sgpu else "",
        sgpu_qos=plan.vendor.sgpu_qos if sgpu else "",
    )
    return DecisionRecord(annotations, {keys.VGPU_NODE: node}, holding)


def stale_allocations(
    carried: Mapping[str, str], vendors: Sequence[Vendor], written: Mapping[str, str]
) -> dict[str, str]:
    """The allocation annotations the pod carries from before this decision that ``written``
    does not replace, each blanked.

    A pod created from another pod's manifest (or a bind that failed half-way) carries device
    lists, an RDMA list or MIG reservations that are not its own.  The API server merges the
    Binding's annotations into the pod's, so a list the decision does not write would stay:
    the cache would count another pod's VF or GPU share twice, and a device plugin could hand
    it to this pod.  Blank values hold nothing for every reader."""
    if not carried:
        return {}
    stale = allocation_keys(vendors) | {keys.NVIDIA_MIG_ALLOCATIONS}
    return {
        key: "" for key, value in carried.items() if value and key in stale and key not in written
    }


_ASCEND: Final = "Ascend"
_HAMI_CORE: Final = "hami-core"


def _container_names(pod: PodView) -> tuple[str, ...]:
    return tuple(c.name for c in pod.all_containers())


def bind_facts(
    word: str,
    plan: PodPlan,
    *,
    pod: PodView | None,
    node: NodeUsage | None,
    config: DeviceConfig | None,
    vendor: Vendor | None,
) -> BindFacts:
    """What vendor ``word``'s annotations read besides the devices: the pod's container names,
    the Ascend chip's templates and mode, the AWS core resource (when the pod asks NeuronCores)
    and cores per device, the Enflame DRS profiles and minors of the node."""
    if word.startswith(_ASCEND):
        chip = next(
            (c for c in (config or DeviceConfig()).vnpus.configs if c.common_word == word), None
        )
        node_core = None if node is None else node.layout.vendor.ascend_hami_core
        hami_core = plan.vendor.ascend_vnpu_mode == _HAMI_CORE or (
            plan.vendor.ascend_vnpu_mode == ""
            and (plan.vendor.ascend_hami_core_default if node_core is None else node_core)
        )
        return BindFacts(
            ascend_templates=tuple((t.name, t.memory) for t in chip.templates) if chip else (),
            ascend_hami_core=hami_core,
        )
    if word == AWS_NEURON:
        cores = vendor.cores_resource if vendor is not None else None
        asks_cores = (
            pod is not None
            and cores is not None
            and any(cores in c.limits or cores in c.requests for c in pod.all_containers())
        )
        per_device = (
            {d.uuid: d.count for d in node.vendor_devices(word)} if node is not None else {}
        )
        return BindFacts(
            aws_core_resource=cores or "" if asks_cores else "",
            aws_cores_per_device=per_device,
        )
    if word == ENFLAME_DRS:
        profiles: tuple[DrsGrantProfile, ...] = ()
        minors: dict[str, str] = {}
        if node is not None:
            known = node.layout.vendor.drs_profiles
            largest = max((p.slices for p in known), default=0)
            profiles = tuple(
                DrsGrantProfile(
                    p.name,
                    p.profile_id,
                    p.slices,
                    p.memory_gb,
                    max(-(-p.slices * 100 // largest), 1) if largest else 0,
                )
                for p in known
            )
            minors = {d.uuid: d.custom.get("minor", "") for d in node.vendor_devices(word)}
        return BindFacts(
            containers=_container_names(pod) if pod is not None else (),
            drs_profiles=profiles,
            drs_minors={k: v for k, v in minors.items() if v},
        )
    return NO_BIND_FACTS
