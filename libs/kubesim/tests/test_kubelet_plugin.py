"""Device manager and Registration service against a small fake device plugin over unix sockets.

The fake plugin lives here so the whole handshake is exercised through real gRPC: it serves
``v1beta1.DevicePlugin`` on a socket in the node's plugin dir, registers on ``kubelet.sock``,
streams its device list, records every call and re-registers when ``kubelet.sock`` is recreated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami_kube.objects import PodView
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc
from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.kubelet.devicemanager import AdmissionError, DeviceManager
from hami_kubesim.kubelet.registration import RegistrationServer
from hami_kubesim.kubelet.standin import KubeletSettings, KubeletStandIn
from hami_kubesim.kubelet.status import ALLOCATIONS_ANNOTATION
from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver

RESOURCE = "example.com/gpu"


class FakePlugin(api_pb2_grpc.DevicePluginServicer):
    """A device plugin with a settable device list that records the kubelet's calls."""

    def __init__(
        self,
        plugin_dir: Path,
        devices: dict[str, str],
        *,
        resource: str = RESOURCE,
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
        self._changed = asyncio.Condition()
        self._version = 0
        self._server: grpc.aio.Server | None = None

    # --- DevicePlugin service ---
    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return api_pb2.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=self.preferred_available,
        )

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:
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

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
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

    async def Allocate(self, request: Any, context: Any) -> Any:
        ids = [list(r.devices_ids) for r in request.container_requests]
        self.allocate_calls.append(ids)
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

    async def PreStartContainer(self, request: Any, context: Any) -> Any:
        self.pre_start_calls.append(list(request.devices_ids))
        return api_pb2.PreStartContainerResponse()

    # --- plugin lifecycle ---
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
                lambda: not own.exists(), within=WATCH_S, what="the kubelet removes our socket"
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


WATCH_S = 3600.0
"""How long the fake plugin's watcher waits for a kubelet restart (it is cancelled sooner)."""


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Short path: unix socket names are limited to 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="ksim-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def manager_and_server(
    plugin_dir: Path, grace: float = 300.0
) -> AsyncIterator[tuple[DeviceManager, list[int]]]:
    published: list[int] = []
    manager = DeviceManager(node="n1", publish=lambda: published.append(1), grace_period=grace)
    server = RegistrationServer(
        plugin_dir=plugin_dir, on_register=manager.register, dial_timeout=0.5, call_timeout=5
    )
    await server.start()
    try:
        yield manager, published
    finally:
        await server.stop()
        await manager.aclose()


def _pod(
    uid: str, containers: list[tuple[str, int]], init: list[tuple[str, int]] | None = None
) -> dict[str, Any]:
    def spec(name: str, count: int) -> dict[str, Any]:
        limits = {RESOURCE: str(count)} if count else {}
        return {"name": name, "image": "x", "resources": {"limits": limits}}

    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "default", "uid": uid},
        "spec": {
            "initContainers": [spec(n, c) for n, c in init or []],
            "containers": [spec(n, c) for n, c in containers],
        },
    }


async def test_register_list_and_watch_and_disconnect(plugin_dir: Path) -> None:
    async with manager_and_server(plugin_dir, grace=0.05) as (manager, published):
        plugin = FakePlugin(plugin_dir, {"g0": "Healthy", "g1": "Healthy", "g2": "Unhealthy"})
        await plugin.serve()
        await plugin.register()
        await plugin.set_devices(plugin.devices)
        await eventually(lambda: RESOURCE in manager.resources())
        await eventually(lambda: manager.resources()[RESOURCE].capacity == 3)
        assert manager.resources()[RESOURCE].allocatable == 2
        await plugin.set_devices({"g0": "Healthy", "g1": "Unhealthy", "g2": "Unhealthy"})
        await eventually(lambda: manager.resources()[RESOURCE].allocatable == 1)
        assert published
        await plugin.stop()  # stream ends: devices kept but unhealthy, then dropped after grace
        await eventually(lambda: RESOURCE not in manager.resources())
        assert manager.capacity_view() == {RESOURCE: None}


