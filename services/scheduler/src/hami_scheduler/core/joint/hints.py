"""What a pod asks of RDMA NICs and of GPU/NIC locality, read into one :class:`JointRequest`.

Sources: each container's ``koordinator.sh/rdma`` quantity, and the pod annotations
``scheduling.koordinator.sh/device-joint-allocate``, ``…/device-allocate-hint`` and (as a
designation of VFs, when the pod already carries one) ``…/device-allocated``.  GPUs themselves
are HAMi's requests (:class:`~hami_scheduler.core.plan.PodPlan`); the hints only constrain where
they go.

**RDMA normalisation** (contracts/koordinator.md §1.6), per container asking ``q`` units:

1. ``q > 100``: ``q`` must be a multiple of 100 → ``q/100`` NICs of 100 units each.  This wins
   over every hint.
2. ``allocateStrategy: ApplyForAll`` → every NIC of the node matching ``selector``, ``q`` units
   each (the count is the node's, resolved at placement).
3. ``allocateStrategy: RequestsAsCount`` → ``q`` distinct NICs, 1 unit each.
4. otherwise one NIC with ``q`` units.

``exclusivePolicy: DeviceLevel`` makes every NIC a whole one (100 units) in all four cases; in
Koordinator it acts only under ``RequestsAsCount`` (koordinator.md §3.3), while our protocol
document promises "whole devices only".  Any ``vfSelector`` (``{}`` included) means each NIC is
given as one of its VFs.

**Joint allocation** runs when, after dropping the listed types the pod requests none of and the
type whose hint says ``ApplyForAll``, both ``gpu`` and ``rdma`` remain.  The order of
``deviceTypes`` does not matter here: GPUs and NICs are searched together.

**Refused input** (raised as :class:`~hami_protocol.errors.ProtocolError`, naming the annotation
or resource): the strict parsers' errors; on the ``gpu`` hint a ``vfSelector``, an
``allocateStrategy``, ``exclusivePolicy: DeviceLevel`` or a ``selector`` that matches no GPU
(GPUs carry no labels here); ``fpga`` joined with other types while the pod requests FPGAs
(none are scheduled here); Koordinator's own GPU resources (``koordinator.sh/gpu-core`` …); a
``koordinator.sh/rdma`` quantity that is not a whole number, or is above 100 and not a multiple
of 100.  Reasons that depend on the node (a selector matching no NIC, no VFs, no scope holding
the GPUs) come back from :func:`~hami_scheduler.core.joint.decide.decide_joint` as the node's
reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from hami_protocol import keys
from hami_protocol.errors import ProtocolError, RequestError, ValidationError
from hami_protocol.request.containers import pod_containers
from hami_protocol.request.quantity import as_integer, parse_quantity
from hami_protocol.selectors import LabelSelector
from hami_protocol.topology.koordinator import (
    DEVICE_TYPE_FPGA,
    DEVICE_TYPE_GPU,
    DEVICE_TYPE_RDMA,
    AllocateStrategy,
    DeviceAllocateHints,
    DeviceHint,
    ExclusivePolicy,
    JointScope,
    TopologyScope,
    decode_device_allocated,
    parse_device_allocate_hints,
    parse_device_joint_allocate,
)
from hami_protocol.topology.layout import RDMA_RESOURCE, normalize_pci_bus_id
from hami_scheduler.core.joint.nics import RDMA_UNITS_PER_NIC
from hami_scheduler.core.plan import PodPlan

__all__ = [
    "FPGA_RESOURCE",
    "KOORD_GPU_CORE",
    "KOORD_GPU_MEMORY",
    "KOORD_GPU_MEMORY_RATIO",
    "KOORD_GPU_RESOURCES",
    "NO_JOINT",
    "RDMA_RESOURCE",
    "JointRequest",
    "KoordRequests",
    "NicDemand",
    "joint_request_of_pod",
    "koord_requests",
    "normalise_rdma",
    "read_joint_request",
]

FPGA_RESOURCE: Final = "koordinator.sh/fpga"
KOORD_GPU_CORE: Final = "koordinator.sh/gpu-core"
KOORD_GPU_MEMORY: Final = "koordinator.sh/gpu-memory"
KOORD_GPU_MEMORY_RATIO: Final = "koordinator.sh/gpu-memory-ratio"
KOORD_GPU_RESOURCES: Final = (
    "koordinator.sh/gpu",
    "koordinator.sh/gpu.shared",
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
)
_HINT: Final = keys.KOORD_DEVICE_ALLOCATE_HINT
_JOINT: Final = keys.KOORD_DEVICE_JOINT_ALLOCATE


@dataclass(frozen=True, slots=True)
class NicDemand:
    """One container's RDMA demand after normalisation."""

    quantity: int
    """``koordinator.sh/rdma`` as the container asks it."""
    count: int
    """Distinct NICs wanted; 0 with :attr:`apply_for_all` (every matching NIC of the node)."""
    units: int
    """Units taken on each NIC."""
    apply_for_all: bool = False


