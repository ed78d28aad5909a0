"""Topology-aware placement from the scores the device plugin wrote.

One node of four GPUs on two NUMA nodes (0-1 and 2-3) whose only NVLinks (4) join GPUs 1 and 2,
across the NUMA boundary: with no scores the topology-aware policy would take the first pair
(0, 1); with the plugin's scores (``--enable-topology-score``: 410 for 1-2, 20 within a NUMA node,
10 across) it must take 1 and 2.  Nothing but the plugin writes ``hami.io/node-nvidia-score``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from hami_kube.objects import ObjectView
from hami_kubesim.stack.state import ClusterState, Outcome, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, gpu_model_node
from hami_protocol import keys
from hami_protocol.node.pairscore import decode_pair_scores
from hami_protocol.pod.devices import decode_pod_devices_canonical

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE = "e2e-nvlink"
NS = "topology-scores"
_BASE = gpu_model_node(NODE, "NVIDIA H100", count=4, memory_mib=81920, numa_nodes=2)
UUIDS = [gpu.uuid for gpu in _BASE.gpus]
LINKED = {UUIDS[1], UUIDS[2]}
NVLINK_NODE = dataclasses.replace(
    _BASE, links=({"from": UUIDS[1], "to": UUIDS[2], "nvlinks": 4},), topology_score=True
)


def _scored(state: ClusterState) -> bool:
    node = state.node(NODE)
    return node is not None and keys.NVIDIA_SCORE in ObjectView(node).annotations


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nvlinked() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=(NVLINK_NODE,),
        namespaces=("default", "kube-system", "hami-system", NS),
        scheduler=SchedulerOptions(node_lock_timeout="5s"),
    )
    async with running_system(spec) as running:
        await running.wait_for(_scored, within=30, what="the plugin's pair scores")
        await running.wait_schedulers_see_nodes(1)
        yield running


def _pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {keys.GPU_SCHEDULER_POLICY: "topology-aware"},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "train",
                    "image": "example.invalid/train",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": "1000"}
                    },
                }
            ],
        },
    }


async def _gpus_of(system: System, pod: dict[str, Any]) -> set[str]:
    name = pod["metadata"]["name"]
    await system.create(pod)
    state = await system.wait_for(settled([f"{NS}/{name}"]), within=60, what=f"{name} settles")
    stored = state.pod(NS, name)
    assert stored is not None
    assert outcome(state, stored) is Outcome.RUNNING, stored.get("status")
    notes = ObjectView(stored).annotations
    [devices] = decode_pod_devices_canonical(notes[keys.NVIDIA_DEVICES_ALLOCATED])
    return {device.uuid for device in devices}


async def test_the_plugin_scores_its_gpu_pairs(nvlinked: System) -> None:
    state = nvlinked.state()
    node = state.node(NODE)
    assert node is not None
    scores = {
        entry.uuid: dict(entry.scores)
        for entry in decode_pair_scores(ObjectView(node).annotations[keys.NVIDIA_SCORE])
    }
    assert scores[UUIDS[1]][UUIDS[2]] == scores[UUIDS[2]][UUIDS[1]] == 410
    assert scores[UUIDS[0]][UUIDS[1]] == 20
    assert scores[UUIDS[0]][UUIDS[3]] == 10


async def test_two_gpus_land_on_the_nvlinked_pair(nvlinked: System) -> None:
    assert await _gpus_of(nvlinked, _pod("pair", 2)) == LINKED


async def test_one_gpu_keeps_the_nvlinked_pair_free(nvlinked: System) -> None:
    # One GPU goes to the worst-connected candidate, never to one of the linked pair.
    gpus = await _gpus_of(nvlinked, _pod("single", 1))
    assert len(gpus) == 1
    assert not gpus & LINKED
