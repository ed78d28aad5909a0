"""The core's public surface and its purity (no I/O, no event loop, no Kubernetes client)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import hami_scheduler.core as core

FORBIDDEN = {
    "aiohttp",
    "asyncio",
    "grpc",
    "hami_kube",
    "hami_kubesim",
    "http",
    "kubernetes_asyncio",
    "pynvml",
    "socket",
    "ssl",
    "structlog",
    "subprocess",
    "threading",
    "urllib",
}

PUBLIC = {
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
}


def test_public_api_is_pinned() -> None:
    assert set(core.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(core, name) is not None


def test_core_imports_no_io() -> None:
    root = Path(core.__file__).parent
    modules = [info.name for info in pkgutil.iter_modules([str(root)])]
    assert {"usage", "fit", "score", "quota", "decide", "select"} <= set(modules)
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
