"""Kunlunxin XPU boards: whole XPUs (``kunlun``) and vXPU shares (``XPU``).

An 8-slot board has two wings, XPUs 0–3 and 4–7, linked within a wing and by the cross links
``0-4, 1-5, 2-6, 3-7``.  Both vendors choose devices with the same *graph selector* over the
board indices of the usable devices; they differ only in what makes a device usable.

Graph selector (HAMi ``graghSelect``), for ``count`` devices:

* 8 → all eight, when all are usable;
* 1, 2, 4 → when some wing has at least ``count`` usable XPUs, the wing whose usable count is
  the first of the search order that some wing matches exactly (``1, 3, 2, 4`` for one device,
  ``count … 4`` otherwise; the left wing wins a tie), its lowest usable indices;
* otherwise across the wings: 2 → the first cross-linked pair with both usable; 4 → with 4–5
  usable, the first fully usable group of :data:`CROSS_GROUPS`; with 6, the first such group
  whose two left-over XPUs are linked (a cross pair or a pair of one wing), else the last
  fully usable group;
* anything else, or nothing found → ``NumaNotFit``, reported as HAMi does: ``"1/1 NumaNotFit"``.

Unlike HAMi, wings are read from each device's registered ``index`` rather than its position in
the policy-sorted list (HAMi's positions are board indices only while the sort keeps
registration order).  Devices whose index is off the board (≥ 8) are never chosen.

Usable: whole XPU — healthy, the pod's type and UUID selectors pass, idle.  vXPU — healthy,
selectors pass, a slot free, the request's memory free, and the device idle or its tasks' average
memory equal to the request (the plugin can only split an XPU into equal shares); under the mutex
policy idle only.  A whole XPU is granted whole (its memory and cores); a vXPU its request.

Node score (whole XPUs only, :func:`score`): the *bubble* of a set of board indices is
``g(in 0–3) + g(in 4–7)`` with ``g(4) = 0``, ``g(1) = 2``, else 1 (and 1 for the empty set);
``Δ = bubble(pod's XPUs) − bubble(XPUs already in use)`` scores ``−1 → 3000, 0 → 2000,
1 → 1000, 2 → 0``, anything else 1000; a node holding any non-Kunlun device scores 0.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult, request_memory
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import selected_out

__all__ = [
    "BOARD_SLOTS",
    "CROSS_GROUPS",
    "CROSS_PAIRS",
    "KUNLUN",
    "VXPU",
    "WING_PAIRS",
    "bubble",
    "fit",
    "fit_vxpu",
    "graph_select",
    "score",
]

KUNLUN: Final = "kunlun"
"""Common word of whole XPUs."""
VXPU: Final = "XPU"
"""Common word of vXPU shares."""

BOARD_SLOTS: Final = 8
_WING: Final = 4
CROSS_PAIRS: Final = ((0, 4), (1, 5), (2, 6), (3, 7))
WING_PAIRS: Final = (
    (0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3),
    (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7),
)  # fmt: skip
CROSS_GROUPS: Final = (
    (0, 1, 4, 5),
    (2, 3, 6, 7),
    (0, 2, 4, 6),
    (1, 3, 5, 7),
    (0, 3, 4, 7),
    (1, 2, 5, 6),
)
_ONE_DEVICE_ORDER: Final = (1, 3, 2, 4)
_LINKED: Final = CROSS_PAIRS + WING_PAIRS
_NO_FIT: Final = why.format_reasons({why.NUMA_NOT_FIT: 1}, 1)


def _from_wings(usable: Collection[int], count: int) -> tuple[int, ...]:
    wings = (
        sorted(i for i in usable if i < _WING),
        sorted(i for i in usable if _WING <= i < BOARD_SLOTS),
    )
    if max(len(wings[0]), len(wings[1])) < count:
        return ()
    order = _ONE_DEVICE_ORDER if count == 1 else range(count, _WING + 1)
    for free in order:
        for wing in wings:
            if len(wing) == free:
                return tuple(wing[:count])
    return ()  # pragma: no cover - some wing holds between count and 4 usable XPUs


def _across_wings(usable: Collection[int], count: int) -> tuple[int, ...]:
    if count == 2:
        return next((pair for pair in CROSS_PAIRS if set(pair) <= set(usable)), ())
    if count != _WING:
        return ()
    free = {i for i in usable if i < BOARD_SLOTS}
    groups = [group for group in CROSS_GROUPS if free.issuperset(group)]
    if len(free) in (4, 5):
        return groups[0] if groups else ()
    if len(free) == 6:
        for group in groups:
            rest = free.difference(group)
            if any(rest.issuperset(pair) for pair in _LINKED):
                return group
        return groups[-1] if groups else ()
    return ()


def graph_select(usable: Collection[int], count: int) -> tuple[int, ...]:
    """Board indices for ``count`` XPUs among the ``usable`` ones; ``()`` when none fit."""
    if count == BOARD_SLOTS:
        board = tuple(range(BOARD_SLOTS))
        return board if set(board) <= set(usable) else ()
    if count not in (1, 2, _WING):
        return ()
    return _from_wings(usable, count) or _across_wings(usable, count)


def _select(
    devices: Sequence[DeviceUsage],
    request: ContainerDeviceRequest,
    usable: Callable[[DeviceUsage], bool],
    grant: Callable[[DeviceUsage], ContainerDevice],
) -> FitResult:
    if request.nums <= 0:
        return FitResult(ok=True)
    by_index: dict[int, DeviceUsage] = {}
    for dev in devices:
        if 0 <= dev.index < BOARD_SLOTS and dev.index not in by_index and usable(dev):
            by_index[dev.index] = dev
    chosen = graph_select(by_index.keys(), request.nums)
    if not chosen:
        return FitResult(ok=False, reason=_NO_FIT)
    return FitResult(ok=True, devices=tuple(grant(by_index[i]) for i in chosen))


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """Whole XPUs: idle, healthy, selected devices by the graph selector."""

    def usable(dev: DeviceUsage) -> bool:
        return dev.used == 0 and not selected_out(dev, request, ctx)

    def grant(dev: DeviceUsage) -> ContainerDevice:
        return ContainerDevice(dev.uuid, request.type, dev.totalmem, dev.totalcore)

    return _select(devices, request, usable, grant)


def fit_vxpu(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """vXPU shares: the request's memory on XPUs idle or split into shares of that size."""

    def usable(dev: DeviceUsage) -> bool:
        if selected_out(dev, request, ctx) or dev.used >= dev.count:
            return False
        memreq = request_memory(dev, request)
        if dev.totalmem - dev.usedmem < memreq:
            return False
        if dev.used == 0:
            return True
        return not ctx.mutex and dev.usedmem == memreq * dev.used

    def grant(dev: DeviceUsage) -> ContainerDevice:
        return ContainerDevice(
            dev.uuid, request.type, request_memory(dev, request), request.coresreq
        )

    return _select(devices, request, usable, grant)


