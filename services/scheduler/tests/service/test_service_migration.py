"""Counting every pod: the pod watch takes every bound pod that carries an allocation, labelled
or not — pods placed by HAMi before 2.5 (annotation, no ``hami.io/vgpu-node`` label) and pods
whose decision arrived with their Binding."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from hami_kubesim.testing import running_apiserver
from hami_protocol import keys

from ..service_helpers import (
    Harness,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    node_object,
    pod_object,
    register_annotations,
    scheduler_on,
)

pytestmark = pytest.mark.timeout(60)


def old_hami_pod(name: str, node: str, allocated: str, **extra: str) -> dict[str, Any]:
    """A running pod as HAMi < 2.5 left it: bound, annotated, no label."""
    pod = pod_object(
        name,
        container(limits=gpu_limits(1, mem=4000)),
        annotations={
            keys.VGPU_NODE: node,
            keys.NVIDIA_DEVICES_ALLOCATED: allocated,
            keys.NVIDIA_DEVICES_TO_ALLOCATE: ";",
            keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS,
            **extra,
        },
    )
    pod["spec"]["nodeName"] = node
    return pod


async def test_pods_placed_by_an_old_hami_are_counted_and_never_handed_out_again() -> None:
    async with running_apiserver() as sim:
        for node in ("a", "b"):
            await sim.server.create(
                "nodes", node_object(node, register_annotations(gpus(node, 2, mem=8000)))
            )
        # Every GPU of node a is full, node b's first GPU half full.
        for index, (node, gpu, mem) in enumerate([("a", 0, 8000), ("a", 1, 8000), ("b", 0, 4000)]):
            await sim.server.create(
                "pods", old_hami_pod(f"old-{index}", node, f"GPU-{node}-{gpu},NVIDIA,{mem},0:;")
            )
        # Bound pods without any allocation are not kept; an unbound one is not even listed.
        plain = pod_object("plain", container(limits={"cpu": "1"}))
        plain["spec"]["nodeName"] = "a"
        await sim.server.create("pods", plain)
        await sim.server.create(
            "pods",
            pod_object(
                "filtered-not-bound",
                annotations={
                    keys.VGPU_NODE: "b",
                    keys.NVIDIA_DEVICES_ALLOCATED: "GPU-b-1,NVIDIA,8000,0:;",
                },
            ),
        )
        async with scheduler_on(sim) as scheduler:
            await eventually(lambda: scheduler.cache.pod_count == 3, what="old pods counted")
            assert len(scheduler.watcher.pods.store) == 3
            usage = {
                (name, d.uuid): d.usedmem
                for name, node in scheduler.cache.nodes.items()
                for d in node.devices
            }
            assert usage == {
                ("a", "GPU-a-0"): 8000,
                ("a", "GPU-a-1"): 8000,
                ("b", "GPU-b-0"): 4000,
                ("b", "GPU-b-1"): 0,
            }
            async with aiohttp.ClientSession() as http:
                h = Harness(sim, scheduler, http)
                big = await h.add_pod(pod_object("big", container(limits=gpu_limits(1, mem=5000))))
                reply = await h.filter(big, ["a", "b"])
                assert reply["NodeNames"] == ["b"]
                assert reply["FailedNodes"] == {"a": "2/2 CardInsufficientMemory"}
                assert await h.bind(big, "b") == ""
                notes = h.pod("big")["metadata"]["annotations"]
                assert notes[keys.NVIDIA_DEVICES_ALLOCATED].startswith("GPU-b-1,")
                again = await h.add_pod(
                    pod_object("again", container(limits=gpu_limits(1, mem=5000)))
                )
                reply = await h.filter(again, ["a", "b"])
                assert reply["NodeNames"] is None
                assert reply["FailedNodes"] == {
                    "a": "2/2 CardInsufficientMemory",
                    "b": "2/2 CardInsufficientMemory",
                }


async def test_a_decision_that_arrives_with_its_binding_is_counted() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 1, mem=8000))
        await h.synced_node("n")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=6000))))
        # Another replica (or an older extender) bound it: the decision rides in the Binding.
        await h.api.bind(
            "default",
            "p",
            "n",
            annotations={
                keys.VGPU_NODE: "n",
                keys.NVIDIA_DEVICES_ALLOCATED: "GPU-n-0,NVIDIA,6000,0:;",
                keys.NVIDIA_DEVICES_TO_ALLOCATE: "GPU-n-0,NVIDIA,6000,0:;",
            },
        )
        uid = pod["metadata"]["uid"]
        await eventually(lambda: h.scheduler.cache.holding(uid) is not None, what="counted")
        other = await h.add_pod(pod_object("q", container(limits=gpu_limits(1, mem=3000))))
        reply = await h.filter(other, ["n"])
        assert reply["FailedNodes"] == {"n": "1/1 CardInsufficientMemory"}
        # Its allocation annotations removed: it leaves the watch, and what it held is freed.
        await h.api.patch(
            "pods",
            "p",
            {
                "metadata": {
                    "annotations": {
                        keys.NVIDIA_DEVICES_ALLOCATED: None,
                        keys.NVIDIA_DEVICES_TO_ALLOCATE: None,
                    }
                }
            },
            namespace="default",
            patch_type="merge",
        )
        await eventually(lambda: h.scheduler.cache.holding(uid) is None, what="released")
        assert (await h.filter(other, ["n"]))["NodeNames"] == ["n"]
