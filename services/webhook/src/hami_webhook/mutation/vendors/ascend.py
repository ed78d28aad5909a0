"""Ascend's admission rule (HAMi's ``pkg/device/ascend``), per enabled chip, pure.

A container without the chip's count while the chip has ``overwriteEnv`` gets
``ASCEND_VISIBLE_DEVICES=""`` (only when it asks for no Ascend chip at all; HAMi sets it per chip,
blanking a container that uses another chip); ``Ascend910C`` with ``superPod``: a count of 1
becomes 2 (limits, and requests where set), another odd count is refused ``Ascend910C device
request must be 1 or 2*n, got N``; the ``-core`` resource only with ``huawei.com/vnpu-mode:
hami-core``; otherwise (template mode) memory rounds up to the smallest template that holds it,
else to ``memoryAllocatable`` when it is within ``memoryCapacity``, else ``<memory resource> <v>
is invalid``; more than one NPU with less than a whole card is refused ``vNPU not supported for
multiple devices`` (a 910C superPod module, two NPUs, counts as one); the rounded memory
(``memoryAllocatable`` when none was asked) is written to limits and requests (with a
``memoryFactor`` above 1 it is checked in MiB and left as written); the chip's
``runtimeClassName`` goes to a pod without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_protocol import keys
from hami_protocol.config.ascend import AscendChipConfig
from hami_webhook.mutation.edits import present, set_env, set_limit, set_quantity, value
from hami_webhook.mutation.vendors.rule_set import (
    AscendRule,
    PodEdits,
    VendorRuleError,
    VendorRuleSet,
    container_name,
    read_count,
)

__all__ = ["ASCEND_910C", "HAMI_CORE_MODE", "apply_ascend", "ascend_memory"]

ASCEND_910C: Final = "Ascend910C"
HAMI_CORE_MODE: Final = "hami-core"


def ascend_memory(chip: AscendChipConfig, memory: int) -> int:
    """HAMi's ``trimMemory``: the smallest template ≥ ``memory``, else ``memoryAllocatable``
    when ``memory`` ≤ ``memoryCapacity``, else 0 (invalid)."""
    for template in chip.templates:
        if memory <= template.memory:
            return template.memory
    if memory <= chip.memory_capacity:
        return chip.memory_allocatable
    return 0


def apply_ascend(
    ctr: dict[str, Any],
    pod_annotations: Mapping[str, str],
    rule: AscendRule,
    rules: VendorRuleSet,
    edits: PodEdits,
) -> bool:
    """Apply one chip's rule to ``ctr``; whether it asks for that chip."""
    vendor, chip = rule.vendor, rule.chip
    where, count = read_count(ctr, vendor)
    if count is None:
        if chip.overwrite_env and not any(present(where, n) for n in rules.ascend_counts):
            set_env(ctr, keys.ASCEND_VISIBLE_DEVICES_ENV, "")
        return False
    container = container_name(ctr)
    if chip.common_word == ASCEND_910C and chip.super_pod:
        if count == 1:
            set_limit(ctr, vendor.count_resource, 2)
            if vendor.count_resource in where[1]:
                set_quantity(ctr, "requests", vendor.count_resource, "2")
        elif count % 2:
            raise VendorRuleError(
                f"Ascend910C device request must be 1 or 2*n, got {count}",
                container=container,
                resource=vendor.count_resource,
                value=count,
            )
    hami_core = pod_annotations.get(keys.ASCEND_VNPU_MODE) == HAMI_CORE_MODE
    if not hami_core and present(where, chip.resource_core_name):
        raise VendorRuleError(
            f"{chip.resource_core_name} is only supported in {HAMI_CORE_MODE} mode "
            f"(pod annotation {keys.ASCEND_VNPU_MODE}: {HAMI_CORE_MODE})",
            container=container,
            resource=chip.resource_core_name,
        )
    if chip.runtime_class_name and edits.runtime_class is None:
        edits.runtime_class = chip.runtime_class_name
    if hami_core:
        return True
    memory_name = vendor.memory_resource
    memory = value(where, memory_name)
    factor = max(chip.memory_factor, 1)
    trimmed = chip.memory_allocatable
    if memory is not None:
        trimmed = ascend_memory(chip, memory * factor)
        if trimmed <= 0:
            raise VendorRuleError(
                f"{memory_name} {memory} is invalid",
                container=container,
                resource=memory_name,
                value=memory,
            )
    # One Ascend910C module is two NPUs: asking for it (1, made 2 above, or 2) is one device.
    module = 2 if chip.common_word == ASCEND_910C and chip.super_pod else 1
    if count > module and trimmed != chip.memory_allocatable:
        raise VendorRuleError(
            "vNPU not supported for multiple devices",
            container=container,
            resource=memory_name,
            value=memory,
        )
    # With a memoryFactor the request is in coarser units than the templates; it is checked but
    # left as written (rewriting it rounded would not be stable under re-admission).
    if memory_name and trimmed > 0 and factor == 1:
        set_quantity(ctr, "limits", memory_name, str(trimmed))
        set_quantity(ctr, "requests", memory_name, str(trimmed))
    return True
