"""Usage beside allocation through the map's port: the scheduler finds each node's vGPU monitor
through the monitor Service's EndpointSlices, scrapes fake monitors on real sockets only when
the map is asked for, remembers the answer, and never fails the page — an unreachable monitor,
one that answers too slowly and a node without a monitor each show null usage with the reason."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from hami_kubesim.objects.services import endpoint_slice, selectorless_service
from hami_kubesim.testing import eventually, start_app
from hami_scheduler.gpumap.monitors import UsageCollector

from ..service_helpers import Harness, container, gpu_limits, gpus, harness, pod_object
from .test_service_gpumap import get, served

pytestmark = pytest.mark.timeout(60)

MIB = 1 << 20
NAMESPACE, SERVICE = "hami-system", "hami-device-plugin-monitor"
TIMEOUT_S = 0.5


@dataclass
class FakeMonitor:
    """A monitor's ``/metrics`` on a real socket: its text, how often it was asked, and
    (``hold``) an answer held back until the test lets it go."""

    text: str = ""
    hits: int = 0
    hold: asyncio.Event | None = None
    port: int = 0
    runner: web.AppRunner | None = field(default=None, repr=False)

    async def metrics(self, _: web.Request) -> web.Response:
        self.hits += 1
        if self.hold is not None:
            await self.hold.wait()
        return web.Response(text=self.text, content_type="text/plain")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        self.runner, self.port = await start_app(app, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        if self.runner is not None:
            await self.runner.cleanup()


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def container_series(pod: str, uuid: str, used: int, limit: int, util: float) -> str:
    labels = (
        f'{{namespace="default",pod="{pod}",container="main",vdevice_index="0",'
        f'device_uuid="{uuid[:40]}",zone="vGPU"}}'
    )
    return (
        f"hami_vgpu_memory_used_bytes{labels} {used}\n"
        f"hami_vgpu_memory_limit_bytes{labels} {limit}\n"
        f"hami_container_device_utilization_ratio{labels} {util}\n"
    )


async def publish_monitors(h: Harness, ports: dict[str, int]) -> None:
    """The chart's monitor Service, one EndpointSlice per node's monitor (as the DaemonSet's
    pods would have, each naming its node)."""
    if h.api.try_get("namespaces", NAMESPACE) is None:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await h.api.create("namespaces", namespace)
    await h.api.create("services", selectorless_service(NAMESPACE, SERVICE, {"monitor": 9394}))
    for node, port in ports.items():
        await h.api.create(
            "endpointslices",
            endpoint_slice(
                NAMESPACE, SERVICE, f"{SERVICE}-{node}", "127.0.0.1", {"monitor": port},
                node_name=node,
            ),
        )  # fmt: skip


@contextlib.asynccontextmanager
async def monitored() -> AsyncIterator[tuple[Harness, FakeMonitor, FakeMonitor]]:
    good, slow = FakeMonitor(), FakeMonitor(hold=asyncio.Event())
    await good.start()
    await slow.start()
    try:
        async with harness(
            gpumap_bind_address="127.0.0.1:0",
            gpumap_monitors=f"{NAMESPACE}/{SERVICE}",
            gpumap_monitor_timeout_s=TIMEOUT_S,
        ) as h:
            for node in ("n", "slow", "gone", "bare"):
                await h.add_node(node, gpus(node, 1, mem=8000))
                await h.synced_node(node)
            await publish_monitors(h, {"n": good.port, "slow": slow.port, "gone": closed_port()})
            yield h, good, slow
    finally:
        await good.stop()
        await slow.stop()


def collector(h: Harness) -> UsageCollector:
    usage = served(h).usage
    assert usage is not None
    return usage


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["name"]: node for node in doc["nodes"]}


async def test_usage_beside_allocation_and_the_reason_where_there_is_none() -> None:
    async with monitored() as (h, good, slow):
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=3000, cores=30))))
        assert (await h.schedule(pod, ["n"]))["NodeNames"] == ["n"]
        await eventually(lambda: h.scheduler.cache.holding(pod["metadata"]["uid"]) is not None)
        (card,) = h.granted("p", "NVIDIA")
        good.text = container_series("p", card, 1200 * MIB, 3000 * MIB, 25)
        # Lazy: nothing is scraped until the map is asked for (other views do not count).
        await get(h, "api/v1/pending")
        assert (good.hits, slow.hits, collector(h).scrapes) == (0, 0, 0)

        started = time.monotonic()
        status, doc, _ = await get(h, "api/v1/map")
        waited = time.monotonic() - started
        assert status == 200
        # The slow monitor held its answer: the page waited for it at most the timeout.
        assert waited < TIMEOUT_S + 2.0
        assert doc["usage"] == {"enabled": True, "maxAgeSeconds": 15.0, "timeoutSeconds": 0.5}
        nodes = by_name(doc)
        assert nodes["n"]["monitor"]["error"] is None
        assert nodes["n"]["monitor"]["url"] == f"http://127.0.0.1:{good.port}/metrics"
        (device,) = nodes["n"]["devices"]
        (holder,) = device["holders"]
        assert (holder["memory"], holder["cores"]) == (3000, 30)
        assert holder["usage"] == {
            "memoryUsed": 1200,
            "memoryLimit": 3000,
            "utilization": 25,
            "overLimit": False,
        }
        assert device["usage"]["memoryUsed"] == 1200
        assert device["usage"]["source"] == "containers"
        for name, reasons in (
            ("gone", ("unreachable",)),
            # Held back: the page stopped waiting (or, on a loaded machine, the scrape's own
            # limit came first).
            ("slow", ("not answered yet", "no answer within")),
            ("bare", ("no endpoint of the Service hami-system/hami-device-plugin-monitor",)),
        ):
            error = str(nodes[name]["monitor"]["error"])
            assert any(reason in error for reason in reasons), (name, error)
            assert all(d["usage"] is None for d in nodes[name]["devices"])

        # Remembered: asking again within the max age scrapes nothing new, and the slow
        # monitor's scrape still in flight is not started twice.
        scrapes = collector(h).scrapes
        assert scrapes == 3
        _, again, _ = await get(h, "api/v1/map")
        assert by_name(again)["n"]["devices"][0]["holders"][0]["usage"]["memoryUsed"] == 1200
        assert (good.hits, collector(h).scrapes) == (1, scrapes)

        # The slow one hits the per-scrape timeout: then it says so.
        async def timed_out() -> bool:
            _, later, _ = await get(h, "api/v1/map")
            return "no answer within 0.5s" in str(by_name(later)["slow"]["monitor"]["error"])

        await eventually(timed_out, within=10, what="the slow monitor's scrape times out")
        assert slow.hits == 1

        # The page shows the figures beside the allocation, and says "no data" elsewhere.
        status, page, _ = await get(h, "")
        assert status == 200
        assert "used 1,200 MiB of 3,000 MiB, utilization 25 %" in page
        assert "no answer within 0.5s" in page
        assert "Measured usage read" in page


async def test_usage_off_says_so_and_scrapes_nothing() -> None:
    async with harness(gpumap_bind_address="127.0.0.1:0", gpumap_monitors="") as h:
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        assert served(h).usage is None
        _, doc, _ = await get(h, "api/v1/map")
        assert doc["usage"] == {"enabled": False}
        (node,) = doc["nodes"]
        assert node["monitor"] is None
        assert node["devices"][0]["usage"] is None
