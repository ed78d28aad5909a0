"""Device manager and Registration service against a small fake device plugin over unix sockets.

The fake plugin (:mod:`hami_kubesim.kubelet.testing`) exercises the whole handshake through
real gRPC: it serves ``v1beta1.DevicePlugin`` on a socket in the node's plugin dir, registers on
``kubelet.sock``, streams its device list, records every call and re-registers when
``kubelet.sock`` is recreated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami_kube.objects import PodView
from hami_kubesim.kubelet.deviceplugins.devicemanager import AdmissionError, DeviceManager
from hami_kubesim.kubelet.deviceplugins.registration import RegistrationServer
from hami_kubesim.kubelet.status import ALLOCATIONS_ANNOTATION
from hami_kubesim.kubelet.testing import (
    FAKE_RESOURCE,
    TEST_NODE,
    FakePlugin,
    device_pod,
    kubelet_on_node,
    pod_phase,
)
from hami_kubesim.testing import RunningApiServer, eventually

RESOURCE = FAKE_RESOURCE


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
    pod = device_pod(f"pod-{uid}", containers, init=init or ())
    pod["metadata"]["uid"] = uid
    return pod


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


async def test_a_plugin_registering_again_mid_allocate_fails_that_call_not_the_kubelet(
    plugin_dir: Path,
) -> None:
    # The kubelet closes the old connection when the plugin registers again (a restart); the
    # Allocate in flight on it fails with an error, as a real kubelet's gRPC call does. It
    # must not come back as a cancellation: that ended the stand-in's admission loop for good.
    async with manager_and_server(plugin_dir) as (manager, _):
        devices = {"a": "Healthy", "b": "Healthy"}
        plugin = FakePlugin(plugin_dir, devices)
        await plugin.serve()
        await plugin.register()
        await plugin.set_devices(devices)
        await eventually(lambda: manager.resources().get(RESOURCE) is not None)
        await eventually(lambda: manager.resources()[RESOURCE].allocatable == 2)
        plugin.hold_allocate = True
        admitting = asyncio.ensure_future(manager.admit(PodView(_pod("u1", [("c", 1)]))))
        await plugin.allocate_started.wait()
        await plugin.register()  # the same plugin, registering again
        with pytest.raises(AdmissionError, match="connection"):
            await admitting
        plugin.hold_allocate = False
        plugin.release_allocate()
        allocation = await manager.admit(PodView(_pod("u2", [("c", 1)])))
        assert allocation.container("c") is not None
        await plugin.stop()


# ----- the stand-in against the API server ----------------------------------------------------

NODE = TEST_NODE
node_with_kubelet = kubelet_on_node
_phase = pod_phase


def _node_devices(sim: RunningApiServer) -> tuple[str | None, str | None]:
    status = sim.server.get("nodes", NODE).get("status", {})
    return status.get("capacity", {}).get(RESOURCE), status.get("allocatable", {}).get(RESOURCE)


def _bound_pod(name: str, containers: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    return device_pod(name, containers, init=extra.pop("init", None) or (), **extra)


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
