"""What each container of a pod asks of each device vendor, by HAMi's request rules.

Input is plain pod JSON (a mapping shaped like a Kubernetes Pod); output is one
:class:`ContainerSlot` per container — init containers first, then regular containers, each in
spec order — holding a :class:`ContainerDeviceRequest` per vendor the container asks for.

Rules, for every vendor row (see :mod:`hami_protocol.vendor.table`):

* Each resource is read from ``resources.limits`` and, when absent there, from
  ``resources.requests`` (AMD reads limits only).
* The count must be a whole number in 1..2³¹−1, else the container makes no request of that
  vendor (``0`` is simply "no devices"; ``1.5``, ``500m`` or a negative count are ignored, as
  HAMi ignores them).
* Memory is a whole number of the vendor's unit (MiB for NVIDIA), multiplied by the unit size and
  ``memoryFactor``; if it is not a whole number, is negative, or the product exceeds 2³¹−1 MiB, the
  **whole request is dropped** (no request of that vendor) — so ``nvidia.com/gpumem: 16Gi``
  (17179869184 "MiB") yields no NVIDIA request, exactly as in HAMi.
* Memory percentage (NVIDIA): above 100 clamps to 100, 0 or below means unset; a value that is
  not a whole number is ignored.  :data:`PERCENTAGE_UNSET` (101) marks "unset".
* Neither memory nor percentage: ``defaultMemory`` MiB if configured, else 100 %.
* Cores: the vendor default (NVIDIA ``defaultCores``; MLU, DCU, AMD, MetaX GPU 100; others 0)
  unless given; a non-whole value is ignored, a negative or >2³¹−1 value drops the request.  The
  raw value is kept: clamping to 100 is the fit's job.

Vendors whose requests HAMi shapes differently (:data:`TRIGGERS` and :func:`_normalised`):

* AWS Neuron (``AWSNeuron``): ``aws.amazon.com/neuron: n`` asks ``n`` whole devices (cores 0:
  every core of each); ``aws.amazon.com/neuroncore: c`` alone asks one device and ``c`` cores
  when ``c`` ≤ 2 (HAMi's cores per device, cached from its first node; 2 on every Trainium and
  Inferentia2), else ``ceil(c / 2)`` whole devices; no memory.
* Enflame DRS (``Enflame``): one GCU always; ``enflame.com/drs-gcu: S`` asks the profile of ``S``
  slices (``memreq`` S, percentage 0: *direct*), else ``enflame.com/gcu-memory`` (GB) and
  ``enflame.com/gcu-core`` (percent) ask the first profile covering both (percentage −1:
  *spec*).
* Kunlun vXPU (``XPU``): cores = ``memory × 100 / 98304`` (a whole XPU's share); no memory asks a
  whole XPU (98304 MiB, 100 cores).

Values are compared as exact numbers, not spellings, because the API server stores quantities in
canonical form (``2000m`` becomes ``2``).  :class:`RequestError` is raised only for input that is
not a pod at all: wrong JSON types, or a managed resource whose value is not a quantity.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Final

from hami_protocol.errors import RequestError
from hami_protocol.request.quantity import INT32_MAX, as_integer, json_quantity, to_int_ceil
from hami_protocol.vendor.table import Vendor

__all__ = [
    "FULL_PERCENTAGE",
    "PERCENTAGE_UNSET",
    "ContainerDeviceRequest",
    "ContainerSlot",
    "PodDeviceRequests",
    "container_mentions_vendor",
    "container_requests",
    "pod_containers",
    "pod_device_requests",
    "pod_mentions_managed_resources",
    "priority_value",
    "vendor_request",
]

PERCENTAGE_UNSET: Final = 101
FULL_PERCENTAGE: Final = 100


@dataclass(frozen=True, slots=True)
class ContainerDeviceRequest:
    """One container's request of one vendor (HAMi's ``ContainerDeviceRequest``)."""

    nums: int
    type: str
    """The vendor's common word."""
    memreq: int
    """MiB per device; 0 when the request is a percentage."""
    mem_percentagereq: int
    """Percent of each device's memory, or :data:`PERCENTAGE_UNSET`."""
    coresreq: int


@dataclass(frozen=True, slots=True)
class ContainerSlot:
    name: str
    is_init: bool
    requests: Mapping[str, ContainerDeviceRequest] = field(hash=False)
    """Vendor common word → request; only vendors with ``nums > 0``; read-only."""


@dataclass(frozen=True, slots=True)
class PodDeviceRequests:
    slots: tuple[ContainerSlot, ...]
    """Init containers first, then regular containers, each in spec order."""

    @property
    def has_requests(self) -> bool:
        return any(slot.requests for slot in self.slots)

    @property
    def init_count(self) -> int:
        return sum(1 for slot in self.slots if slot.is_init)

    def vendors(self) -> frozenset[str]:
        return frozenset(word for slot in self.slots for word in slot.requests)

    def for_vendor(self, word: str) -> tuple[ContainerDeviceRequest | None, ...]:
        """One entry per slot: that container's request of ``word``, or ``None``."""
        return tuple(slot.requests.get(word) for slot in self.slots)