async def test_register_refusals(plugin_dir: Path) -> None:
    async with manager_and_server(plugin_dir) as (manager, _):
        plugin = FakePlugin(plugin_dir, {"g0": "Healthy"})
        await plugin.serve()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await plugin.register(version="v1alpha1")
        assert caught.value.code() == grpc.StatusCode.UNKNOWN
        assert 'requested API version "v1alpha1" is not supported' in (caught.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await plugin.register(resource="cpu")
        assert caught.value.details() == 'the ResourceName "cpu" is invalid'
        missing = FakePlugin(plugin_dir, {}, endpoint="missing.sock")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await missing.register()
        assert "failed to dial device plugin" in (caught.value.details() or "")
        assert manager.registrations == {}
        await plugin.stop()


async def test_admit_allocates_per_container_with_init_reuse(plugin_dir: Path) -> None:
    async with manager_and_server(plugin_dir) as (manager, _):
        devices = {f"g{i}": "Healthy" for i in range(6)}
        plugin = FakePlugin(plugin_dir, devices)
        await plugin.serve()
        await plugin.register()
        await plugin.set_devices(devices)
        await eventually(lambda: manager.resources().get(RESOURCE, None) is not None)
        await eventually(lambda: manager.resources()[RESOURCE].allocatable == 6)

        pod = _pod("u1", [("main", 3), ("plain", 0)], init=[("init", 2)])
        allocation = await manager.admit(PodView(pod))

        # init: nothing reusable -> GetPreferredAllocation over all six, size 2.
        # main: the init container's two devices are reused and one more is asked for.
        assert [call[1:] for call in plugin.preferred_calls] == [([], 2), (["g4", "g5"], 3)]
        assert plugin.preferred_calls[1][0] == ["g0", "g1", "g2", "g3", "g4", "g5"]
        assert plugin.allocate_calls == [[["g5", "g4"]], [["g4", "g5", "g3"]]]
        init = allocation.container("init")
        main = allocation.container("main")
        assert init is not None
        assert main is not None
        assert init.resources[0].device_ids == ("g5", "g4")
        assert main.envs == {"FAKE_DEVICES": "g4,g5,g3"}
        assert main.resources[0].mounts[0].container_path == "/fake"
        assert allocation.container("plain") is not None
        assert manager.in_use(RESOURCE) == {"g3", "g4", "g5"}

        # A second pod gets only free devices; the first pod's release frees them.
        other = await manager.admit(PodView(_pod("u2", [("c", 3)])))
        other_main = other.container("c")
        assert other_main is not None
        assert set(other_main.resources[0].device_ids) == {"g0", "g1", "g2"}
        with pytest.raises(AdmissionError, match="Requested: 1, Available: 0"):
            await manager.admit(PodView(_pod("u3", [("c", 1)])))
        assert manager.release("u1")
        assert manager.in_use(RESOURCE) == {"g0", "g1", "g2"}
        await plugin.stop()


async def test_admit_without_preference_and_errors(plugin_dir: Path) -> None:
    async with manager_and_server(plugin_dir) as (manager, _):
        devices = {"a": "Healthy", "b": "Healthy", "c": "Unhealthy"}
        plugin = FakePlugin(plugin_dir, devices, preferred=False, pre_start=True)
        await plugin.serve()
        await plugin.register()
        await plugin.set_devices(devices)
        await eventually(lambda: manager.resources().get(RESOURCE) is not None)
        await eventually(lambda: manager.resources()[RESOURCE].capacity == 3)

        allocation = await manager.admit(PodView(_pod("u1", [("c", 2)])))
        assert plugin.preferred_calls == []
        assert plugin.allocate_calls == [[["a", "b"]]]
        await manager.pre_start(allocation)
        assert plugin.pre_start_calls == [["a", "b"]]
        manager.release("u1")

        plugin.allocate_error = "device number not matched"
        with pytest.raises(AdmissionError) as caught:
            await manager.admit(PodView(_pod("u2", [("c", 1)])))
        assert str(caught.value) == "rpc error: code = Unknown desc = device number not matched"
        assert manager.in_use(RESOURCE) == frozenset()
        await plugin.stop()


# ----- the stand-in against the API server ----------------------------------------------------

NODE = "node-a"


@contextlib.asynccontextmanager
async def node_with_kubelet(
    plugin_dir: Path, **settings: Any
) -> AsyncIterator[tuple[RunningApiServer, KubeletStandIn]]:
    async with running_apiserver() as sim:
        node = NodeSpec(name=NODE, address="10.1.2.3", pod_cidr="10.244.7.0/24")
        await sim.server.create("nodes", node.to_object())
        kubelet = KubeletStandIn(
            KubeletSettings(
                node_name=NODE,
                plugin_dir=plugin_dir,
                api_url=sim.url,
                pod_cidr=node.pod_cidr,
                dial_timeout=0.5,
                call_timeout=5,
                **settings,
            )
        )
        async with kubelet:
            yield sim, kubelet


def _node_devices(sim: RunningApiServer) -> tuple[str | None, str | None]:
    status = sim.server.get("nodes", NODE).get("status", {})
    return status.get("capacity", {}).get(RESOURCE), status.get("allocatable", {}).get(RESOURCE)


def _phase(sim: RunningApiServer, name: str) -> str | None:
    pod = sim.server.try_get("pods", name, namespace="default")
    return None if pod is None else pod.get("status", {}).get("phase")


def _bound_pod(name: str, containers: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    pod = _pod(name, containers, init=extra.pop("init", None))
    pod["metadata"] = {"name": name, "namespace": "default"}
    pod["spec"].update(extra)
    return pod


async def test_standin_registration_and_health_reach_node_status(plugin_dir: Path) -> None:
    async with node_with_kubelet(plugin_dir) as (sim, kubelet):
        assert kubelet.kubelet_socket.is_socket()
        plugin = FakePlugin(plugin_dir, {"g0": "Healthy", "g1": "Healthy", "g2": "Unhealthy"})
        await plugin.serve()
        await plugin.register()
        await eventually(lambda: _node_devices(sim) == ("3", "2"))
        assert sim.server.get("nodes", NODE)["status"]["capacity"]["cpu"] == "8"  # untouched
        await plugin.set_devices(
            {"g0": "Unhealthy", "g1": "Healthy", "g2": "Healthy", "g3": "Healthy"}
        )
        await eventually(lambda: _node_devices(sim) == ("4", "3"))
        await plugin.stop()  # stream ends: capacity kept, nothing allocatable
        await eventually(lambda: _node_devices(sim) == ("4", "0"))


async def test_standin_admits_bound_pods(plugin_dir: Path) -> None:
    async with node_with_kubelet(plugin_dir) as (sim, kubelet):
        devices = {f"g{i}": "Healthy" for i in range(4)}
        plugin = FakePlugin(plugin_dir, devices)
        await plugin.serve()
        await plugin.register()
        await eventually(lambda: _node_devices(sim) == ("4", "4"))

        pod = _bound_pod("gpu", [("main", 2), ("helper", 1)], init=[("setup", 1)], nodeName=NODE)
        await sim.server.create("pods", pod)
        await eventually(lambda: _phase(sim, "gpu") == "Running")

        assert [c[1:] for c in plugin.preferred_calls] == [([], 1), (["g3"], 2), ([], 1)]
        assert plugin.allocate_calls == [[["g3"]], [["g3", "g2"]], [["g1"]]]
        stored = sim.server.get("pods", "gpu", namespace="default")
        status = stored["status"]
        assert status["hostIP"] == "10.1.2.3"
        assert status["podIP"].startswith("10.244.7.")
        assert [c["name"] for c in status["containerStatuses"]] == ["main", "helper"]
        assert all(c["ready"] for c in status["containerStatuses"])
        assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        record = json.loads(stored["metadata"]["annotations"][ALLOCATIONS_ANNOTATION])
        assert record["node"] == NODE
        by_name = {c["name"]: c for c in record["containers"]}
        assert by_name["main"]["resources"][0]["deviceIDs"] == ["g3", "g2"]
        assert by_name["main"]["resources"][0]["envs"] == {"FAKE_DEVICES": "g3,g2"}
        allocation = kubelet.allocation("default", "gpu")
        assert allocation is not None
        helper = allocation.container("helper")
        assert helper is not None
        assert helper.resources[0].device_ids == ("g1",)
        assert kubelet.devices_in_use(RESOURCE) == {"g1", "g2", "g3"}

        # A pod bound through the binding subresource; no device-plugin resource: no Allocate.
        await sim.server.create("pods", _bound_pod("plain", [("c", 0)]))
        await sim.server.bind("default", "plain", NODE)
        await eventually(lambda: _phase(sim, "plain") == "Running")
        assert len(plugin.allocate_calls) == 3
        plain = sim.server.get("pods", "plain", namespace="default")
        assert ALLOCATIONS_ANNOTATION not in plain["metadata"].get("annotations", {})

        # Deleting the pod frees its devices.
        await sim.server.delete("pods", "gpu", namespace="default")
        await eventually(lambda: kubelet.devices_in_use(RESOURCE) == frozenset())
        assert kubelet.allocation("default", "gpu") is None
        await plugin.stop()


async def test_standin_rejects_when_allocate_fails(plugin_dir: Path) -> None:
    async with node_with_kubelet(plugin_dir) as (sim, kubelet):
        plugin = FakePlugin(plugin_dir, {"g0": "Healthy"}, preferred=False)
        await plugin.serve()
        await plugin.register()
        await eventually(lambda: _node_devices(sim) == ("1", "1"))
        plugin.allocate_error = "device number not matched"
        await sim.server.create("pods", _bound_pod("bad", [("c", 1)], nodeName=NODE))
        await eventually(lambda: _phase(sim, "bad") == "Failed")
        status = sim.server.get("pods", "bad", namespace="default")["status"]
        assert status["reason"] == "UnexpectedAdmissionError"
        assert status["message"] == (
            "Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = "
            "device number not matched, which is unexpected"
        )
        await eventually(
            lambda: any(
                e["reason"] == "UnexpectedAdmissionError" and e["involvedObject"]["name"] == "bad"
                for e in sim.server.list("events", namespace="default")
            )
        )
        assert kubelet.devices_in_use(RESOURCE) == frozenset()

        # Too many devices asked: refused by the kubelet itself, before any Allocate.
        plugin.allocate_error = None
        calls = len(plugin.allocate_calls)
        await sim.server.create("pods", _bound_pod("big", [("c", 2)], nodeName=NODE))
        await eventually(lambda: _phase(sim, "big") == "Failed")
        message = sim.server.get("pods", "big", namespace="default")["status"]["message"]
        assert "requested number of devices unavailable for example.com/gpu" in message
        assert len(plugin.allocate_calls) == calls
        await plugin.stop()


async def test_standin_restart_makes_plugins_register_again(plugin_dir: Path) -> None:
    async with node_with_kubelet(plugin_dir) as (sim, kubelet):
        plugin = FakePlugin(plugin_dir, {"g0": "Healthy", "g1": "Healthy"})
        await plugin.serve()
        await plugin.register()
        watcher = asyncio.create_task(plugin.watch_kubelet(), name="fake-plugin-watch")
        try:
            await eventually(lambda: _node_devices(sim) == ("2", "2"))
            await sim.server.create("pods", _bound_pod("held", [("c", 1)], nodeName=NODE))
            await eventually(lambda: _phase(sim, "held") == "Running")
            (plugin_dir / "keep.txt").write_text("not a socket")

            await kubelet.restart()

            assert kubelet.restarts == 1
            assert kubelet.kubelet_socket.is_socket()
            assert (plugin_dir / "keep.txt").exists()
            await eventually(lambda: kubelet.registrations.get(RESOURCE) == 2)
            await eventually(lambda: plugin.registrations == 2)  # the reply may still be in flight
            await eventually(lambda: kubelet.resources()[RESOURCE].allocatable == 2)
            # The running pod keeps its device (checkpoint): only one is free for a new pod.
            assert len(kubelet.devices_in_use(RESOURCE)) == 1
            await sim.server.create("pods", _bound_pod("next", [("c", 1)], nodeName=NODE))
            await eventually(lambda: _phase(sim, "next") == "Running")
            assert kubelet.devices_in_use(RESOURCE) == {"g0", "g1"}
            # A pod that terminated frees its device.
            held = kubelet.allocation("default", "held")
            assert held is not None
            await sim.server.patch(
                "pods",
                "held",
                {"status": {"phase": "Succeeded"}},
                namespace="default",
                patch_type="merge",
                subresource="status",
            )
            await eventually(lambda: len(kubelet.devices_in_use(RESOURCE)) == 1)
            assert held.containers[0].resources[0].device_ids[0] not in kubelet.devices_in_use(
                RESOURCE
            )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await plugin.stop()


async def test_standin_retries_status_writes_through_api_errors(plugin_dir: Path) -> None:
    async with node_with_kubelet(plugin_dir) as (sim, _):
        sim.server.inject_error("patch", "pods/status", code=500, times=2)
        sim.server.inject_error("patch", "pods/status", code=429, times=1)
        await sim.server.create("pods", _bound_pod("steady", [("c", 0)], nodeName=NODE))
        await eventually(lambda: _phase(sim, "steady") == "Running")
        fired = [rule["fired"] for rule in sim.server.faults.to_dict()["errors"]]
        assert fired == [2, 1]


@pytest.mark.parametrize("mode", ["close", "expire", "abort"])
async def test_standin_survives_dropped_watches(plugin_dir: Path, mode: str) -> None:
    async with node_with_kubelet(plugin_dir) as (sim, _):
        await sim.server.create("pods", _bound_pod("first", [("c", 0)], nodeName=NODE))
        await eventually(lambda: _phase(sim, "first") == "Running")
        await eventually(lambda: sim.server.drop_watches("pods", mode=mode) > 0)
        sim.server.compact()
        await sim.server.create("pods", _bound_pod("second", [("c", 0)], nodeName=NODE))
        await eventually(lambda: _phase(sim, "second") == "Running")
