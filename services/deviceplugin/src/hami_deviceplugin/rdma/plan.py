"""Pure: from a pod's RDMA annotation and the kubelet's request to the container's device specs.

The RDMA plugin's kubelet devices are interchangeable units (100 per NIC); the kubelet picks any
of them.  What a container really gets is the next entry of ``hami.io/rdma-devices-to-allocate``
that still holds devices (one entry per container, init containers first), written by the
scheduler: each device is a PF or VF bus id in list form (``0000_1f_00.2,RDMA,0,0``).

The answer, per container:

* device spec ``/dev/infiniband/uverbs<N>`` for each listed function, the VF's own uverbs device
  for a VF, the PF's for a whole NIC (each once, in list order);
* device spec ``/dev/infiniband/rdma_cm``;

all with permissions ``rw``.

The kubelet's devices are ``<PF bus id>-<i>``, 100 per NIC; which NIC a unit belongs to is the
only meaning they carry.  For the identity rule (:func:`rdma_device_list`) an entry serves a
request when every unit the kubelet chose belongs to a NIC of the entry (:func:`rdma_mismatch`);
``GetPreferredAllocation`` steers the kubelet to such units (:func:`preferred_units`: the
entry's units per NIC where it names them, else the entry's NICs in turn).

Checks, each an :class:`~hami_deviceplugin.errors.AllocateError`
with the reason: the pod belongs to this node and has not failed; an entry is waiting; the entry's
container asks for the RDMA resource, as many units as the kubelet asked for ("device number not
matched" otherwise: the list and the containers are out of step); every device is an ``RDMA``
entry naming a PF or VF of this node, none twice; every function has a uverbs device.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from hami_deviceplugin.allocation.entries import (
    AllocatingContainer,
    AllocatingPod,
    ContainerTurn,
    ListPlan,
    check_pod,
    consume_entries,
    decode_entries,
)
from hami_deviceplugin.allocation.identity import DeviceList, Mismatch
from hami_deviceplugin.allocation.pending import RDMA_DEVICE_TYPE
from hami_deviceplugin.errors import AllocateError, FailureKind, invalid
from hami_deviceplugin.rdma.nics import RDMA_CM_DEVICE, NicFunction
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import RDMA_DEVICES_TO_ALLOCATE
from hami_protocol.pod.devices import ContainerDevices, PodSingleDevice
from hami_protocol.request.quantity import as_integer, parse_quantity
from hami_protocol.topology.layout import bus_id_from_list_device_id

__all__ = [
    "DEVICE_PERMISSIONS",
    "DeviceSpec",
    "RdmaGrant",
    "RdmaPlan",
    "device_specs",
    "entry_nics",
    "plan_rdma_allocation",
    "preferred_units",
    "rdma_device_list",
    "rdma_mismatch",
    "unit_nic",
]

DEVICE_PERMISSIONS: Final = "rw"
_DEV_DIR: Final = "/dev/infiniband"


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    container_path: str
    host_path: str
    permissions: str = DEVICE_PERMISSIONS


@dataclass(frozen=True, slots=True)
class RdmaGrant:
    container_index: int
    container_name: str
    functions: tuple[NicFunction, ...]
    devices: tuple[DeviceSpec, ...]


RdmaPlan: TypeAlias = ListPlan[RdmaGrant]
"""The RDMA plugin's decision for one Allocate call."""


def _requested_units(container: AllocatingContainer, resource: str) -> int | None:
    """The container's whole-number limit for ``resource``; None when absent or unreadable."""
    text = container.limit(resource)
    if text is None:
        return None
    try:
        return as_integer(parse_quantity(text, key=resource))
    except ProtocolError:
        return None


def _check_count(container: AllocatingContainer, units: int, devices: int, resource: str) -> None:
    if container.limit(resource) is None:
        raise invalid(
            f"device number not matched: container {container.name!r} asks for no {resource}, "
            f"but its {RDMA_DEVICES_TO_ALLOCATE} entry lists {devices} device(s)"
        )
    asked = _requested_units(container, resource)
    if asked is not None and asked != units:
        raise invalid(
            f"device number not matched: kubelet asked for {units} {resource} unit(s), "
            f"container {container.name!r} requests {asked}"
        )


def _functions(
    devices: ContainerDevices, functions: Mapping[str, NicFunction], node_name: str
) -> tuple[NicFunction, ...]:
    chosen: list[NicFunction] = []
    for device in devices:
        if device.type != RDMA_DEVICE_TYPE:
            raise invalid(
                f"{RDMA_DEVICES_TO_ALLOCATE}: device {device.uuid!r} has type {device.type!r}, "
                f"expected {RDMA_DEVICE_TYPE!r}"
            )
        try:
            bus_id = bus_id_from_list_device_id(device.uuid, annotation=RDMA_DEVICES_TO_ALLOCATE)
        except ProtocolError as exc:
            raise invalid(str(exc)) from None
        function = functions.get(bus_id)
        if function is None:
            raise invalid(f"{bus_id} is not an RDMA NIC or VF of node {node_name}")
        if function in chosen:
            raise invalid(f"{RDMA_DEVICES_TO_ALLOCATE}: {bus_id} is listed twice")
        if not function.uverbs:
            what = f"VF {bus_id}" if function.is_vf else "the physical function"
            raise AllocateError(
                FailureKind.HOST,
                f"RDMA NIC {function.nic_id} ({function.nic_name}): {what} has no uverbs device",
            )
        chosen.append(function)
    return tuple(chosen)