_EMPTY: Final[Mapping[str, object]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _Resources:
    container: str
    limits: Mapping[str, object]
    requests: Mapping[str, object]


def _mapping(value: object, key: str, what: str) -> Mapping[str, object]:
    if type(value) is dict:  # decoded JSON: skip the slower ABC check
        return value
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise RequestError(key, value, f"{what} must be a JSON object")
    return value


def _resources(container: Mapping[str, object]) -> _Resources:
    name = container.get("name", "")
    if not isinstance(name, str):
        raise RequestError("name", name, "container name must be a string")
    resources = _mapping(container.get("resources"), "resources", f"container {name!r} resources")
    return _Resources(
        container=name,
        limits=_mapping(resources.get("limits"), "limits", f"container {name!r} limits"),
        requests=_mapping(resources.get("requests"), "requests", f"container {name!r} requests"),
    )


def _as_container(container: object) -> Mapping[str, object]:
    return _mapping(container, "container", "a container")


def _quantity(res: _Resources, name: str, *, limits_only: bool) -> Fraction | None:
    """The value of resource ``name`` (limits first, then requests), or ``None`` if absent."""
    section, raw = "limits", res.limits.get(name)
    if raw is None and not limits_only:
        section, raw = "requests", res.requests.get(name)
    if raw is None:
        return None
    try:
        return json_quantity(raw, key=name)
    except RequestError as exc:
        where = f"{exc.reason} (container {res.container!r}, {section})"
        raise RequestError(name, raw, where) from None


def _whole(res: _Resources, name: str | None, vendor: Vendor) -> tuple[bool, int | None]:
    """``(present, whole value or None)`` for an optional resource."""
    if name is None:
        return False, None
    value = _quantity(res, name, limits_only=vendor.limits_only)
    if value is None:
        return False, None
    return True, as_integer(value)


def _request(res: _Resources, vendor: Vendor) -> ContainerDeviceRequest | None:
    present, nums = _whole(res, vendor.count_resource, vendor)
    if not present or nums is None or not 0 < nums <= INT32_MAX:
        return None
    memreq = 0
    present, raw_mem = _whole(res, vendor.memory_resource, vendor)
    if present:
        scale = vendor.memory_scale
        if raw_mem is None or not 0 <= raw_mem <= INT32_MAX // scale:
            return None
        memreq = raw_mem * scale
    percentage = PERCENTAGE_UNSET
    _, raw_pct = _whole(res, vendor.memory_percentage_resource, vendor)
    if raw_pct is not None:
        percentage = min(raw_pct, FULL_PERCENTAGE) if raw_pct > 0 else PERCENTAGE_UNSET
    if percentage == PERCENTAGE_UNSET and memreq == 0:
        if vendor.default_memory:
            memreq = vendor.default_memory
        else:
            percentage = FULL_PERCENTAGE
    cores = vendor.default_cores
    _, raw_cores = _whole(res, vendor.cores_resource, vendor)
    if raw_cores is not None:
        if not 0 <= raw_cores <= INT32_MAX:
            return None
        cores = raw_cores
    return ContainerDeviceRequest(
        nums=nums,
        type=vendor.common_word,
        memreq=memreq,
        mem_percentagereq=percentage,
        coresreq=cores,
    )


AWS_NEURON: Final = "AWSNeuron"
ENFLAME_DRS: Final = "Enflame"
KUNLUN_VXPU: Final = "XPU"
AWS_CORES_PER_DEVICE: Final = 2
"""HAMi's NeuronCores per device when a request is parsed (it caches the first node's figure)."""
DRS_DIRECT: Final = 0
DRS_SPEC: Final = -1
XPU_MEMORY_MIB: Final = 98304


_MORE_TRIGGERS: Final = frozenset((AWS_NEURON, ENFLAME_DRS))
"""Vendors a container may ask without naming their count resource."""


def _triggers(vendor: Vendor) -> tuple[str, ...]:
    """The resources whose presence makes a container ask ``vendor``'s devices."""
    if vendor.common_word == AWS_NEURON:
        return tuple(name for name in (vendor.count_resource, vendor.cores_resource) if name)
    if vendor.common_word == ENFLAME_DRS:
        return tuple(name for name in (vendor.count_resource, vendor.memory_resource) if name)
    return (vendor.count_resource,)


def _awsneuron(res: _Resources, vendor: Vendor) -> ContainerDeviceRequest | None:
    present, devices = _whole(res, vendor.count_resource, vendor)
    if present:
        if devices is None or not 0 < devices <= INT32_MAX:
            return None
        return ContainerDeviceRequest(devices, vendor.common_word, 0, FULL_PERCENTAGE, 0)
    _, cores = _whole(res, vendor.cores_resource, vendor)
    if cores is None or not 0 < cores <= INT32_MAX:
        return None
    if cores <= AWS_CORES_PER_DEVICE:
        return ContainerDeviceRequest(1, vendor.common_word, 0, FULL_PERCENTAGE, cores)
    devices = -(-cores // AWS_CORES_PER_DEVICE)
    return ContainerDeviceRequest(devices, vendor.common_word, 0, FULL_PERCENTAGE, 0)


def _enflame_drs(res: _Resources, vendor: Vendor) -> ContainerDeviceRequest | None:
    present, slices = _whole(res, vendor.count_resource, vendor)
    if present:
        if slices is None or not 0 < slices <= INT32_MAX:
            return None
        return ContainerDeviceRequest(1, vendor.common_word, slices, DRS_DIRECT, 0)
    _, memory = _whole(res, vendor.memory_resource, vendor)
    if memory is None or not 0 < memory <= INT32_MAX:
        return None
    _, cores = _whole(res, vendor.cores_resource, vendor)
    if cores is not None and not 0 <= cores <= INT32_MAX:
        return None
    return ContainerDeviceRequest(1, vendor.common_word, memory, DRS_SPEC, cores or 0)


def _normalised(res: _Resources, vendor: Vendor) -> ContainerDeviceRequest | None:
    word = vendor.common_word
    if word == AWS_NEURON:
        return _awsneuron(res, vendor)
    if word == ENFLAME_DRS:
        return _enflame_drs(res, vendor)
    request = _request(res, vendor)
    if request is not None and word == KUNLUN_VXPU:
        memory = request.memreq if request.memreq > 0 else XPU_MEMORY_MIB
        return ContainerDeviceRequest(
            request.nums, word, memory, PERCENTAGE_UNSET, memory * 100 // XPU_MEMORY_MIB
        )
    return request


def vendor_request(
    container: Mapping[str, object], vendor: Vendor
) -> ContainerDeviceRequest | None:
    """The container's request of ``vendor``, or ``None`` when it asks for none."""
    return _normalised(_resources(_as_container(container)), vendor)


def container_requests(
    container: Mapping[str, object], *, vendors: Iterable[Vendor]
) -> Mapping[str, ContainerDeviceRequest]:
    """Vendor common word → request, for every vendor the container asks devices of."""
    return _container_requests(_resources(_as_container(container)), vendors)


def _container_requests(
    res: _Resources, vendors: Iterable[Vendor]
) -> Mapping[str, ContainerDeviceRequest]:
    found: dict[str, ContainerDeviceRequest] = {}
    for vendor in vendors:
        count = vendor.count_resource
        if (
            count not in res.limits
            and (vendor.limits_only or count not in res.requests)
            and (
                vendor.common_word not in _MORE_TRIGGERS
                or not any(name in res.limits or name in res.requests for name in _triggers(vendor))
            )
        ):
            continue
        request = _normalised(res, vendor)
        if request is not None:
            found[vendor.common_word] = request
    return MappingProxyType(found)


def pod_containers(pod: Mapping[str, object]) -> Iterator[tuple[bool, Mapping[str, object]]]:
    """``(is_init, container)`` for init containers, then regular containers, in spec order."""
    spec = _mapping(_mapping(pod, "pod", "the pod").get("spec"), "spec", "pod spec")
    for key, is_init in (("initContainers", True), ("containers", False)):
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise RequestError(f"spec.{key}", items, "must be a list of containers")
        for item in items:
            yield is_init, _as_container(item)


def pod_device_requests(
    pod: Mapping[str, object], *, vendors: Sequence[Vendor]
) -> PodDeviceRequests:
    """One slot per container (init first), each mapping vendor word → request."""
    slots = []
    for is_init, container in pod_containers(pod):
        res = _resources(container)
        requests = _container_requests(res, vendors)
        slots.append(ContainerSlot(name=res.container, is_init=is_init, requests=requests))
    return PodDeviceRequests(slots=tuple(slots))


def container_mentions_vendor(container: Mapping[str, object], vendor: Vendor) -> bool:
    """Whether any of the vendor's resources appears in the container's limits or requests."""
    res = _resources(_as_container(container))
    sections = (res.limits,) if vendor.limits_only else (res.limits, res.requests)
    return any(name in section for section in sections for name in vendor.managed_resources)


def pod_mentions_managed_resources(pod: Mapping[str, object], *, vendors: Sequence[Vendor]) -> bool:
    """Whether any container names a resource any vendor manages (the webhook's first test).

    Presence only: the values are not parsed, so ``nvidia.com/gpucores: 50`` without a count
    still counts (the webhook may then add the default count).
    """
    return any(
        container_mentions_vendor(container, vendor)
        for _, container in pod_containers(pod)
        for vendor in vendors
    )


def priority_value(container: Mapping[str, object], vendor: Vendor) -> int | None:
    """The vendor's priority resource from ``limits`` (rounded up, like Go's ``Value()``)."""
    if vendor.priority_resource is None:
        return None
    res = _resources(_as_container(container))
    value = _quantity(res, vendor.priority_resource, limits_only=True)
    return None if value is None else to_int_ceil(value)
