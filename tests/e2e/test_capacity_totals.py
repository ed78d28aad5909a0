"""The capacity totals mode end to end: ``SystemSpec(capacity_totals=True)`` as the chart's
``global.capacityTotals`` (device plugin and webhook flags, kube-scheduler counting the totals).

One node of two 8000 MiB GPUs: its device plugin advertises 16000 MiB and 200 cores, the kubelet
stand-in copies them into allocatable, the webhook writes each pod's totals, and kube-scheduler's
in-tree NodeResourcesFit counts them before the extender is asked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from hami_kubesim.stack.state import ClusterState, Outcome, failed_scheduling, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SystemSpec, gpu_model_node
from hami_protocol.totals import NVIDIA_CORES, NVIDIA_MEMORY

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE = "e2e-totals"
NS = "totals"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def totals() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=(gpu_model_node(NODE, "NVIDIA A100", count=2, memory_mib=8000),),
        namespaces=("default", "kube-system", "hami-system", NS),
        capacity_totals=True,
    )
    async with running_system(spec) as running:
        await running.wait_for(_advertised, within=30, what="totals in allocatable")
        yield running


def _advertised(state: ClusterState) -> bool:
    node = state.node(NODE)
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    return allocatable.get(NVIDIA_MEMORY) == "16000" and allocatable.get(NVIDIA_CORES) == "200"


def _pod(name: str, memory: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory), "nvidia.com/gpucores": "30"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }


async def _settle(system: System, name: str) -> tuple[ClusterState, Mapping[str, Any]]:
    await system.create(_pod(name, {"first": 6000, "second": 12000}[name]))
    state = await system.wait_for(settled([f"{NS}/{name}"]), within=60, what=f"{name} settles")
    pod = state.pod(NS, name)
    assert pod is not None
    return state, pod


async def test_pods_carry_totals_and_kube_scheduler_counts_them(totals: System) -> None:
    state, first = await _settle(totals, "first")
    assert outcome(state, first) is Outcome.RUNNING
    resources = first["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        assert resources[section][NVIDIA_MEMORY] == "6000"
        assert resources[section][NVIDIA_CORES] == "30"
    # 12000 MiB on one GPU: the node has 10000 MiB left in total, so NodeResourcesFit says no
    # before the extender is asked.
    state, second = await _settle(totals, "second")
    assert outcome(state, second) is Outcome.UNSCHEDULABLE
    assert "Insufficient hami.io/nvidia-memory" in failed_scheduling(state, second)[-1]
