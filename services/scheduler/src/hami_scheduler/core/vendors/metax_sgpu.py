"""MetaX shared GPUs (``Metax-SGPU``): app-class isolation, QoS policies, online placement,
MetaLink zones, and the policy-neutral node score.

Per device, from the end of the policy order, the first failing check is counted:
``CardTypeMismatch``, ``CardUnhealthy``, ``CardAppClassMismatch``, ``CardQosPolicyMismatch``
(not for ``online`` pods), ``CardUuidMismatch``, ``CardTimeSlicingExhausted``,
``ExclusiveDeviceAllocateConflict`` (mutex and used), ``CardInsufficientMemory``, and — not for
``online`` pods, which are charged no cores — ``CardInsufficientCore``,
``ExclusiveDeviceAllocateConflict`` (100 cores asked of a used 100-core device) and
``CardComputeUnitsExhausted``.

* App class (pod ``metax-tech.com/sgpu-app-class``; the classes of the pods on each device come
  from :attr:`VendorContext.sgpu_tasks <.context.VendorContext.sgpu_tasks>`): an idle device
  takes anyone; otherwise classed pods (``online``/``offline``) and unclassed ones never share a
  device, and an ``offline`` pod never joins a device running ``online`` ones (they would suspend
  it).
* QoS: an idle device, or a request for the whole device (100 cores), takes any QoS; otherwise
  the device's QoS — the pending one of :attr:`VendorContext.sgpu_qos_pending
  <.context.VendorContext.sgpu_qos_pending>` if any, else its reported ``QosPolicy``
  custominfo — must be empty or the pod's.

Every fitting device is collected; fewer than asked → ``AllocatedCardsInsufficientRequest``.
With more than asked: an ``online`` pod takes the devices with the fewest online pods (then the
fewest offline ones), devices running only offline pods last (fewest first); an ``offline`` pod
keeps the policy order; an unclassed pod asking whole devices (100 cores) takes them from one
MetaLink zone (custominfo ``LinkZone`` > 0) when one holds enough — the smallest such zone —
else zone by zone smallest first, then devices without a zone; otherwise the policy order.
Grants name the device's model, the request's memory and its cores (0 for ``online`` pods).

Node score (:func:`score`): ±10000 (− under the spread node policy, so that either policy
prefers the same node) times — for an ``online`` pod — the sum over its devices of
``−100 × offline`` on devices running only offline pods, else ``−20 × online − 2 × offline``;
or — when the pod holds whole devices and is topology-aware — ``10 × links(granted) −
(links(idle) − links(granted) − links(idle but not granted))``, where ``links`` counts 10 for each
pair of devices in the same non-zero zone; else 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult, request_memory
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import (
    Tally,
    type_refusal,
)
from hami_scheduler.core.vendors.context import NO_SGPU_TASKS, SgpuTasks, VendorContext
from hami_scheduler.core.vendors.standard import Walk

__all__ = [
    "LINK_ZONE_KEY",
    "METAX_SGPU",
    "OFFLINE",
    "ONLINE",
    "QOS_KEY",
    "app_class_fits",
    "fit",
    "link_score",
    "score",
]

METAX_SGPU: Final = "Metax-SGPU"
ONLINE: Final = "online"
OFFLINE: Final = "offline"
QOS_KEY: Final = "QosPolicy"
LINK_ZONE_KEY: Final = "LinkZone"
_WHOLE: Final = 100
_DIRECT_LINK: Final = 10
_WEIGHT: Final = 10000.0


def link_zone(dev: DeviceUsage) -> int:
    """The device's MetaLink zone; 0 (none) when unreported or not a number."""
    try:
        return int(dev.custom.get(LINK_ZONE_KEY, "0"))
    except ValueError:
        return 0


def app_class_fits(app_class: str, dev: DeviceUsage, tasks: SgpuTasks) -> bool:
    """Whether a pod of ``app_class`` may join ``dev`` (see the module doc)."""
    if dev.used == 0:
        return True
    device_classed = tasks.online > 0 or tasks.offline > 0
    if device_classed != (app_class in (ONLINE, OFFLINE)):
        return False
    return not (tasks.online > 0 and app_class == OFFLINE)


def _qos_fits(dev: DeviceUsage, request: ContainerDeviceRequest, vendor: VendorContext) -> bool:
    if dev.used == 0 or request.coresreq == _WHOLE:
        return True
    current = vendor.sgpu_qos_pending.get(dev.uuid)
    if current is None:
        current = dev.custom.get(QOS_KEY, "")
    return current in ("", vendor.sgpu_qos)


def _core_refusal(dev: DeviceUsage, cores: int) -> str:
    if dev.totalcore - dev.usedcores < cores:
        return why.CARD_INSUFFICIENT_CORE
    if dev.totalcore == _WHOLE and cores == _WHOLE and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if dev.totalcore != 0 and dev.usedcores == dev.totalcore and cores == 0:
        return why.CARD_COMPUTE_UNITS_EXHAUSTED
    return ""


