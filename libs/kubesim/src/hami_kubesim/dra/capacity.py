"""How one allocation of a device is charged (contract §2.2, upstream ``consumable_capacity.go``).

For **every** capacity of the device, not only the requested ones, the consumed amount is the
requested amount if the request names it, else the policy's ``default``, else the capacity's
whole ``value`` — a GPU whose ``cores`` had no default would be taken whole by a memory-only
claim.  Requested amounts are rounded by the policy: ``validRange`` up to ``min`` and then up
to the step grid from ``min``; ``validValues`` to the smallest listed value not below.  A result
above ``max``, or above every valid value, makes the device unusable for the request (not an
error); a value equal to ``default`` always passes.  A requested key the device does not
publish (keys compared verbatim) makes the device unusable too.
"""

from __future__ import annotations

from collections.abc import Mapping

from hami_kubesim.dra.model import Capacity, Device

__all__ = ["charge", "fits"]


def charge(device: Device, requested: Mapping[str, int]) -> dict[str, int] | None:
    """What allocating ``device`` for a request consumes per capacity, or ``None`` when the
    request cannot be served by it (unknown key, policy violation)."""
    if any(name not in device.capacity for name in requested):
        return None
    consumed: dict[str, int] = {}
    for name, capacity in device.capacity.items():
        amount = _amount(capacity, requested.get(name))
        if amount is None:
            return None
        consumed[name] = amount
    return consumed


def fits(device: Device, consumed: Mapping[str, int], *held: Mapping[str, int]) -> bool:
    """``held`` (already allocated, being allocated) plus ``consumed`` stay within every
    capacity's value.  An exclusive device is tested with nothing held: requests filter."""
    return all(
        sum(h.get(name, 0) for h in held) + amount <= device.capacity[name].value
        for name, amount in consumed.items()
    )


def _amount(capacity: Capacity, requested: int | None) -> int | None:
    policy = capacity.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return capacity.value
    if policy is None:
        return requested
    amount = requested
    if policy.valid_values:
        amount = next((v for v in policy.valid_values if v >= requested), -1)
        if amount < 0:
            return None
    elif policy.valid_range is not None:
        span = policy.valid_range
        amount = max(amount, span.min)
        if span.step:
            amount = span.min + -(-(amount - span.min) // span.step) * span.step
        if span.max is not None and amount > span.max and amount != policy.default:
            return None
    return amount
