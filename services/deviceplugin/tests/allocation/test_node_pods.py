"""The pods Allocate reads: a node-scoped watch plus what the plugin wrote or read since, against
kubesim's API server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from hami_deviceplugin.allocation.node_pods import NodePods
from hami_kube.config import KubeSettings
from hami_kube.objects import ObjectView
from hami_kube.patch import patch_metadata
from hami_kube.resources import PODS
from hami_kube.rest import open_client
from hami_kubesim.testing import RunningApiServer

from ..helpers import NODE, container, eventually, scheduled_pod


@contextlib.asynccontextmanager
async def watching(sim: RunningApiServer) -> AsyncIterator[NodePods]:
    async with open_client(KubeSettings(kube_url=sim.url)) as client:
        pods = NodePods(client, NODE)
        task = asyncio.create_task(pods.reflector.run(), name="node-pods")
        try:
            await pods.reflector.wait_synced()
            yield pods
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def version(pods: NodePods, key: str) -> str | None:
    found = pods.snapshot().get(key)
    return None if found is None else ObjectView(found).resource_version


async def test_only_pods_bound_here_and_a_newer_copy_until_the_watch_moves(
    sim: RunningApiServer,
) -> None:
    await sim.server.create("pods", scheduled_pod("here", [container("c", 1)], to_allocate=";"))
    await sim.server.create("pods", scheduled_pod("away", [container("c", 1)], to_allocate=";"))
    await sim.server.bind("default", "here", NODE)
    async with watching(sim) as pods:
        assert set(pods.snapshot()) == {"default/here"}
        watched = version(pods, "default/here")
        # A copy newer than the watch's (our own write) is served while the watch shows the
        # version it replaced ...
        newer = dict(sim.server.get("pods", "here", namespace="default"))
        newer["metadata"] = {**newer["metadata"], "resourceVersion": "999999"}
        pods.remember(newer)
        assert version(pods, "default/here") == "999999"
        # ... and dropped as soon as the watch shows anything else.
        await sim.server.patch(
            "pods",
            "here",
            {"metadata": {"labels": {"x": "1"}}},
            namespace="default",
            patch_type="merge",
        )
        await eventually(lambda: version(pods, "default/here") not in (watched, "999999"))
        assert pods.reads == 0


async def test_misses_cost_one_read_each(sim: RunningApiServer) -> None:
    async with watching(sim) as pods:
        await sim.server.create("pods", scheduled_pod("late", [container("c", 1)], to_allocate=";"))
        await sim.server.bind("default", "late", NODE)
        await sim.server.create("pods", scheduled_pod("away", [container("c", 1)], to_allocate=";"))
        found = await pods.fetch("default/late")
        assert found is not None
        assert await pods.fetch("default/away") is None  # not bound here
        assert await pods.fetch("default/gone") is None
        assert set(await pods.relist()) == {"default/late"}
        assert pods.reads == 4
        assert "default/late" in pods.snapshot()


async def test_our_write_is_seen_by_the_next_call_before_the_watch(sim: RunningApiServer) -> None:
    await sim.server.create("pods", scheduled_pod("p", [container("c", 1)], to_allocate=";"))
    await sim.server.bind("default", "p", NODE)
    async with watching(sim) as pods, open_client(KubeSettings(kube_url=sim.url)) as client:
        written = await patch_metadata(
            client, PODS, "p", namespace="default", annotations={"step": "1"}
        )
        pods.remember(written)
        snapshot = pods.snapshot()["default/p"]
        assert ObjectView(snapshot).annotations["step"] == "1"
