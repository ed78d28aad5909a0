"""Huawei Ascend NPUs (common words ``Ascend910A``, ``Ascend910B2`` … ``Ascend910C``,
``Ascend310P``): the standard loop, vNPU modes, NetworkID topology and 910C card pairs.

* Mode: a pod asking ``hami-core`` (soft split) of a node that does not run hami-vnpu-core, or
  ``template`` (hard split) of one that does, is refused outright: ``ModeNotFit`` counted once
  over the node's devices.  In hami-core mode a device's cores count as 100 (percent), else as
  its registered AI cores (templates ask absolute AI cores).
* The standard loop (:mod:`.standard`) judges each device.
* Topology — for ``Ascend910*`` words when every device has a ``NetworkID`` custominfo — every
  fitting device is collected: one asked → the first collected (the last in policy order);
  more → filled from the NetworkID groups largest first (ties: the group met first).
* ``Ascend910C`` asking more than one NPU: an NPU's card is ``index // 2``; only cards with both
  NPUs among the fitting ones count, taken card by card in the order first met, and the
  result must be exactly the request.  HAMi v2.10 paired only under topology; this module
  pairs whether or not NetworkIDs are registered (HAMi's later fix: an unpaired 910C NPU is
  unusable for a multi-NPU job either way).  Refusal: the fitting NPUs left unpaired count
  ``NumaNotFit`` and the paired ones ``AllocatedCardsInsufficientRequest``.

Node score (:func:`score`, ``Ascend910*`` only): per container with devices, the share of its
NPUs in its largest NetworkID group, summed and ×10; 0 when a granted NPU has no NetworkID.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import Tally
from hami_scheduler.core.vendors.standard import Walk, standard_walk

__all__ = [
    "ASCEND_910C",
    "ASCEND_910_PREFIX",
    "HAMI_CORE_MODE",
    "NETWORK_ID_KEY",
    "TEMPLATE_MODE",
    "fit",
    "full_cards",
    "score",
]

ASCEND_910_PREFIX: Final = "Ascend910"
ASCEND_910C: Final = "Ascend910C"
NETWORK_ID_KEY: Final = "NetworkID"
HAMI_CORE_MODE: Final = "hami-core"
TEMPLATE_MODE: Final = "template"
_HAMI_CORE_TOTAL: Final = 100
_NPUS_PER_CARD: Final = 2
_TOPOLOGY_WEIGHT: Final = 10.0

Taken = list[tuple[DeviceUsage, ContainerDevice]]


def _mode_refused(devices: Sequence[DeviceUsage], ctx: FitContext) -> FitResult | None:
    mode = ctx.vendor.ascend_vnpu_mode
    node_hami_core = ctx.vendor.ascend_node_hami_core
    if (mode == HAMI_CORE_MODE and not node_hami_core) or (
        mode == TEMPLATE_MODE and node_hami_core
    ):
        tally = Tally(len(devices))
        tally.add(why.MODE_NOT_FIT)
        return tally.failure()
    return None


def full_cards(taken: Taken, want: int) -> Taken:
    """NPUs of cards whose two NPUs are both in ``taken``, card by card, until ``want``."""
    cards: dict[int, Taken] = {}
    for entry in taken:
        npus = cards.setdefault(entry[0].index // _NPUS_PER_CARD, [])
        if all(dev.index != entry[0].index for dev, _ in npus):
            npus.append(entry)
    chosen: Taken = []
    for npus in cards.values():
        if len(chosen) >= want:
            break
        if len(npus) == _NPUS_PER_CARD:
            chosen.extend(npus)
    return chosen


def _by_network(taken: Taken, want: int) -> Taken:
    groups: dict[str, Taken] = {}
    for entry in taken:
        groups.setdefault(entry[0].custom[NETWORK_ID_KEY], []).append(entry)
    ordered = sorted(groups.values(), key=len, reverse=True)
    return [entry for group in ordered for entry in group][:want]


def _granted(entries: Taken) -> FitResult:
    return FitResult(ok=True, devices=tuple(granted for _, granted in entries))


def _paired(walk: Walk, want: int) -> FitResult:
    chosen = full_cards(walk.taken, want)
    if len(chosen) == want:
        return _granted(chosen)
    walk.tally.add(why.NUMA_NOT_FIT, len(walk.taken) - len(chosen))
    walk.tally.add(why.ALLOCATED_CARDS_INSUFFICIENT_REQUEST, len(chosen))
    return walk.tally.failure()


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """Ascend's fit (see the module doc)."""
    want = request.nums
    if want <= 0:
        return FitResult(ok=True)
    refused = _mode_refused(devices, ctx)
    if refused is not None:
        return refused
    total_core = _HAMI_CORE_TOTAL if ctx.vendor.ascend_vnpu_mode == HAMI_CORE_MODE else None
    pairs = request.type == ASCEND_910C and want > 1
    topology = (
        request.type.startswith(ASCEND_910_PREFIX)
        and bool(devices)
        and all(NETWORK_ID_KEY in dev.custom for dev in devices)
    )
    walk = standard_walk(
        devices, request, ctx, total_core=total_core, collect_all=topology or pairs
    )
    if pairs:
        return _paired(walk, want)
    if not topology or len(walk.taken) <= want:
        return walk.result(want)
    return _granted(walk.taken[:1] if want == 1 else _by_network(walk.taken, want))


def score(
    vendor: str,
    node_devices: Sequence[DeviceUsage],
    pod_devices: Iterable[Iterable[ContainerDevice]],
) -> float:
    """The NetworkID score of ``pod_devices`` (per container) of common word ``vendor`` on a
    node whose devices are ``node_devices``."""
    if not vendor.startswith(ASCEND_910_PREFIX):
        return 0.0
    network = {dev.uuid: dev.custom.get(NETWORK_ID_KEY) for dev in node_devices}
    total = 0.0
    for container in pod_devices:
        ids = [network.get(granted.uuid) for granted in container]
        if not ids:
            continue
        if None in ids:
            return 0.0
        total += max(Counter(ids).values()) / len(ids)
    return total * _TOPOLOGY_WEIGHT
