"""Everything a filter decision needs to know about the pod, in one frozen value.

:class:`PodPlan` bundles the pod's per-container device requests with its policies
(node/GPU policy, scoring weights), per-vendor device selectors and the namespace quota the
pod is subject to.  Build it once per filter with :func:`pod_plan` and hand it to
:func:`~hami_scheduler.core.decide.decide_node` or
:func:`~hami_scheduler.core.select.select_node`.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Final

from hami_protocol.pod.policy import (
    SPREAD,
    GpuPolicy,
    NodePolicy,
    PodPolicy,
    ScoringWeights,
    mode_allowed,
    type_allowed,
    uuid_allowed,
)
from hami_protocol.request.containers import ContainerDeviceRequest, PodDeviceRequests
from hami_protocol.vendor.table import NVIDIA
from hami_scheduler.core.quota import VendorQuota
from hami_scheduler.core.vendors.context import NO_POD_FACTS, SgpuStateLookup, VendorPodFacts

__all__ = ["NO_SELECTORS", "DeviceSelectors", "PodPlan", "pod_plan"]


@dataclass(frozen=True, slots=True)
class DeviceSelectors:
    """Which devices of one vendor a pod accepts (type, UUID, mode) and whether NUMA must match."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    numa_bind: bool = False
    vgpu_mode: str | None = None

    @classmethod
    def from_policy(cls, policy: PodPolicy) -> DeviceSelectors:
        return cls(
            use_types=policy.use_types,
            nouse_types=policy.nouse_types,
            use_uuids=policy.use_uuids,
            nouse_uuids=policy.nouse_uuids,
            numa_bind=policy.numa_bind,
            vgpu_mode=policy.vgpu_mode,
        )

    @property
    def filters_type(self) -> bool:
        return bool(self.use_types or self.nouse_types) or self.vgpu_mode is not None

    @property
    def filters_uuid(self) -> bool:
        return bool(self.use_uuids or self.nouse_uuids)

    def type_ok(self, model: str, mode: str) -> bool:
        """Model passes the use/nouse type lists and the mode passes ``vgpu-mode``."""
        return type_allowed(model, use=self.use_types, nouse=self.nouse_types) and mode_allowed(
            mode, self.vgpu_mode
        )

    def uuid_ok(self, uuid: str) -> bool:
        return uuid_allowed(uuid, use=self.use_uuids, nouse=self.nouse_uuids)


NO_SELECTORS: Final = DeviceSelectors()


def _request_key(request: ContainerDeviceRequest) -> tuple[str, int, int, int, int]:
    return (
        request.type,
        request.nums,
        request.memreq,
        request.mem_percentagereq,
        request.coresreq,
    )


_DEFAULT_WEIGHTS: Final = ScoringWeights()
_DEFAULT_POLICY: Final = PodPolicy()


@dataclass(frozen=True, slots=True)
class PodPlan:
    """A pod as the scheduler core sees it.  Prefer :func:`pod_plan` to build one."""

    requests: PodDeviceRequests
    gpu_policy: GpuPolicy = SPREAD
    node_policy: NodePolicy = "binpack"
    weights: ScoringWeights = _DEFAULT_WEIGHTS
    selectors: tuple[tuple[str, DeviceSelectors], ...] = ()
    """Vendor word → selectors; vendors not listed accept any device."""
    quota: tuple[tuple[str, VendorQuota], ...] = ()
    """Vendor word → the namespace quota; vendors not listed are unlimited."""
    vendor: VendorPodFacts = NO_POD_FACTS
    """The pod's vendor annotations (Ascend vNPU mode, MetaX sGPU QoS and app class)."""
    sgpu_state: SgpuStateLookup | None = field(default=None, compare=False, repr=False)
    """Node name → what the pods held there say about its MetaX sGPU devices (set by the
    selection layer for pods asking them; not part of :attr:`key`: that state changes only
    with the node's holdings, which change its ``NodeUsage``)."""
    key: Hashable = field(init=False, compare=False, repr=False)
    """Everything a per-node result depends on (not the node policy), for memoisation."""
    shape_key: Hashable = field(init=False, compare=False, repr=False)
    """:attr:`key` without the quota: enough when the quota cannot refuse anything."""
    vendors: tuple[str, ...] = field(init=False, compare=False, repr=False)
    """Vendor words the pod requests, in first-request order."""

    def __post_init__(self) -> None:
        slots = tuple(
            (slot.is_init, tuple(_request_key(r) for r in slot.requests.values()))
            for slot in self.requests.slots
        )
        shape = (slots, self.gpu_policy.entries, self.weights, self.selectors, self.vendor)
        object.__setattr__(self, "shape_key", shape)
        object.__setattr__(self, "key", (shape, self.quota))
        vendors: dict[str, None] = {}
        for slot in self.requests.slots:
            for word in slot.requests:
                vendors.setdefault(word, None)
        object.__setattr__(self, "vendors", tuple(vendors))

    def selectors_for(self, vendor: str) -> DeviceSelectors:
        for word, selectors in self.selectors:
            if word == vendor:
                return selectors
        return NO_SELECTORS

    def quota_for(self, vendor: str) -> VendorQuota | None:
        """The vendor's quota when it actually limits something, else ``None``."""
        for word, quota in self.quota:
            if word == vendor and quota.limits.limited:
                return quota
        return None


def _word(entry: tuple[str, object]) -> str:
    return entry[0]


def pod_plan(
    requests: PodDeviceRequests,
    policy: PodPolicy = _DEFAULT_POLICY,
    *,
    quota: Mapping[str, VendorQuota] | None = None,
    selectors: Mapping[str, DeviceSelectors] | None = None,
    vendor: VendorPodFacts = NO_POD_FACTS,
    sgpu_state: SgpuStateLookup | None = None,
) -> PodPlan:
    """A plan from parsed requests and policy annotations.

    ``policy`` carries the NVIDIA selectors (``nvidia.com/use-gputype`` ...); other vendors'
    selectors, parsed with their own :class:`~hami_protocol.pod.policy.SelectorKeys`, can be given
    in
    ``selectors`` (which also overrides NVIDIA's when it names it).
    """
    chosen: dict[str, DeviceSelectors] = {NVIDIA: DeviceSelectors.from_policy(policy)}
    chosen.update(selectors or {})
    return PodPlan(
        requests=requests,
        gpu_policy=policy.gpu_policy,
        node_policy=policy.node_policy,
        weights=policy.scoring_weights,
        selectors=tuple(
            sorted(((w, s) for w, s in chosen.items() if s != NO_SELECTORS), key=_word)
        ),
        quota=tuple(sorted((quota or {}).items(), key=_word)),
        vendor=vendor,
        sgpu_state=sgpu_state,
    )
