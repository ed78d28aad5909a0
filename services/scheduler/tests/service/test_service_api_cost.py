"""What the extender sends the API server per scheduled pod: two writes (the node lock and the
Binding that carries the decision), no read — one pod at a time and in a burst on one node (where a
bind waiting in line may read the lock's owner once, when the pod watch lags behind, and a lock
write that loses the race with the plugin's release is refused and retried); one write (the
Binding) on a node whose device plugin identifies pods through the kubelet.

The requests are counted at the API server's HTTP door (an aiohttp middleware on the emulated
API server) by User-Agent (``hami``: these tests build Settings directly, without the
service's ``hami-scheduler``).  List and watch requests (the caches' standing cost) and Events
are left out, as in the issue's count of HAMi's requests.  (Once kubesim exports
``kubesim_client_requests_total``, this count can read it instead of the middleware.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hami_kubesim.apiserver.http.app import create_app
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.testing import RunningApiServer, format_url, start_app
from hami_protocol import keys
from hami_protocol.node.identity import format_identity

from ..service_helpers import (
    Harness,
    container,
    eventually,
    gpu_limits,
    gpus,
    pod_object,
    scheduler_on,
)

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Requests:
    """``(method, path)`` of every request the scheduler sent that is not a list, a watch or an
    Event."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.conflicts: list[tuple[str, str]] = []
        """Writes answered 409: a lock write that lost the race with another writer of the
        node (here the plugin's release) is retried on the fresh object, one request more."""

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        agent = request.headers.get("User-Agent", "")
        listing = request.method == "GET" and (
            "watch" in request.query or request.path.rstrip("/").endswith(("/pods", "/nodes"))
        )
        response = await handler(request)
        if agent.startswith("hami") and not listing and "/events" not in request.path:
            seen = self.conflicts if response.status == 409 else self.seen
            seen.append((request.method, request.path))
        return response

    def counted(self) -> Counter[tuple[str, str]]:
        """The writes that took effect (conflicts apart, see :attr:`conflicts`)."""
        return Counter(
            (method, path)
            for method, path in self.seen
            if not path.endswith("/resourcequotas") and "/leases" not in path
        )


@contextlib.asynccontextmanager
async def counted_cluster() -> AsyncIterator[tuple[Harness, Requests]]:
    api = ApiServer()
    requests = Requests()
    app = create_app(api)
    app.middlewares.append(requests.middleware)
    runner, port = await start_app(app, "127.0.0.1", 0)
    sim = RunningApiServer(format_url("127.0.0.1", port), api, "127.0.0.1", port)
    try:
        async with scheduler_on(sim) as scheduler, aiohttp.ClientSession() as http:
            yield Harness(sim, scheduler, http), requests
    finally:
        api.shutdown()
        await runner.cleanup()


async def plugin(h: Harness, stop: asyncio.Event) -> None:
    """The device plugin's part, in-process (not counted): once a pod is bound, mark it
    allocated and release the lock it holds."""
    served: set[str] = set()
    while not stop.is_set():
        for pod in h.api.list("pods", namespace="default"):
            name = pod["metadata"]["name"]
            if name not in served and pod["spec"].get("nodeName"):
                served.add(name)
                await h.allocated(name, pod["spec"]["nodeName"])
        await asyncio.sleep(0.01)


def pod(name: str) -> dict[str, Any]:
    return pod_object(name, container(limits=gpu_limits(1, mem=1000)))


async def test_one_scheduled_pod_costs_two_writes_and_no_read() -> None:
    async with counted_cluster() as (h, requests):
        await h.add_node("n", gpus("n", 4))
        await h.synced_node("n")
        for name in ("a", "b", "c"):
            stored = await h.add_pod(pod(name))
            requests.seen.clear()
            assert (await h.filter(stored, ["n"]))["NodeNames"] == ["n"]
            assert requests.counted() == Counter()  # the filter writes nothing
            assert await h.bind(stored, "n") == ""
            assert requests.counted() == Counter(
                {
                    ("PATCH", "/api/v1/nodes/n"): 1,
                    ("POST", f"/api/v1/namespaces/default/pods/{name}/binding"): 1,
                }
            )
            await h.allocated(name, "n")
            await eventually(lambda: "n" not in h.scheduler.binder._waits.locks, what="released")


