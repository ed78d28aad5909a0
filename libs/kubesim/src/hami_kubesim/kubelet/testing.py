"""Test helpers for the kubelet stand-in: a small device plugin served over real gRPC, a node
with its kubelet on a fresh API server, and pods asking for devices.

:class:`FakePlugin` serves ``v1beta1.DevicePlugin`` on a unix socket in a node's plugin dir,
registers on ``kubelet.sock``, streams a settable device list, records every call the kubelet
makes, answers ``Allocate`` with an env naming the devices (``FAKE_DEVICES``), and can hold an
``Allocate`` until the test lets it go (:attr:`FakePlugin.hold_allocate`), so a test can look at
the kubelet while a plugin answers. It stands for an external component (a vendor's plugin); the
project's own plugin is ``hami_deviceplugin``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc
from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver

__all__ = [
    "FAKE_RESOURCE",
    "TEST_NODE",
    "FakePlugin",
    "device_pod",
    "kubelet_on_node",
    "pod_phase",
]

FAKE_RESOURCE = "example.com/gpu"

_Context = grpc.aio.ServicerContext[object, object]


class FakePlugin(api_pb2_grpc.DevicePluginServicer):
    """A device plugin with a settable device list that records the kubelet's calls."""

    def __init__(
        self,
        plugin_dir: Path,
        devices: dict[str, str],
        *,
        resource: str = FAKE_RESOURCE,
        endpoint: str = "fake.sock",
        preferred: bool = True,
        pre_start: bool = False,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.devices = dict(devices)
        self.resource = resource
        self.endpoint = endpoint
        self.preferred_available = preferred
        self.pre_start_required = pre_start
        self.allocate_error: str | None = None
        self.preferred_calls: list[tuple[list[str], list[str], int]] = []
        self.allocate_calls: list[list[list[str]]] = []
        self.pre_start_calls: list[list[str]] = []
        self.registrations = 0
        self.hold_allocate = False
        """While true, each ``Allocate`` waits for :meth:`release_allocate` once it started."""
        self.allocate_started = asyncio.Event()
        """Set when an ``Allocate`` arrives (clear it to wait for the next one)."""
        self._released = asyncio.Event()
        self._changed = asyncio.Condition()
        self._version = 0
        self._server: grpc.aio.Server | None = None

    # --- DevicePlugin service ---
    async def GetDevicePluginOptions(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: _Context
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=self.preferred_available,
        )

    async def ListAndWatch(  # noqa: N802 - gRPC method name
        self, request: api_pb2.Empty, context: _Context
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        seen = [-1]
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: self._version != seen[0])
                seen[0] = self._version
                reply = api_pb2.ListAndWatchResponse(
                    devices=[
                        api_pb2.Device(ID=i, health=h) for i, h in sorted(self.devices.items())
                    ]
                )
            yield reply

    async def GetPreferredAllocation(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreferredAllocationRequest, context: _Context
    ) -> api_pb2.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            available = list(req.available_deviceIDs)
            must = list(req.must_include_deviceIDs)
            self.preferred_calls.append((available, must, req.allocation_size))
            # Prefer from the end so the test can tell a preference from kubelet's own order.
            picked = must + [d for d in reversed(available) if d not in must]
            responses.append(
                api_pb2.ContainerPreferredAllocationResponse(
                    deviceIDs=picked[: req.allocation_size]
                )
            )
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(  # noqa: N802 - gRPC method name
        self, request: api_pb2.AllocateRequest, context: _Context
    ) -> api_pb2.AllocateResponse:
        ids = [list(r.devices_ids) for r in request.container_requests]
        self.allocate_calls.append(ids)
        self.allocate_started.set()
        if self.hold_allocate:
            await self._released.wait()
            self._released.clear()
        if self.allocate_error is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, self.allocate_error)
        return api_pb2.AllocateResponse(
            container_responses=[
                api_pb2.ContainerAllocateResponse(
                    envs={"FAKE_DEVICES": ",".join(c)},
                    mounts=[api_pb2.Mount(container_path="/fake", host_path="/host/fake")],
                    devices=[
                        api_pb2.DeviceSpec(
                            container_path=f"/dev/{d}", host_path=f"/dev/{d}", permissions="rw"
                        )
                        for d in c
                    ],
                    annotations={"fake.io/ids": ",".join(c)},
                )
                for c in ids
            ]
        )

    async def PreStartContainer(  # noqa: N802 - gRPC method name
        self, request: api_pb2.PreStartContainerRequest, context: _Context
    ) -> api_pb2.PreStartContainerResponse:
        self.pre_start_calls.append(list(request.devices_ids))
        return api_pb2.PreStartContainerResponse()

    # --- plugin lifecycle ---
    def release_allocate(self) -> None:
        """Let the ``Allocate`` being held answer."""
        self._released.set()

    async def set_devices(self, devices: dict[str, str]) -> None:
        async with self._changed:
            self.devices = dict(devices)
            self._version += 1
            self._changed.notify_all()

    async def serve(self) -> None:
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        socket = self.plugin_dir / self.endpoint
        socket.unlink(missing_ok=True)
        server.add_insecure_port(f"unix:{socket}")
        await server.start()
        self._server = server

    async def register(self, version: str = "v1beta1", resource: str | None = None) -> None:
        path = self.plugin_dir / "kubelet.sock"
        async with grpc.aio.insecure_channel(f"unix:{path}") as channel:
            await api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=version,
                    endpoint=self.endpoint,
                    resource_name=resource or self.resource,
                    options=api_pb2.DevicePluginOptions(
                        get_preferred_allocation_available=self.preferred_available,
                        pre_start_required=self.pre_start_required,
                    ),
                ),
                timeout=10,
            )
        self.registrations += 1

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def watch_kubelet(self) -> None:
        """Serve again and re-register each time the kubelet deletes this plugin's socket
        (a restart) until cancelled.

        Real plugins watch the directory with inotify; polling with ``eventually`` is enough
        here.
        """
        own = self.plugin_dir / self.endpoint
        while True:
            await eventually(
                lambda: not own.exists(), within=_WATCH_S, what="the kubelet removes our socket"
            )
            await self.stop()
            await self.serve()
            # kubelet.sock may not be back yet
            await eventually(self._registered, within=10, what="registration with the kubelet")

    async def _registered(self) -> bool:
        try:
            await self.register()
        except grpc.aio.AioRpcError:
            return False
        return True


