"""A joint decision as pod annotations, and a pod's NIC usage read back from its annotations.

Written for a placed pod (:func:`joint_annotations`):

* ``hami.io/rdma-devices-to-allocate`` and ``hami.io/rdma-devices-allocated`` (same value): HAMi's
  pod device-list format, one segment per container (init containers first), each NIC as
  ``<list_device_id(bus id)>,RDMA,<units>,0:`` — the bus id is the VF's when the container gets a
  VF, else the PF's (colons become underscores,
  :func:`~hami_protocol.topology.layout.list_device_id`);
  ``usedmem`` carries the ``koordinator.sh/rdma`` units taken on that NIC and ``usedcores`` is 0.
  The device plugin reads only the id and the type.
* ``scheduling.koordinator.sh/device-allocated``: Koordinator's allocation JSON for tools that read
  it.  ``gpu`` entries: ``minor`` = device index, ``id`` = UUID, resources
  ``koordinator.sh/gpu-core`` (cores), ``koordinator.sh/gpu-memory`` (``<MiB>Mi``) and
  ``koordinator.sh/gpu-memory-ratio`` (memory × 100 / device memory, truncated), per GPU summed
  over the pod as the usage caches sum it.  ``rdma`` entries: ``minor`` = NIC minor, ``id`` = PF
  bus id, ``koordinator.sh/rdma`` units, and the VFs in ``extension.vfs``.

Read back (:func:`nic_usage_from_annotations`): the RDMA list (``-allocated``) when present, else
``device-allocated``'s ``rdma`` entries (pods placed by a Koordinator-style writer).  Units per NIC
follow HAMi's rule for init containers (peak of the init containers against the sum of the app
containers); every VF named is taken.  Exclusive claims are not stored in any annotation of their
own: they follow from the pod's ``device-allocate-hint`` (``exclusivePolicy: PCIeLevel``) and the
devices it holds, so a rebuilt cache claims exactly what the decision claimed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.pod.devices import (
    ContainerDevice,
    PodSingleDevice,
    collapse_device_usage,
    decode_pod_devices_canonical,
    encode_pod_devices,
)
from hami_protocol.request.quantity import parse_quantity, to_int_ceil
from hami_protocol.topology.koordinator import (
    DEVICE_TYPE_GPU,
    DEVICE_TYPE_RDMA,
    AllocatedVF,
    DeviceAllocation,
    DeviceAllocationExtension,
    ExclusivePolicy,
    decode_device_allocated,
    encode_device_allocated,
    parse_device_allocate_hints,
)
from hami_protocol.topology.layout import (
    RDMA_DEVICE_TYPE,
    bus_id_from_list_device_id,
    list_device_id,
    normalize_pci_bus_id,
)
from hami_scheduler.core.decide import decision_usage
from hami_scheduler.core.joint.decide import JointDecision
from hami_scheduler.core.joint.hints import (
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
    RDMA_RESOURCE,
    JointRequest,
)
from hami_scheduler.core.joint.nicfit import PodNics
from hami_scheduler.core.joint.nics import Claim, NicHold, NicLayout, NicPodUsage
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.usage.node import NodeUsage

__all__ = [
    "RDMA_DEVICE_TYPE",
    "decision_nic_usage",
    "device_allocations",
    "joint_annotations",
    "nic_pod_usage",
    "nic_usage_from_annotations",
    "rdma_pod_devices",
]

"""The type word of every entry of ``hami.io/rdma-devices-…``."""


def rdma_pod_devices(nics: PodNics) -> PodSingleDevice:
    """The RDMA device list of a decision, one segment per container slot."""
    return tuple(
        tuple(
            ContainerDevice(list_device_id(grant.bus_id), RDMA_DEVICE_TYPE, grant.units, 0)
            for grant in grants
        )
        for grants in nics
    )


def _counted(index: int, init_count: int, sidecars: frozenset[int], init_finished: bool) -> bool:
    return not init_finished or index >= init_count or index in sidecars


def nic_pod_usage(
    rdma: PodSingleDevice,
    *,
    layout: NicLayout,
    init_count: int,
    sidecars: frozenset[int] = frozenset(),
    init_finished: bool = False,
    claims: Iterable[Claim] = (),
) -> NicPodUsage:
    """What a pod's RDMA device list holds on the node's NICs.

    Entries that are not ``RDMA`` or name no PF or VF of ``layout`` are skipped (a NIC that left
    the register holds nothing any more).
    """
    per_nic: list[tuple[ContainerDevice, ...]] = []
    vfs: dict[str, set[str]] = {}
    for index, container in enumerate(rdma):
        converted: list[ContainerDevice] = []
        for device in container:
            if device.type != RDMA_DEVICE_TYPE:
                continue
            try:
                bus_id = bus_id_from_list_device_id(device.uuid)
            except ProtocolError:
                continue
            position = layout.owner(bus_id)
            if position is None:
                continue
            pf = layout.nics[position].id
            converted.append(ContainerDevice(pf, RDMA_DEVICE_TYPE, device.usedmem, 0))
            if bus_id != pf and _counted(index, init_count, sidecars, init_finished):
                vfs.setdefault(pf, set()).add(bus_id)
        per_nic.append(tuple(converted))
    summaries = collapse_device_usage(
        tuple(per_nic), init_count=init_count, sidecars=sidecars, init_finished=init_finished
    )
    holds = tuple(
        NicHold(summary.uuid, summary.usedmem, tuple(sorted(vfs.get(summary.uuid, ()))))
        for summary in summaries
    )
    return NicPodUsage(holds=holds, claims=tuple(sorted(set(claims))))


def decision_nic_usage(decision: JointDecision, *, layout: NicLayout, plan: PodPlan) -> NicPodUsage:
    """What a placed decision holds (what the caches apply once the annotations are written)."""
    return nic_pod_usage(
        rdma_pod_devices(decision.nics),
        layout=layout,
        init_count=plan.requests.init_count,
        claims=decision.claims,
    )


def _holds_from_koordinator(text: str, layout: NicLayout) -> tuple[NicHold, ...]:
    by_minor = {nic.minor: nic.id for nic in layout.nics}
    holds: dict[str, NicHold] = {}
    for allocation in decode_device_allocated(text).get(DEVICE_TYPE_RDMA, ()):
        nic = by_minor.get(allocation.minor)
        if allocation.id:
            try:
                nic = normalize_pci_bus_id(allocation.id)
            except ProtocolError:
                nic = None
        if nic is None or nic not in layout.positions:
            continue
        raw = allocation.resources.get(RDMA_RESOURCE, "0")
        units = max(to_int_ceil(parse_quantity(raw, key=keys.KOORD_DEVICE_ALLOCATED)), 0)
        found: set[str] = set()
        for vf in () if allocation.extension is None else allocation.extension.vfs:
            try:
                found.add(normalize_pci_bus_id(vf.bus_id))
            except ProtocolError:
                continue
        earlier = holds.get(nic, NicHold(nic, 0))
        vfs = tuple(sorted(set(earlier.vfs) | found))
        holds[nic] = NicHold(nic, earlier.units + units, vfs)
    return tuple(holds[nic] for nic in sorted(holds))


def _exclusive_types(annotations: Mapping[str, str]) -> frozenset[str]:
    text = annotations.get(keys.KOORD_DEVICE_ALLOCATE_HINT)
    if text is None:
        return frozenset()
    try:
        hints = parse_device_allocate_hints(text)
    except ProtocolError:
        return frozenset()
    return frozenset(
        kind for kind, hint in hints.hints if hint.exclusive_policy is ExclusivePolicy.PCIE_LEVEL
    )


def nic_usage_from_annotations(
    annotations: Mapping[str, str],
    *,
    layout: NicLayout,
    init_count: int,
    gpu_uuids: Iterable[str] = (),
    sidecars: frozenset[int] = frozenset(),
    init_finished: bool = False,
) -> NicPodUsage:
    """What a pod holds on the node's NICs, from its annotations (see the module doc).

    ``gpu_uuids`` are the GPUs the pod holds (from its GPU lists), needed for gpu claims.  Raises
    :class:`~hami_protocol.errors.ProtocolError` when the RDMA list or ``device-allocated`` does
    not decode.
    """
    exclusive = _exclusive_types(annotations)
    listed = annotations.get(keys.RDMA_DEVICES_ALLOCATED)
    if listed is not None:
        rdma = decode_pod_devices_canonical(listed, key=keys.RDMA_DEVICES_ALLOCATED)
        usage = nic_pod_usage(
            rdma,
            layout=layout,
            init_count=init_count,
            sidecars=sidecars,
            init_finished=init_finished,
        )
        holds = usage.holds
    elif annotations.get(keys.KOORD_DEVICE_ALLOCATED):
        holds = _holds_from_koordinator(annotations[keys.KOORD_DEVICE_ALLOCATED], layout)
    else:
        holds = ()
    claims: set[Claim] = set()
    if DEVICE_TYPE_RDMA in exclusive:
        claims.update((DEVICE_TYPE_RDMA, layout.scopes[layout.positions[h.nic]]) for h in holds)
    if DEVICE_TYPE_GPU in exclusive:
        claims.update((DEVICE_TYPE_GPU, layout.gpu_scope(uuid)) for uuid in gpu_uuids)
    return NicPodUsage(holds=holds, claims=tuple(sorted(claims)))


def device_allocations(
    decision: JointDecision, *, node: NodeUsage, layout: NicLayout, plan: PodPlan
) -> dict[str, tuple[DeviceAllocation, ...]]:
    """Koordinator's ``device-allocated`` content for a placed decision."""
    gpus: list[DeviceAllocation] = []
    for summary in decision_usage(decision.node_decision(), plan):
        device = node.device(summary.uuid)
        if device is None:
            continue
        ratio = summary.usedmem * 100 // device.totalmem if device.totalmem > 0 else 0
        resources = {
            KOORD_GPU_CORE: str(summary.usedcores),
            KOORD_GPU_MEMORY: f"{summary.usedmem}Mi",
            KOORD_GPU_MEMORY_RATIO: str(ratio),
        }
        gpus.append(DeviceAllocation(minor=device.index, resources=resources, id=summary.uuid))
    nics: list[DeviceAllocation] = []
    for hold in decision_nic_usage(decision, layout=layout, plan=plan).holds:
        nic = layout.nics[layout.positions[hold.nic]]
        minors = {vf.bus_id: vf.minor for vf in nic.vfs}
        vfs = tuple(AllocatedVF(bus_id=bus, minor=minors.get(bus, 0)) for bus in hold.vfs)
        nics.append(
            DeviceAllocation(
                minor=nic.minor,
                resources={RDMA_RESOURCE: str(hold.units)},
                id=nic.id,
                extension=DeviceAllocationExtension(vfs=vfs) if vfs else None,
            )
        )
    result: dict[str, tuple[DeviceAllocation, ...]] = {}
    if gpus:
        result[DEVICE_TYPE_GPU] = tuple(sorted(gpus, key=lambda a: (a.minor, a.id)))
    if nics:
        result[DEVICE_TYPE_RDMA] = tuple(sorted(nics, key=lambda a: (a.minor, a.id)))
    return result


def joint_annotations(
    decision: JointDecision,
    *,
    node: NodeUsage,
    layout: NicLayout,
    plan: PodPlan,
    request: JointRequest,
) -> dict[str, str]:
    """The pod annotations for a placed decision, beyond HAMi's GPU lists (written as usual).

    RDMA lists when any container got NICs; ``device-allocated`` when the pod used any
    Koordinator request (NICs, joint allocation, a gpu hint).
    """
    if not decision.fits:
        raise ValueError("joint_annotations needs a decision that fits")
    out: dict[str, str] = {}
    if any(decision.nics):
        value = encode_pod_devices(rdma_pod_devices(decision.nics))
        out[keys.RDMA_DEVICES_TO_ALLOCATE] = value
        out[keys.RDMA_DEVICES_ALLOCATED] = value
    if not request.plain or request.joint:
        allocations = device_allocations(decision, node=node, layout=layout, plan=plan)
        if allocations:
            out[keys.KOORD_DEVICE_ALLOCATED] = encode_device_allocated(allocations)
    return out
