"""The pod-resources client against real unix sockets: the kubelet stand-in's server, and kubelets
that misbehave (no socket, no ``v1`` service, no answer).  Every failure gives None, logged once
per reason, and the next call tries again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import structlog

from hami_deviceplugin.allocation.identity import ListedContainer, ListedPod
from hami_deviceplugin.kubelet.podresources import PodResourcesClient
from hami_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from hami_kubesim.kubelet.podresources import ListedContainer as KubeletContainer
from hami_kubesim.kubelet.podresources import ListedPod as KubeletPod
from hami_kubesim.kubelet.podresources import PodResourcesServer

UNAVAILABLE = "kubelet pod-resources API unavailable; pods are identified without it"
ROOMY_S = 10.0
"""The deadline of calls that are to be answered (or refused) by the server: the product's 1 s
is what a kubelet answering from memory needs, not what a loaded 2-core machine may take to
connect and serve a first call."""


class Source:
    """What the stand-in's server lists (a fixed answer)."""

    def __init__(self, pods: Sequence[KubeletPod]) -> None:
        self.pods = list(pods)

    def active_pods(self) -> Sequence[KubeletPod]:
        return self.pods

    def known_pod(self, namespace: str, name: str) -> KubeletPod | None:
        return None

    def allocatable_devices(self) -> Mapping[str, Sequence[str]]:
        return {}


@contextlib.asynccontextmanager
async def kubelet(
    socket: Path, servicer: api_pb2_grpc.PodResourcesListerServicer | None
) -> AsyncIterator[None]:
    """A gRPC server on ``socket`` serving ``servicer`` as ``v1.PodResourcesLister`` (None: no
    such service, as an old kubelet)."""
    server = grpc.aio.server()
    if servicer is not None:
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(None)


class Hanging(api_pb2_grpc.PodResourcesListerServicer):
    """Takes ``List`` and never answers it (the server's stop ends the call)."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def List(
        self,
        request: api_pb2.ListPodResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.ListPodResourcesResponse:
        self.asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def Get(
        self,
        request: api_pb2.GetPodResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.GetPodResourcesResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not served")

    async def GetAllocatableResources(
        self,
        request: api_pb2.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.AllocatableResourcesResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "not served")


def warnings(logs: Sequence[Mapping[str, Any]]) -> list[object]:
    return [entry.get("reason") for entry in logs if entry["event"] == UNAVAILABLE]


async def test_lists_what_the_kubelet_shows(plugin_dir: Path) -> None:
    socket = plugin_dir / "pod-resources" / "kubelet.sock"
    pods = [
        KubeletPod(
            "ns",
            "a",
            (
                KubeletContainer("main", (("nvidia.com/gpu", ("GPU-a-0", "GPU-b-1")),)),
                KubeletContainer("side"),
            ),
        )
    ]
    server = PodResourcesServer(socket_path=socket, source=Source(pods))
    await server.start()
    client = PodResourcesClient(socket, deadline_s=ROOMY_S)
    try:
        assert await client.list() == (
            ListedPod(
                "ns",
                "a",
                (
                    ListedContainer("main", (("nvidia.com/gpu", ("GPU-a-0", "GPU-b-1")),)),
                    ListedContainer("side"),
                ),
            ),
        )
        assert await client.list() is not None  # the channel is kept
        assert server.calls["List"] == 2
    finally:
        await client.close()
        await server.stop()


async def test_no_socket_then_a_kubelet_that_answers(plugin_dir: Path) -> None:
    socket = plugin_dir / "kubelet.sock"
    client = PodResourcesClient(socket, deadline_s=ROOMY_S)
    with structlog.testing.capture_logs() as logs:
        assert await client.list() is None
        assert await client.list() is None
        server = PodResourcesServer(socket_path=socket, source=Source([]))
        await server.start()
        try:
            assert await client.list() == ()
        finally:
            await client.close()
            await server.stop()
    assert warnings(logs) == [f"no socket at {socket}"]  # once, not per call
    assert [e["event"] for e in logs][-1] == "kubelet pod-resources API answers again"
    assert (client.calls, client.failures) == (3, 2)


async def test_a_kubelet_without_the_v1_service(plugin_dir: Path) -> None:
    socket = plugin_dir / "kubelet.sock"
    client = PodResourcesClient(socket, deadline_s=ROOMY_S)
    async with kubelet(socket, None):
        with structlog.testing.capture_logs() as logs:
            assert await client.list() is None
            assert await client.list() is None
    await client.close()
    (reason,) = warnings(logs)
    assert str(reason).startswith("UNIMPLEMENTED")


async def test_a_kubelet_that_does_not_answer_costs_the_deadline_only(plugin_dir: Path) -> None:
    socket = plugin_dir / "kubelet.sock"
    client = PodResourcesClient(socket, deadline_s=0.2)
    async with kubelet(socket, Hanging()):
        started = time.monotonic()
        assert await client.list() is None
        # The deadline and a connect on a loaded machine; the server would never answer.
        assert time.monotonic() - started < 5.0
    await client.close()


async def test_a_call_cut_by_another_callers_failure_is_a_failure_not_a_cancellation(
    plugin_dir: Path,
) -> None:
    # The registrar and an Allocate may ask at once; one failing closes the shared channel,
    # and grpc.aio cancels the other's call: that caller must get None, not a cancellation
    # (which would end an Allocate as cancelled, or a loop that does not expect one).
    socket = plugin_dir / "kubelet.sock"
    # A deadline far beyond the wait below: the call must end because the channel closed.
    client = PodResourcesClient(socket, deadline_s=120.0)
    server = Hanging()
    async with kubelet(socket, server):
        asking = asyncio.ensure_future(client.list())
        async with asyncio.timeout(30.0):
            await server.asked.wait()  # the call is in flight
        await client.close()  # what another caller's failure does
        async with asyncio.timeout(30.0):
            assert await asking is None
    await client.close()


async def test_turned_off() -> None:
    client = PodResourcesClient(None)
    assert await client.list() is None
    assert client.calls == 0