async def test_a_burst_on_one_node_costs_two_writes_per_pod() -> None:
    async with counted_cluster() as (h, requests):
        await h.add_node("n", gpus("n", 4))
        await h.synced_node("n")
        names = [f"p{i}" for i in range(4)]
        stored = [await h.add_pod(pod(name)) for name in names]
        for one in stored:
            assert (await h.filter(one, ["n"]))["NodeNames"] == ["n"]
        requests.seen.clear()
        stop = asyncio.Event()
        serving = asyncio.create_task(plugin(h, stop))
        try:
            errors = await asyncio.gather(*(h.bind(one, "n") for one in stored))
        finally:
            stop.set()
            await serving
        assert errors == [""] * len(names)
        counted = requests.counted()
        assert counted[("PATCH", "/api/v1/nodes/n")] == len(names)
        for name in names:
            assert counted[("POST", f"/api/v1/namespaces/default/pods/{name}/binding")] == 1
        writes = {request: n for request, n in counted.items() if request[0] != "GET"}
        assert sum(writes.values()) == 2 * len(names), counted
        # A bind waiting in line asks the lock owner's state of its cache, and reads the owner
        # once only when the pod watch has not yet shown it (a loaded machine): at most one read
        # per pod, and only of the pods in line.
        reads = {path for method, path in counted if method == "GET"}
        assert reads <= {f"/api/v1/namespaces/default/pods/{name}" for name in names}, counted
        assert sum(n for (method, _), n in counted.items() if method == "GET") < len(names)
        # A waiting bind may write the lock a moment before the plugin's release lands: that
        # write is refused (409) and retried once the release is seen. Only lock writes race.
        assert {path for _, path in requests.conflicts} <= {"/api/v1/nodes/n"}, requests.conflicts
        assert len(requests.conflicts) < len(names), requests.conflicts


async def test_where_the_plugin_identifies_pods_through_the_kubelet_a_bind_is_one_write() -> None:
    """``hami.io/node-allocate-identity: pod-resources``: no lock, no queue — a burst of binds to
    one node goes through while every earlier pod still waits for its Allocate."""
    identity = {keys.NODE_ALLOCATE_IDENTITY: format_identity(datetime.now(UTC))}
    async with counted_cluster() as (h, requests):
        await h.add_node("n", gpus("n", 4), annotations=identity)
        await h.synced_node("n")
        names = [f"p{i}" for i in range(4)]
        stored = [await h.add_pod(pod(name)) for name in names]
        for one in stored:
            assert (await h.filter(one, ["n"]))["NodeNames"] == ["n"]
        requests.seen.clear()
        # Nobody allocates: with a lock, every bind after the first would wait.
        async with asyncio.timeout(10):
            errors = await asyncio.gather(*(h.bind(one, "n") for one in stored))
        assert errors == [""] * len(names)
        assert requests.counted() == Counter(
            {("POST", f"/api/v1/namespaces/default/pods/{name}/binding"): 1 for name in names}
        )
        assert keys.NODE_LOCK not in (h.node("n")["metadata"].get("annotations") or {})
        for name in names:
            bound = h.pod(name)
            assert bound["spec"]["nodeName"] == "n"
            assert bound["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"


@pytest.mark.parametrize(
    "value",
    [
        keys.ALLOCATE_IDENTITY_POD_RESOURCES,  # what an earlier release wrote: no stamp
        f"{keys.ALLOCATE_IDENTITY_POD_RESOURCES} 2020-01-01 00:00:00",  # nobody restamps it
    ],
    ids=["unstamped", "stale"],
)
async def test_a_stale_identity_means_the_lock(value: str) -> None:
    """A plugin that stops restamping ``hami.io/node-allocate-identity`` (HAMi's deployed over
    ours, or ours killed) no longer spares binds the lock: the second bind waits for the first
    pod's Allocate instead of going through beside it."""
    async with counted_cluster() as (h, _):
        await h.add_node("n", gpus("n", 4), annotations={keys.NODE_ALLOCATE_IDENTITY: value})
        await h.synced_node("n")
        first, second = [await h.add_pod(pod(name)) for name in ("p0", "p1")]
        for one in (first, second):
            assert (await h.filter(one, ["n"]))["NodeNames"] == ["n"]
        assert await h.bind(first, "n") == ""
        assert keys.NODE_LOCK in (h.node("n")["metadata"].get("annotations") or {})
        waiting = asyncio.create_task(h.bind(second, "n"))
        waits = h.scheduler.binder._waits
        await eventually(lambda: dict(waits.waiting()) == {"n": 1}, what="p1 waits for the lock")
        await h.allocated("p0", "n")
        assert await waiting == ""
