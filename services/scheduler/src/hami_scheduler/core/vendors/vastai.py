"""Vastai accelerators (``Vastai``): count-only, and in die mode whole cards (AICs) preferred.

The count-only loop (:func:`~.standard.count_only_walk`) takes devices from the end of the
policy order.  *Die mode* — the first device's ``DeviceStrategy`` custominfo is ``die`` — makes
each device one die of an AIC (custominfo ``AIC``): every fitting die is collected; one asked →
the first collected; more → filled from the AICs with the most collected (free) dies, ties in
the order met.  Under the mutex policy in die mode a die whose AIC has any die in use is
refused ``ExclusiveDeviceAllocateConflict`` (the AIC is the unit of exclusivity).  Dies without
an ``AIC`` form a card of their own (HAMi drops them from the combination).

Node score (:func:`score`, die mode only): per container with devices, the share of its dies
on its most used AIC, summed; 0 when a granted device has no ``AIC`` or is not a die.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.standard import count_only_walk

__all__ = ["AIC_KEY", "DIE", "STRATEGY_KEY", "VASTAI", "fit", "score"]

VASTAI: Final = "Vastai"
AIC_KEY: Final = "AIC"
STRATEGY_KEY: Final = "DeviceStrategy"
DIE: Final = "die"


def _card(dev: DeviceUsage) -> str:
    return dev.custom.get(AIC_KEY, "\0" + dev.uuid)


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """Vastai's fit (see the module doc)."""
    want = request.nums
    if want <= 0:
        return FitResult(ok=True)
    die_mode = bool(devices) and devices[0].custom.get(STRATEGY_KEY) == DIE
    if not die_mode:
        return count_only_walk(devices, request, ctx).result(want)
    busy_cards = {_card(dev) for dev in devices if dev.used > 0} if ctx.mutex else set()
    walk = count_only_walk(
        devices,
        request,
        ctx,
        exclusive_conflict=lambda dev: _card(dev) in busy_cards,
        collect_all=True,
    )
    if len(walk.taken) <= want or want == 1:
        return walk.result(want)
    cards: dict[str, list[ContainerDevice]] = {}
    for dev, granted in walk.taken:
        cards.setdefault(_card(dev), []).append(granted)
    ordered = sorted(cards.values(), key=len, reverse=True)
    chosen = [granted for card in ordered for granted in card][:want]
    return FitResult(ok=True, devices=tuple(chosen))


def score(
    node_devices: Sequence[DeviceUsage], pod_devices: Iterable[Iterable[ContainerDevice]]
) -> float:
    """The die-mode score of ``pod_devices`` (per container) on a node of ``node_devices``."""
    by_uuid = {dev.uuid: dev for dev in node_devices}
    total = 0.0
    for container in pod_devices:
        cards: list[str] = []
        for granted in container:
            dev = by_uuid.get(granted.uuid)
            if dev is None or AIC_KEY not in dev.custom:
                return 0.0
            if dev.custom.get(STRATEGY_KEY, DIE) != DIE:
                return 0.0
            cards.append(dev.custom[AIC_KEY])
        if cards:
            total += max(Counter(cards).values()) / len(cards)
    return total
