"""The handshake loop: the leader requests, silent vendors leave the cache, and come back."""

from __future__ import annotations

import pytest

from hami_protocol import keys
from hami_protocol.node.handshake import format_reported, parse_handshake
from hami_scheduler.settings import LeaderElectSettings

from ..service_helpers import (
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    loop_now,
    pod_object,
    refused,
)

# Handshakes age in the loop's virtual time (hami_kubesim's looptime): the production timings
# (a 5-minute timeout, 30-second passes) run in milliseconds and expire exactly.
pytestmark = [pytest.mark.timeout(60), pytest.mark.looptime]

TIMEOUT_S = 300.0
INTERVAL_S = 30.0


def handshake_state(node: dict[str, object]) -> str:
    return parse_handshake(annotations_of(node).get(keys.NVIDIA_HANDSHAKE)).state


async def test_silent_vendor_becomes_unavailable_and_returns_when_it_reports() -> None:
    async with harness(
        now=loop_now, handshake_timeout_s=TIMEOUT_S, handshake_interval_s=INTERVAL_S
    ) as h:
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        # The leader asks...
        await eventually(
            lambda: handshake_state(h.node("n")) == "requesting",
            within=2 * INTERVAL_S,
            what="requested",
        )
        # ...nobody answers within the timeout: the node leaves the cache.
        asked = h.loop_time()
        await eventually(
            lambda: "n" not in h.scheduler.cache.nodes, within=2 * TIMEOUT_S, what="expired"
        )
        # Expired by the first pass after the timeout: not before, and not much after.
        # (Handshake times have whole seconds, so up to one second early.)
        assert TIMEOUT_S - 1 <= h.loop_time() - asked <= TIMEOUT_S + 2 * INTERVAL_S
        assert h.scheduler.cache.unavailable_count() == 1
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=100))))
        reply = await h.filter(pod, ["n"])
        assert refused(reply) == {
            "n": "NVIDIA devices unavailable: handshake hami.io/node-handshake "
            "not answered within 5m0s"
        }
        # The device plugin reports again: the node is back at once.
        await h.api.patch(
            "nodes",
            "n",
            {"metadata": {"annotations": {keys.NVIDIA_HANDSHAKE: format_reported(loop_now())}}},
            patch_type="merge",
        )
        await h.synced_node("n")
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]


async def test_a_node_advertising_the_resource_stays_available() -> None:
    async with harness(
        now=loop_now, handshake_timeout_s=TIMEOUT_S, handshake_interval_s=INTERVAL_S
    ) as h:
        await h.add_node("n", gpus("n", 1), allocatable={"nvidia.com/gpu": "10"})
        await h.synced_node("n")
        await eventually(
            lambda: handshake_state(h.node("n")) == "requesting",
            within=2 * INTERVAL_S,
            what="requested",
        )
        passes = h.scheduler.handshakes.passes
        await eventually(
            lambda: h.scheduler.handshakes.passes > passes + 25,
            within=40 * INTERVAL_S,
            what="passes",
        )
        assert "n" in h.scheduler.cache.nodes
        assert h.scheduler.cache.unavailable_count() == 0


async def test_a_node_that_stops_advertising_the_resource_is_unavailable_at_once() -> None:
    # A long handshake timeout: only the allocatable count can explain what follows.
    async with harness(
        now=loop_now, handshake_timeout_s=3600.0, handshake_interval_s=INTERVAL_S
    ) as h:

        async def advertise(count: str) -> None:
            status = {
                "allocatable": {"nvidia.com/gpu": count},
                "capacity": {"nvidia.com/gpu": count},
            }
            await h.api.patch(
                "nodes", "n", {"status": status}, patch_type="merge", subresource="status"
            )

        await h.add_node("n", gpus("n", 1), allocatable={"nvidia.com/gpu": "10"})
        await h.synced_node("n")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=100))))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]

        # The device plugin left the kubelet: allocatable drops to 0.
        await advertise("0")
        await eventually(lambda: "n" not in h.scheduler.cache.nodes, what="withdrawn")
        reply = await h.filter(pod, ["n"])
        assert refused(reply) == {
            "n": "NVIDIA devices unavailable: the node stopped advertising nvidia.com/gpu "
            "(its device plugin is not registered)"
        }
        assert h.scheduler.cache.unavailable_count() == 1

        # It registers again: the node is back with its devices.
        await advertise("10")
        await h.synced_node("n")
        assert h.scheduler.cache.unavailable_count() == 0
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]


async def test_a_node_that_never_advertised_the_resource_waits_for_the_handshake() -> None:
    # Registered devices before the kubelet lists the plugin's resource (a node coming up).
    async with harness(
        now=loop_now, handshake_timeout_s=3600.0, handshake_interval_s=INTERVAL_S
    ) as h:
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        await eventually(
            lambda: handshake_state(h.node("n")) == "requesting",
            within=2 * INTERVAL_S,
            what="requested",
        )
        assert h.scheduler.cache.unavailable_count() == 0
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=100))))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]


async def test_followers_judge_but_never_write() -> None:
    async with harness(
        now=loop_now,
        handshake_timeout_s=TIMEOUT_S,
        handshake_interval_s=INTERVAL_S,
        leader=LeaderElectSettings(enabled=True, mode="follow", identity="nobody-holds-it"),
    ) as h:
        assert not h.scheduler.leadership.is_leader
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        passes = h.scheduler.handshakes.passes
        await eventually(
            lambda: h.scheduler.handshakes.passes > passes + 5,
            within=10 * INTERVAL_S,
            what="passes",
        )
        assert handshake_state(h.node("n")) == "reported"
        # A stale request left by a former leader is judged by followers too.
        await h.api.patch(
            "nodes",
            "n",
            {
                "metadata": {
                    "annotations": {keys.NVIDIA_HANDSHAKE: "Requesting_2020-01-01 00:00:00"}
                }
            },
            patch_type="merge",
        )
        await eventually(lambda: "n" not in h.scheduler.cache.nodes, what="judged unavailable")
        assert annotations_of(h.node("n"))[keys.NVIDIA_HANDSHAKE] == (
            "Requesting_2020-01-01 00:00:00"
        )
