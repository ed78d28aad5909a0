"""AWS Neuron's admission rule (HAMi's ``pkg/device/awsneuron``), pure.

Counts and cores must be whole, positive and in range; cores above a device's two must be a
multiple of two (HAMi's webhook knows no node, so it uses the default).
"""

from __future__ import annotations

from typing import Any, Final

from hami_protocol.request.quantity import as_integer, json_quantity
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import Sections, present, raw_value
from hami_webhook.mutation.vendors.rule_set import VendorRuleError, container_name, read_sections

__all__ = ["AWS_DEFAULT_CORES_PER_DEVICE", "INT32_MAX", "apply_aws_neuron"]

INT32_MAX: Final = 2**31 - 1
AWS_DEFAULT_CORES_PER_DEVICE: Final = 2


def _whole(where: Sections, name: str, maximum: int, container: str) -> int:
    raw = raw_value(where, name)
    number = as_integer(json_quantity(raw, key=name))
    if number is None:
        raise VendorRuleError(f"{name} must be an integer", container=container, value=raw)
    if number <= 0:
        raise VendorRuleError(f"{name} must be greater than 0", container=container, value=raw)
    if number > maximum:
        raise VendorRuleError(f"{name} must not exceed {maximum}", container=container, value=raw)
    return number


def apply_aws_neuron(ctr: dict[str, Any], vendor: Vendor) -> bool:
    """Check ``ctr``'s request; whether it asks for AWS Neuron devices or cores."""
    where = read_sections(ctr)
    container = container_name(ctr)
    if present(where, vendor.count_resource):
        _whole(where, vendor.count_resource, INT32_MAX, container)
        return True
    cores_name = vendor.cores_resource
    if not cores_name or not present(where, cores_name):
        return False
    per_device = AWS_DEFAULT_CORES_PER_DEVICE
    cores = _whole(where, cores_name, INT32_MAX * per_device, container)
    if cores > per_device and cores % per_device:
        raise VendorRuleError(
            f"{cores_name} must be 1 or a multiple of {per_device}, got {cores}",
            container=container,
            value=cores,
        )
    return True