_WATCH_S = 3600.0
"""How long the fake plugin's watcher waits for a kubelet restart (it is cancelled sooner)."""


TEST_NODE = "node-a"


@contextlib.asynccontextmanager
async def kubelet_on_node(
    plugin_dir: Path, *, node: str = TEST_NODE, **settings: Any
) -> AsyncIterator[tuple[RunningApiServer, KubeletStandIn]]:
    """A fresh API server with one node (``10.1.2.3``, pods from ``10.244.7.0/24``) and its
    kubelet stand-in serving in ``plugin_dir``; ``settings`` go to :class:`KubeletSettings`."""
    async with running_apiserver() as sim:
        spec = NodeSpec(name=node, address="10.1.2.3", pod_cidr="10.244.7.0/24")
        await sim.server.create("nodes", spec.to_object())
        options: dict[str, Any] = {"dial_timeout": 0.5, "call_timeout": 5, **settings}
        kubelet = KubeletStandIn(
            KubeletSettings(
                node_name=node,
                plugin_dir=plugin_dir,
                api_url=sim.url,
                pod_cidr=spec.pod_cidr,
                **options,
            )
        )
        async with kubelet:
            yield sim, kubelet


def device_pod(
    name: str,
    containers: Sequence[tuple[str, int]],
    *,
    init: Sequence[tuple[str, int]] = (),
    sidecars: Sequence[tuple[str, int]] = (),
    resource: str = FAKE_RESOURCE,
    **spec: Any,
) -> dict[str, Any]:
    """A pod in ``default`` whose containers ask for ``(name, count)`` devices of ``resource``
    (init containers, then restartable ones — sidecars — first among the init containers);
    ``spec`` is merged into its spec (``nodeName=...``)."""

    def container(cname: str, count: int, **extra: Any) -> dict[str, Any]:
        limits = {resource: str(count)} if count else {}
        return {"name": cname, "image": "x", "resources": {"limits": limits}, **extra}

    init_containers = [container(n, c, restartPolicy="Always") for n, c in sidecars]
    init_containers += [container(n, c) for n, c in init]
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "initContainers": init_containers,
            "containers": [container(n, c) for n, c in containers],
            **spec,
        },
    }


def pod_phase(sim: RunningApiServer, name: str, namespace: str = "default") -> str | None:
    """The pod's ``status.phase`` (``None`` when it is gone)."""
    pod = sim.server.try_get("pods", name, namespace=namespace)
    return None if pod is None else pod.get("status", {}).get("phase")
