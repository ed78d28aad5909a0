"""The scheduler's pure decision core: device usage, fit, scores, whole-pod decisions, selection.

Nothing here performs I/O or awaits.  The service shell keeps a ``name → NodeUsage`` cache up to
date with :func:`apply_usage` / :func:`remove_usage`, builds a :class:`PodPlan` per filter and
calls :func:`select_node`.
"""

from hami_scheduler.core.decide import NodeDecision, decide_node, decision_usage
from hami_scheduler.core.fit import FitContext, FitResult, device_refusal, fit_request
from hami_scheduler.core.plan import NO_SELECTORS, DeviceSelectors, PodPlan, pod_plan
from hami_scheduler.core.quota import (
    PodQuotaTally,
    QuotaLedger,
    QuotaLimits,
    VendorQuota,
    limits_from_hard,
    pod_quota_total,
)
from hami_scheduler.core.reasons import format_reasons
from hami_scheduler.core.score import device_score, node_better, sort_devices
from hami_scheduler.core.select import FailureReasons, Selection, SelectMemo, select_node
from hami_scheduler.core.usage.apply import (
    apply_usage,
    build_node_usage,
    pod_usage,
    remove_usage,
    unknown_devices,
)
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.usage.node import NodeLayout, NodeUsage, UsageTotals, node_layout

__all__ = [
    "NO_SELECTORS",
    "DeviceSelectors",
    "DeviceUsage",
    "FailureReasons",
    "FitContext",
    "FitResult",
    "NodeDecision",
    "NodeLayout",
    "NodeUsage",
    "PodPlan",
    "PodQuotaTally",
    "QuotaLedger",
    "QuotaLimits",
    "SelectMemo",
    "Selection",
    "UsageTotals",
    "VendorQuota",
    "apply_usage",
    "build_node_usage",
    "decide_node",
    "decision_usage",
    "device_refusal",
    "device_score",
    "fit_request",
    "format_reasons",
    "limits_from_hard",
    "node_better",
    "node_layout",
    "pod_plan",
    "pod_quota_total",
    "pod_usage",
    "remove_usage",
    "select_node",
    "sort_devices",
    "unknown_devices",
]
