"""The order and pace of the kubelet stand-in's admissions, and the knob that pauses or slows it.

The queue alone on virtual time; then the stand-in against the API server and the knob through
``/_sim/kubelets``, on real time (the stand-in's gRPC servers work in threads the virtual clock
does not see, so their shutdown could be overtaken), with short delays.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hami_kubesim.kubelet.pods.admission import AdmissionQueue
from hami_kubesim.kubelet.testing import TEST_NODE, device_pod, kubelet_on_node, pod_phase
from hami_kubesim.testing import eventually


async def _take(queue: AdmissionQueue, count: int) -> list[str]:
    return [await queue.next() for _ in range(count)]


@pytest.mark.looptime
async def test_a_batch_is_admitted_in_creation_order_and_later_arrivals_wait_for_the_next() -> None:
    queue = AdmissionQueue()
    queue.put("c", "2024-01-01T00:00:03Z")
    queue.put("a", "2024-01-01T00:00:01Z")
    queue.put("b1", "2024-01-01T00:00:02Z")
    queue.put("b2", "2024-01-01T00:00:02Z")  # same second: arrival order
    assert await queue.next() == "a"
    queue.put("early", "2024-01-01T00:00:00Z")  # arrives during the batch: next batch
    assert await _take(queue, 4) == ["b1", "b2", "c", "early"]
    assert queue.batches == 2
    assert queue.waiting == 0


@pytest.mark.looptime
async def test_pause_holds_admission_and_resume_admits_everything_as_one_batch() -> None:
    loop = asyncio.get_running_loop()
    queue = AdmissionQueue()
    queue.put("b", "2024-01-01T00:00:02Z")
    queue.put("c", "2024-01-01T00:00:03Z")
    assert await queue.next() == "b"
    queue.pause()
    queue.put("a", "2024-01-01T00:00:01Z")
    taking = asyncio.create_task(queue.next())
    started = loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3600):
            await asyncio.shield(taking)
    # Loop times are floats far from zero: a difference of 3600 s can round to 3599.999999999997.
    assert loop.time() - started >= 3600 - 1e-6
    assert queue.describe() == {"paused": True, "admissionDelaySeconds": 0.0, "waiting": 2}
    queue.resume()
    # The rest of the first batch and the pod that arrived while paused: one batch.
    assert await taking == "a"
    assert await queue.next() == "c"


@pytest.mark.looptime
async def test_every_admission_starts_the_delay_late() -> None:
    loop = asyncio.get_running_loop()
    queue = AdmissionQueue()
    queue.delay = 2.5
    for name in ("x", "y"):
        queue.put(name, "2024-01-01T00:00:00Z")
    started = loop.time()
    assert await queue.next() == "x"
    assert loop.time() - started == pytest.approx(2.5)
    assert await queue.next() == "y"
    assert loop.time() - started == pytest.approx(5.0)
    with pytest.raises(ValueError, match="non-negative"):
        queue.delay = -1
    with pytest.raises(ValueError, match="non-negative"):
        queue.delay = float("nan")


def _restored(name: str, created: str) -> dict[str, Any]:
    pod = device_pod(name, [("c", 0)], nodeName=TEST_NODE)
    pod["metadata"]["creationTimestamp"] = created
    return pod


async def test_the_stand_in_admits_pods_seen_together_in_creation_order(plugin_dir: Path) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        kubelet.pause()
        # Bound in the order c, a, b (creation times say a, b, c).
        for name, second in (("c", 3), ("a", 1), ("b", 2)):
            sim.server.restore("pods", _restored(name, f"2024-01-01T00:00:0{second}Z"))
        await eventually(lambda: kubelet.describe()["waiting"] == 3)
        assert kubelet.admission_log == []
        assert all(pod_phase(sim, name) == "Pending" for name in "abc")
        kubelet.resume()
        await eventually(lambda: all(pod_phase(sim, name) == "Running" for name in "abc"))
        assert kubelet.admission_log == ["default/a", "default/b", "default/c"]


async def test_an_admission_delay_slows_every_pod(plugin_dir: Path) -> None:
    loop = asyncio.get_running_loop()
    async with kubelet_on_node(plugin_dir, admission_delay=0.2) as (sim, kubelet):
        assert kubelet.admission_delay == 0.2
        started = loop.time()
        for name in ("one", "two"):
            await sim.server.create("pods", device_pod(name, [("c", 0)], nodeName=TEST_NODE))
        await eventually(lambda: pod_phase(sim, "two") == "Running")
        assert loop.time() - started >= 0.4  # one after the other, each 0.2 s late
        kubelet.set_admission_delay(0)
        await sim.server.create("pods", device_pod("three", [("c", 0)], nodeName=TEST_NODE))
        await eventually(lambda: pod_phase(sim, "three") == "Running")
        assert kubelet.admission_log == ["default/one", "default/two", "default/three"]


async def test_the_knob_over_http(plugin_dir: Path) -> None:
    async with (
        kubelet_on_node(plugin_dir) as (sim, kubelet),
        aiohttp.ClientSession(base_url=sim.url) as http,
    ):
        sim.server.kubelets[TEST_NODE] = kubelet  # what running_cluster does

        async def post(path: str, body: Any = None) -> tuple[int, Any]:
            async with http.post(path, json=body) as response:
                return response.status, await response.json()

        status, state = await post(f"/_sim/kubelets/{TEST_NODE}/pause")
        assert (status, state["paused"], state["node"]) == (200, True, TEST_NODE)
        assert kubelet.paused
        await sim.server.create("pods", device_pod("held", [("c", 0)], nodeName=TEST_NODE))
        await eventually(lambda: kubelet.describe()["waiting"] == 1)
        async with http.get(f"/_sim/kubelets/{TEST_NODE}") as response:
            assert (await response.json())["waiting"] == 1
        status, state = await post(f"/_sim/kubelets/{TEST_NODE}/admission-delay", {"seconds": 1.5})
        assert (status, state["admissionDelaySeconds"]) == (200, 1.5)
        status, state = await post(f"/_sim/kubelets/{TEST_NODE}/resume")
        assert (status, state["paused"]) == (200, False)
        await eventually(lambda: pod_phase(sim, "held") == "Running")
        status, _ = await post(f"/_sim/kubelets/{TEST_NODE}/restart")
        assert (status, kubelet.restarts) == (200, 1)
        async with http.get("/_sim/kubelets") as response:
            assert [k["node"] for k in (await response.json())["kubelets"]] == [TEST_NODE]

        status, error = await post("/_sim/kubelets/elsewhere/pause")
        assert (status, error["reason"]) == (404, "NotFound")
        assert "no kubelet stand-in runs for node 'elsewhere'" in error["message"]
        status, error = await post(f"/_sim/kubelets/{TEST_NODE}/jump")
        assert status == 404
        assert "unknown kubelet action 'jump'" in error["message"]
        for bad in ({"seconds": -1}, {"seconds": "soon"}, {}, {"seconds": True}):
            status, error = await post(f"/_sim/kubelets/{TEST_NODE}/admission-delay", bad)
            assert status == 400, bad
        assert kubelet.admission_delay == 1.5