def _refusal(dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext) -> str:
    vendor = ctx.vendor
    app_class = vendor.sgpu_app_class
    refusal = type_refusal(dev, request, ctx)
    if refusal:
        return refusal
    if not dev.health:
        return why.CARD_UNHEALTHY
    if not app_class_fits(app_class, dev, vendor.sgpu_tasks.get(dev.uuid, NO_SGPU_TASKS)):
        return why.CARD_APP_CLASS_MISMATCH
    if app_class != ONLINE and not _qos_fits(dev, request, vendor):
        return why.CARD_QOS_POLICY_MISMATCH
    if ctx.selectors.filters_uuid and not ctx.selectors.uuid_ok(dev.uuid):
        return why.CARD_UUID_MISMATCH
    if dev.count <= dev.used:
        return why.CARD_TIME_SLICING_EXHAUSTED
    if ctx.mutex and dev.used > 0:
        return why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if dev.totalmem - dev.usedmem < request_memory(dev, request):
        return why.CARD_INSUFFICIENT_MEMORY
    if app_class != ONLINE:
        return _core_refusal(dev, request.coresreq)
    return ""


def _online_order(dev: DeviceUsage, vendor: VendorContext) -> tuple[bool, int, int]:
    tasks = vendor.sgpu_tasks.get(dev.uuid, NO_SGPU_TASKS)
    only_offline = tasks.online == 0 and tasks.offline > 0
    if only_offline:
        return (True, tasks.offline, 0)
    return (False, tasks.online, tasks.offline)


def _one_zone_first(candidates: list[DeviceUsage], want: int) -> list[DeviceUsage]:
    zones: dict[int, list[DeviceUsage]] = {}
    unzoned: list[DeviceUsage] = []
    for dev in candidates:
        zone = link_zone(dev)
        if zone > 0:
            zones.setdefault(zone, []).append(dev)
        else:
            unzoned.append(dev)
    by_size = sorted(zones.values(), key=len)
    for zone_devices in by_size:
        if len(zone_devices) >= want:
            return zone_devices[:want]
    return [dev for zone_devices in by_size for dev in zone_devices] + unzoned


def _prioritised(
    candidates: list[DeviceUsage], request: ContainerDeviceRequest, vendor: VendorContext
) -> list[DeviceUsage]:
    if vendor.sgpu_app_class == ONLINE:
        return sorted(candidates, key=lambda dev: _online_order(dev, vendor))
    if not vendor.sgpu_app_class and request.coresreq == _WHOLE:
        return _one_zone_first(candidates, request.nums)
    return candidates


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """MetaX sGPU's fit (see the module doc)."""
    want = request.nums
    if want <= 0:
        return FitResult(ok=True)
    walk = Walk(Tally(len(devices)))
    candidates: list[DeviceUsage] = []
    for dev in reversed(devices):
        refusal = _refusal(dev, request, ctx)
        if refusal:
            walk.tally.add(refusal)
        else:
            candidates.append(dev)
    if len(candidates) < want:
        if candidates:
            walk.tally.add(why.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, len(candidates))
        return walk.tally.failure()
    if len(candidates) > want:
        candidates = _prioritised(candidates, request, ctx.vendor)
    cores = 0 if ctx.vendor.sgpu_app_class == ONLINE else request.coresreq
    return FitResult(
        ok=True,
        devices=tuple(
            ContainerDevice(dev.uuid, dev.type, request_memory(dev, request), cores)
            for dev in candidates[:want]
        ),
    )


def link_score(zones: Iterable[int]) -> int:
    """10 for every pair of devices in the same non-zero MetaLink zone."""
    listed = list(zones)
    return sum(
        _DIRECT_LINK
        for i, zone in enumerate(listed)
        for other in listed[i + 1 :]
        if zone != 0 and zone == other
    )


def _online_score(
    node_devices: Sequence[DeviceUsage], placed: set[str], vendor: VendorContext
) -> int:
    total = 0
    for dev in node_devices:
        if dev.uuid not in placed:
            continue
        tasks = vendor.sgpu_tasks.get(dev.uuid, NO_SGPU_TASKS)
        if tasks.offline > 0 and tasks.online == 0:
            total -= 100 * tasks.offline
        else:
            total -= 20 * tasks.online + 2 * tasks.offline
    return total


def _exclusive_score(node_devices: Sequence[DeviceUsage], granted: list[ContainerDevice]) -> int:
    zone_of = {dev.uuid: link_zone(dev) for dev in node_devices}
    whole = [g.uuid for g in granted if g.usedcores == _WHOLE]
    idle = [dev for dev in node_devices if dev.used == 0]
    allocated = link_score(zone_of.get(uuid, 0) for uuid in whole)
    available = link_score(link_zone(dev) for dev in idle)
    rest = link_score(link_zone(dev) for dev in idle if dev.uuid not in whole)
    return 10 * allocated - (available - allocated - rest)


def score(
    node_policy: str,
    node_devices: Sequence[DeviceUsage],
    pod_devices: Iterable[Iterable[ContainerDevice]],
    vendor: VendorContext,
) -> float:
    """The MetaX sGPU node score of ``pod_devices`` (per container) on a node whose sGPU
    devices, before the pod, are ``node_devices``; ``vendor`` is the pod's context."""
    granted = [g for container in pod_devices for g in container]
    weight = -_WEIGHT if node_policy == "spread" else _WEIGHT
    if vendor.sgpu_app_class == ONLINE and granted:
        return weight * _online_score(node_devices, {g.uuid for g in granted}, vendor)
    if vendor.sgpu_topology_aware and any(g.usedcores == _WHOLE for g in granted):
        return weight * _exclusive_score(node_devices, granted)
    return 0.0