def normalise_rdma(quantity: int, hint: DeviceHint | None = None) -> NicDemand | None:
    """The demand for ``koordinator.sh/rdma: quantity`` under ``hint`` (None for 0)."""
    if quantity <= 0:
        return None
    whole = hint is not None and hint.exclusive_policy is ExclusivePolicy.DEVICE_LEVEL
    if quantity > RDMA_UNITS_PER_NIC:
        if quantity % RDMA_UNITS_PER_NIC:
            raise RequestError(
                RDMA_RESOURCE,
                quantity,
                "above 100 the RDMA request must be a multiple of 100 (100 units = one whole NIC)",
            )
        return NicDemand(quantity, quantity // RDMA_UNITS_PER_NIC, RDMA_UNITS_PER_NIC)
    strategy = None if hint is None else hint.allocate_strategy
    units = RDMA_UNITS_PER_NIC if whole else quantity
    if strategy is AllocateStrategy.APPLY_FOR_ALL:
        return NicDemand(quantity, 0, units, apply_for_all=True)
    if strategy is AllocateStrategy.REQUESTS_AS_COUNT:
        return NicDemand(quantity, quantity, RDMA_UNITS_PER_NIC if whole else 1)
    return NicDemand(quantity, 1, units)


@dataclass(frozen=True, slots=True)
class JointRequest:
    """The pod's NIC demands and locality constraints, beyond HAMi's GPU requests."""

    rdma: tuple[NicDemand | None, ...] = ()
    """One entry per container slot of the plan (init containers first); None: no NICs."""
    joint: bool = False
    """GPUs and NICs are placed together (device-joint-allocate with both types active)."""
    same_pcie: bool = False
    """``requiredScope: SamePCIe``: the pod's GPU switches and NIC switches must be equal."""
    nic_selector: LabelSelector | None = None
    vf_selector: LabelSelector | None = None
    """Set: every NIC is given as one VF from a group whose labels match."""
    nic_exclusive_pcie: bool = False
    gpu_exclusive_pcie: bool = False
    gpu_scope: TopologyScope | None = None
    """The gpu hint's ``requiredTopologyScope``."""
    designated_vfs: frozenset[str] = frozenset()
    """VFs the pod already names (its own ``device-allocated``): a NIC owning one of them gives
    only those."""

    @property
    def wants_nics(self) -> bool:
        return any(demand is not None for demand in self.rdma)

    @property
    def must_vf(self) -> bool:
        return self.vf_selector is not None

    @property
    def plain(self) -> bool:
        """Nothing beyond HAMi's GPU fit (only other pods' exclusive claims can still matter)."""
        return not (self.wants_nics or self.gpu_exclusive_pcie or self.gpu_scope is not None)

    def demand(self, slot: int) -> NicDemand | None:
        return self.rdma[slot] if slot < len(self.rdma) else None


NO_JOINT: Final = JointRequest()


@dataclass(frozen=True, slots=True)
class KoordRequests:
    """The Koordinator device resources of a pod's containers (init containers first)."""

    rdma: tuple[int, ...] = ()
    fpga: bool = False


def _quantity(container: Mapping[str, object], name: str) -> tuple[str, object] | None:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, Mapping) and values.get(name) is not None:
            return section, values[name]
    return None


def _whole(name: str, raw: object, where: str) -> int:
    if isinstance(raw, bool):
        raise RequestError(name, raw, f"quantity must be a string or a number ({where})")
    if isinstance(raw, int):
        value = Fraction(raw)
    elif isinstance(raw, str):
        value = parse_quantity(raw, key=name)
    else:
        raise RequestError(name, raw, f"quantity must be a string or a number ({where})")
    number = as_integer(value)
    if number is None or number < 0:
        raise RequestError(name, raw, f"must be a whole number of units, at least 0 ({where})")
    return number


def koord_requests(pod: Mapping[str, object]) -> KoordRequests:
    """``koordinator.sh/rdma`` per container (limits, else requests) and whether FPGAs are asked.

    Raises :class:`RequestError` for Koordinator's GPU resources (HAMi's vendor resources ask
    for GPUs here) and for an RDMA quantity that is not a whole number.
    """
    rdma: list[int] = []
    fpga = False
    for _, container in pod_containers(pod):
        name = container.get("name", "")
        for resource in KOORD_GPU_RESOURCES:
            found = _quantity(container, resource)
            if found is not None:
                raise RequestError(
                    resource,
                    found[1],
                    f"container {name!r}: Koordinator's GPU resources are not scheduled here; "
                    "ask for GPUs with the vendor resources (nvidia.com/gpu, nvidia.com/gpumem, "
                    "nvidia.com/gpucores)",
                )
        found = _quantity(container, RDMA_RESOURCE)
        where = f"container {name!r}"
        rdma.append(0 if found is None else _whole(RDMA_RESOURCE, found[1], where))
        fpga = fpga or _quantity(container, FPGA_RESOURCE) is not None
    return KoordRequests(tuple(rdma), fpga)