def _wing_weight(held: int) -> int:
    if held == _WING:
        return 0
    if held == 1:
        return 2
    return 1


def bubble(indices: Iterable[int]) -> int:
    """How badly a set of board indices fragments the wings (see the module doc)."""
    seen = set(indices)
    if not seen:
        return 1
    left = sum(1 for i in seen if i < _WING)
    return _wing_weight(left) + _wing_weight(len(seen) - left)


_DELTA_SCORES: Final = {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}
_OTHER_DELTA: Final = 1000.0


def score(
    node_devices: Sequence[DeviceUsage], pod_devices: Iterable[Iterable[ContainerDevice]]
) -> float:
    """The Kunlun node score of placing ``pod_devices`` (per container) on a node whose devices,
    before this pod, are ``node_devices`` (every vendor's)."""
    index_of: dict[str, int] = {}
    used: list[int] = []
    for dev in node_devices:
        if dev.vendor != KUNLUN:
            return 0.0
        index_of[dev.uuid] = dev.index
        if dev.used > 0:
            used.append(dev.index)
    placed: list[int] = []
    for container in pod_devices:
        for granted in container:
            index = index_of.get(granted.uuid)
            if index is None:
                return 0.0
            placed.append(index)
    return _DELTA_SCORES.get(bubble(placed) - bubble(used), _OTHER_DELTA)
