"""Checks and bookkeeping every vendor fit shares: the per-device tests that come first in
HAMi's loops (health, type, UUID) and the tally of refusal reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage

__all__ = [
    "Tally",
    "selected_out",
    "type_refusal",
]


def type_refusal(dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext) -> str:
    """``CardTypeMismatch`` when ``dev`` is another vendor's or fails the use/nouse type lists."""
    if request.type != dev.vendor:
        return why.CARD_TYPE_MISMATCH
    selectors = ctx.selectors
    if selectors.filters_type and not selectors.type_ok(dev.type, dev.mode):
        return why.CARD_TYPE_MISMATCH
    return ""


def selected_out(dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext) -> str:
    """Health, then type, then UUID: the first refusal of the three, ``""`` when none."""
    if not dev.health:
        return why.CARD_NOT_HEALTH
    refusal = type_refusal(dev, request, ctx)
    if refusal:
        return refusal
    if ctx.selectors.filters_uuid and not ctx.selectors.uuid_ok(dev.uuid):
        return why.CARD_UUID_MISMATCH
    return ""


@dataclass(slots=True)
class Tally:
    """Refusals counted per reason word, reported over ``cards`` devices."""

    cards: int
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str, times: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + times

    def failure(self) -> FitResult:
        return FitResult(ok=False, reason=why.format_reasons(self.counts, self.cards))
