"""MetaX sGPU's admission rule (HAMi's ``pkg/device/metax``), pure.

``metax-tech.com/sgpu-app-class`` must be ``online``/``offline`` and asks for one device; unless
online, ``metax-tech.com/sgpu-qos-policy`` defaults to ``best-effort`` and must be one of the
three policies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_protocol import keys
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.vendors.rule_set import (
    PodEdits,
    VendorRuleError,
    container_name,
    read_count,
)

__all__ = ["METAX_APP_ONLINE", "apply_metax_sgpu"]

METAX_APP_ONLINE: Final = "online"


def apply_metax_sgpu(
    ctr: dict[str, Any], vendor: Vendor, pod_annotations: Mapping[str, str], edits: PodEdits
) -> bool:
    """Apply the rule to ``ctr``; whether it asks for MetaX sGPUs."""
    _, count = read_count(ctr, vendor)
    if count is None:
        return False
    container = container_name(ctr)
    app_class = edits.annotation(pod_annotations, keys.METAX_SGPU_APP_CLASS)
    if app_class is not None:
        if app_class not in keys.METAX_APP_CLASSES:
            raise VendorRuleError(
                f"{keys.METAX_SGPU_APP_CLASS} must be set one of [online, offline]",
                container=container,
                annotation=keys.METAX_SGPU_APP_CLASS,
                value=app_class,
            )
        if count != 1:
            raise VendorRuleError(
                "app-class pod must request single device", container=container, value=count
            )
    if app_class != METAX_APP_ONLINE:
        qos = edits.annotation(pod_annotations, keys.METAX_SGPU_QOS_POLICY)
        if qos is None:
            edits.default_annotations[keys.METAX_SGPU_QOS_POLICY] = keys.METAX_QOS_BEST_EFFORT
        elif qos not in keys.METAX_QOS_POLICIES:
            raise VendorRuleError(
                f"{keys.METAX_SGPU_QOS_POLICY} must be set one of "
                f"[{', '.join(keys.METAX_QOS_POLICIES)}]",
                container=container,
                annotation=keys.METAX_SGPU_QOS_POLICY,
                value=qos,
            )
    return True
