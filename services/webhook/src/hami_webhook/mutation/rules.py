"""What the admission decision depends on: :class:`MutationRules`, built once from the settings,
pure.  Rule numbers refer to the list in :mod:`hami_webhook.mutation.admit`."""

from __future__ import annotations

from dataclasses import dataclass, field

from hami_protocol.config.device import DeviceConfig, NvidiaConfig
from hami_protocol.pod.allocation import placement_keys
from hami_protocol.vendor.table import DEFAULT_VENDORS, NVIDIA, Vendor
from hami_webhook.mutation.vendors.rule_set import VendorRuleSet, vendor_rule_set

__all__ = ["MutationRules"]


@dataclass(frozen=True, slots=True)
class MutationRules:
    """What the mutation depends on; built once from the service settings."""

    scheduler_name: str = "hami-scheduler"
    """Written into ``spec.schedulerName``; empty means "leave it" (and skip the node check)."""
    force_overwrite_default_scheduler: bool = True
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    vendors: tuple[Vendor, ...] = DEFAULT_VENDORS
    """Every vendor row; the NVIDIA row must use the same resource names as ``nvidia``."""
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    """The device config the vendor rows came from (Ascend templates, Moore Threads card
    sizes, ...)."""
    vendor_rules: VendorRuleSet | None = None
    """Derived from ``devices`` and ``vendors`` when not given."""
    placement: frozenset[str] = frozenset()
    """Derived from ``vendors``: the annotations of a placement's record (rule 6)."""
    capacity_totals: bool = False
    """Write the capacity totals into the containers (rule 7); off by default."""

    def __post_init__(self) -> None:
        if self.vendor_rules is None:
            object.__setattr__(self, "vendor_rules", vendor_rule_set(self.devices, self.vendors))
        object.__setattr__(self, "placement", placement_keys(self.vendors))

    @property
    def nvidia_row(self) -> Vendor | None:
        """The NVIDIA vendor row, if configured."""
        return next((v for v in self.vendors if v.common_word == NVIDIA), None)

    @property
    def rule_set(self) -> VendorRuleSet:
        assert self.vendor_rules is not None
        return self.vendor_rules
