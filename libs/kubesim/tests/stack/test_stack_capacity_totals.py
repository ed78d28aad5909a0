"""The whole-system stack's capacity totals switch: every service gets its part of the mode."""

from __future__ import annotations

from pathlib import Path

import yaml

from hami_kubesim.stack.system.services import deviceplugin_args
from hami_kubesim.stack.system.spec import (
    CHART_SCHEDULER_CONFIG,
    SystemSpec,
    capacity_totals_document,
    gpu_model_node,
)
from hami_protocol.totals import TOTALS_RESOURCES

NODE = gpu_model_node("gpu-1", "NVIDIA H100", count=8, memory_mib=81920)


def _plugin_args(spec: SystemSpec) -> list[str]:
    return deviceplugin_args(
        spec, NODE, api_url="http://x", kubelet_socket=Path("/k/kubelet.sock"), devices=Path("d")
    )


def test_off_by_default_and_on_with_the_switch() -> None:
    assert "--advertise-capacity-totals=true" not in _plugin_args(SystemSpec(nodes=(NODE,)))
    on = SystemSpec(nodes=(NODE,), capacity_totals=True)
    assert "--advertise-capacity-totals=true" in _plugin_args(on)


def test_scheduler_config_counts_gpus_and_totals() -> None:
    original = yaml.safe_load(CHART_SCHEDULER_CONFIG.read_text())
    document = capacity_totals_document(original)
    assert document != original  # a copy: the file's document is left alone
    resources = document["extenders"][0]["managedResources"]
    counted = [r["name"] for r in resources if not r["ignoredByScheduler"]]
    assert counted == ["nvidia.com/gpu", *TOTALS_RESOURCES]