def device_specs(functions: Sequence[NicFunction]) -> tuple[DeviceSpec, ...]:
    """uverbs devices (each once, in order) and ``rdma_cm``."""
    paths = list(dict.fromkeys(f"{_DEV_DIR}/{function.uverbs}" for function in functions))
    paths.append(RDMA_CM_DEVICE)
    return tuple(DeviceSpec(path, path) for path in paths)


def plan_rdma_allocation(
    pod: AllocatingPod,
    requests: Sequence[Sequence[str]],
    *,
    functions: Mapping[str, NicFunction],
    resource_name: str,
    node_name: str,
) -> RdmaPlan:
    """Serve ``requests`` (one list of kubelet device IDs per container) from ``pod``.

    ``functions`` are this node's PFs and VFs by bus id; ``resource_name`` is the RDMA resource
    the kubelet allocates (``koordinator.sh/rdma``).
    """
    check_pod(pod, node_name)

    def grant(turn: ContainerTurn) -> RdmaGrant:
        _check_count(turn.container, len(turn.requested), len(turn.devices), resource_name)
        chosen = _functions(turn.devices, functions, node_name)
        return RdmaGrant(turn.index, turn.container.name, chosen, device_specs(chosen))

    return consume_entries(
        pod,
        requests,
        key=RDMA_DEVICES_TO_ALLOCATE,
        entries=decode_entries(pod, RDMA_DEVICES_TO_ALLOCATE),
        waiting_for="RDMA devices",
        grant=grant,
    )


# --- identity -----------------------------------------------------------------------------------


def unit_nic(unit: str) -> str:
    """The NIC (PF bus id) of a kubelet device ``<PF bus id>-<i>``."""
    return unit.rpartition("-")[0] or unit


def entry_nics(entry: ContainerDevices, functions: Mapping[str, NicFunction]) -> tuple[str, ...]:
    """The NIC of each device of ``entry`` (its own id when it is not a function of this
    node)."""
    nics: list[str] = []
    for device in entry:
        try:
            bus_id = bus_id_from_list_device_id(device.uuid, annotation=RDMA_DEVICES_TO_ALLOCATE)
        except ProtocolError:
            nics.append(device.uuid)
            continue
        function = functions.get(bus_id)
        nics.append(bus_id if function is None else function.nic_id)
    return tuple(nics)


def rdma_mismatch(
    entry: ContainerDevices,
    units: Sequence[str],
    reused: frozenset[str],
    *,
    functions: Mapping[str, NicFunction],
) -> Mismatch | None:
    """Whether every unit the kubelet chose (but ``reused`` ones) belongs to a NIC of
    ``entry``.  An entry naming a device this node does not have is the plan's to report."""
    nics = entry_nics(entry, functions)
    if any(nic not in functions for nic in nics):
        return None
    given = tuple(dict.fromkeys(nics))
    if {unit_nic(unit) for unit in units if unit not in reused} <= set(given):
        return None
    return Mismatch(chosen=tuple(dict.fromkeys(unit_nic(unit) for unit in units)), given=given)


def rdma_device_list(resource: str, functions: Mapping[str, NicFunction]) -> DeviceList:
    """The RDMA plugin's list for :mod:`~hami_deviceplugin.allocation.identity`."""

    def match(
        entry: ContainerDevices, ids: Sequence[str], reused: frozenset[str]
    ) -> Mismatch | None:
        return rdma_mismatch(entry, ids, reused, functions=functions)

    def decode(pod: AllocatingPod) -> PodSingleDevice:
        return decode_entries(pod, RDMA_DEVICES_TO_ALLOCATE)

    return DeviceList(
        resource=resource,
        key=RDMA_DEVICES_TO_ALLOCATE,
        noun="RDMA NICs",
        decode=decode,
        match=match,
    )


def preferred_units(
    entry: ContainerDevices,
    *,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    functions: Mapping[str, NicFunction],
) -> tuple[str, ...]:
    """Units of the entry's NICs: as many of each as the entry charges it (``usedmem``), the
    rest from the entry's NICs in turn, then the kubelet's order."""
    chosen = list(dict.fromkeys(must_include))[:size]
    taken = set(chosen)
    nics = entry_nics(entry, functions)
    wanted: Counter[str] = Counter()
    for nic, device in zip(nics, entry, strict=True):
        wanted[nic] += max(device.usedmem, 0)
    wanted.subtract(unit_nic(unit) for unit in chosen)
    spare: dict[str, list[str]] = {}
    for unit in available:
        if unit not in taken:
            spare.setdefault(unit_nic(unit), []).append(unit)

    def take(nic: str) -> bool:
        units = spare.get(nic)
        if not units or len(chosen) >= size:
            return False
        unit = units.pop(0)
        chosen.append(unit)
        taken.add(unit)
        return True

    order = tuple(dict.fromkeys(nics))
    for nic in order:
        while wanted[nic] > 0 and take(nic):
            wanted[nic] -= 1
    progress = True
    while progress and len(chosen) < size:
        took = [take(nic) for nic in order]  # one unit of each NIC per round
        progress = any(took)
    chosen.extend(unit for unit in available if unit not in taken)
    return tuple(chosen[:size])