def _check_gpu_hint(hint: DeviceHint) -> None:
    if hint.vf_selector is not None:
        raise ValidationError(_HINT, "gpu.vfSelector", "gpu: vfSelector applies to rdma only")
    if hint.allocate_strategy is not None:
        raise ValidationError(
            _HINT,
            hint.allocate_strategy.value,
            "gpu.allocateStrategy is not supported: GPU counts come from the GPU resources",
        )
    if hint.exclusive_policy is ExclusivePolicy.DEVICE_LEVEL:
        raise ValidationError(
            _HINT,
            hint.exclusive_policy.value,
            "gpu.exclusivePolicy DeviceLevel is not supported: ask for whole GPUs with "
            "nvidia.com/gpucores: 100",
        )
    if hint.selector is not None and not hint.selector.matches({}):
        raise ValidationError(
            _HINT, "gpu.selector", "gpu.selector matches no GPU: GPUs carry no labels here"
        )


def _designated(text: str | None) -> frozenset[str]:
    """VF bus ids the pod's own ``device-allocated`` names (garbage there designates nothing)."""
    if not text:
        return frozenset()
    try:
        allocations = decode_device_allocated(text)
    except ProtocolError:
        return frozenset()
    found: set[str] = set()
    for allocation in allocations.get(DEVICE_TYPE_RDMA, ()):
        vfs = () if allocation.extension is None else allocation.extension.vfs
        for vf in vfs:
            try:
                found.add(normalize_pci_bus_id(vf.bus_id))
            except ProtocolError:
                continue
    return frozenset(found)


def read_joint_request(
    plan: PodPlan,
    annotations: Mapping[str, str],
    koord: KoordRequests = KoordRequests(),
    *,
    honour_designated: bool = True,
) -> JointRequest:
    """Read the pod's Koordinator annotations against its requests (see the module doc).

    ``koord.rdma`` is aligned with ``plan.requests.slots`` (missing trailing entries are 0).
    Raises :class:`~hami_protocol.errors.ProtocolError` naming the annotation or resource.
    """
    slots = len(plan.requests.slots)
    if len(koord.rdma) > slots:
        raise ValueError(f"{len(koord.rdma)} RDMA quantities for {slots} container slots")
    hints = DeviceAllocateHints()
    if annotations.get(_HINT) is not None:
        hints = parse_device_allocate_hints(annotations[_HINT])
    rdma_hint = hints.get(DEVICE_TYPE_RDMA)
    gpu_hint = hints.get(DEVICE_TYPE_GPU)
    if gpu_hint is not None:
        _check_gpu_hint(gpu_hint)
    quantities = (*koord.rdma, *(0,) * (slots - len(koord.rdma)))
    demands = tuple(normalise_rdma(q, rdma_hint) for q in quantities)
    wants_nics = any(d is not None for d in demands)
    requested = {
        DEVICE_TYPE_GPU: plan.requests.has_requests,
        DEVICE_TYPE_RDMA: wants_nics
        and (
            rdma_hint is None or rdma_hint.allocate_strategy is not AllocateStrategy.APPLY_FOR_ALL
        ),
        DEVICE_TYPE_FPGA: koord.fpga,
    }
    joint_types: tuple[str, ...] = ()
    same_pcie = False
    if annotations.get(_JOINT) is not None:
        joint = parse_device_joint_allocate(annotations[_JOINT])
        joint_types = tuple(kind for kind in joint.device_types if requested[kind])
        same_pcie = joint.required_scope is JointScope.SAME_PCIE
        if DEVICE_TYPE_FPGA in joint_types and len(joint_types) > 1:
            raise ValidationError(
                _JOINT,
                "fpga",
                "deviceTypes: FPGAs are not scheduled here, so fpga cannot be joined",
            )
    active = DEVICE_TYPE_GPU in joint_types and DEVICE_TYPE_RDMA in joint_types
    nic_hint = rdma_hint or DeviceHint()
    gpu_pcie = gpu_hint is not None and gpu_hint.exclusive_policy is ExclusivePolicy.PCIE_LEVEL
    return JointRequest(
        rdma=demands,
        joint=active,
        same_pcie=active and same_pcie,
        nic_selector=nic_hint.selector if wants_nics else None,
        vf_selector=nic_hint.vf_selector if wants_nics else None,
        nic_exclusive_pcie=wants_nics and nic_hint.exclusive_policy is ExclusivePolicy.PCIE_LEVEL,
        gpu_exclusive_pcie=plan.requests.has_requests and gpu_pcie,
        gpu_scope=(
            gpu_hint.required_topology_scope
            if gpu_hint is not None and plan.requests.has_requests
            else None
        ),
        designated_vfs=(
            _designated(annotations.get(keys.KOORD_DEVICE_ALLOCATED))
            if honour_designated and wants_nics
            else frozenset()
        ),
    )


def joint_request_of_pod(
    pod: Mapping[str, object], plan: PodPlan, *, honour_designated: bool = True
) -> JointRequest:
    """:func:`read_joint_request` for plain pod JSON (``metadata.annotations``, containers)."""
    metadata = pod.get("metadata")
    raw = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    annotations: Mapping[str, str] = (
        {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(raw, Mapping)
        else {}
    )
    return read_joint_request(
        plan, annotations, koord_requests(pod), honour_designated=honour_designated
    )
