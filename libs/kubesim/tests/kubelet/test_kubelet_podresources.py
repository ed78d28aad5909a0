"""The kubelet stand-in's pod-resources API (``v1.PodResourcesLister``) through real gRPC.

What the device plugin relies on: the pod being admitted is listed before its ``Allocate`` with
no devices for the container being allocated, and holds them once the ``Allocate`` returned;
only active pods are listed; ordinary init containers are not, sidecars are.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.status import ALLOCATIONS_ANNOTATION
from hami_kubesim.kubelet.testing import (
    FAKE_RESOURCE,
    TEST_NODE,
    FakePlugin,
    device_pod,
    kubelet_on_node,
    pod_phase,
)
from hami_kubesim.stack.system.services import deviceplugin_args
from hami_kubesim.stack.system.spec import SystemSpec, gpu_model_node
from hami_kubesim.testing import RunningApiServer, eventually

Listing = dict[str, dict[str, dict[str, list[str]]]]
"""``namespace/name`` → container → resource → device IDs."""


@contextlib.asynccontextmanager
async def lister(socket: Path) -> AsyncIterator[api_pb2_grpc.PodResourcesListerAsyncStub]:
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        yield api_pb2_grpc.PodResourcesListerStub(channel)


async def listing(stub: api_pb2_grpc.PodResourcesListerAsyncStub) -> Listing:
    reply = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
    return {
        f"{pod.namespace}/{pod.name}": {
            container.name: {d.resource_name: list(d.device_ids) for d in container.devices}
            for container in pod.containers
        }
        for pod in reply.pod_resources
    }


async def plugin_with(plugin_dir: Path, sim: RunningApiServer, count: int) -> FakePlugin:
    devices = {f"g{i}": "Healthy" for i in range(count)}
    plugin = FakePlugin(plugin_dir, devices, preferred=False)
    await plugin.serve()
    await plugin.register()

    def advertised() -> bool:
        node = sim.server.get("nodes", TEST_NODE)
        return bool(node["status"].get("allocatable", {}).get(FAKE_RESOURCE) == str(count))

    await eventually(advertised, what="the node advertises the fake devices")
    return plugin


async def test_the_pod_being_admitted_is_listed_without_the_devices_being_allocated(
    plugin_dir: Path,
) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        assert kubelet.pod_resources_socket == plugin_dir.with_name("dp-pod-resources") / (
            "kubelet.sock"
        )
        plugin = await plugin_with(plugin_dir, sim, 4)
        try:
            async with lister(kubelet.pod_resources_socket) as stub:
                assert await listing(stub) == {}
                await sim.server.create("pods", device_pod("first", [("c", 2)], nodeName=TEST_NODE))
                await eventually(lambda: pod_phase(sim, "first") == "Running")
                assert await listing(stub) == {
                    "default/first": {"c": {FAKE_RESOURCE: ["g0", "g1"]}}
                }

                plugin.hold_allocate = True
                plugin.allocate_started.clear()
                pod = device_pod("second", [("a", 1), ("b", 1)], nodeName=TEST_NODE)
                await sim.server.create("pods", pod)
                await plugin.allocate_started.wait()  # a's Allocate is being answered
                assert kubelet.admitting == "default/second"
                assert await listing(stub) == {
                    "default/first": {"c": {FAKE_RESOURCE: ["g0", "g1"]}},
                    "default/second": {"a": {}, "b": {}},
                }
                plugin.allocate_started.clear()
                plugin.release_allocate()
                await plugin.allocate_started.wait()  # now b's
                assert await listing(stub) == {
                    "default/first": {"c": {FAKE_RESOURCE: ["g0", "g1"]}},
                    "default/second": {"a": {FAKE_RESOURCE: ["g2"]}, "b": {}},
                }
                plugin.release_allocate()
                await eventually(lambda: pod_phase(sim, "second") == "Running")
                assert (await listing(stub))["default/second"] == {
                    "a": {FAKE_RESOURCE: ["g2"]},
                    "b": {FAKE_RESOURCE: ["g3"]},
                }
                assert kubelet.admitting is None
                assert kubelet.pod_resources_calls["List"] == 5
        finally:
            plugin.release_allocate()
            await plugin.stop()


async def test_sidecars_and_app_containers_are_listed_ordinary_init_containers_not(
    plugin_dir: Path,
) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        plugin = await plugin_with(plugin_dir, sim, 3)
        try:
            pod = device_pod(
                "mixed",
                [("app", 1), ("plain", 0)],
                init=[("setup", 1)],
                sidecars=[("proxy", 1)],
                nodeName=TEST_NODE,
            )
            await sim.server.create("pods", pod)
            await eventually(lambda: pod_phase(sim, "mixed") == "Running")
            async with lister(kubelet.pod_resources_socket) as stub:
                reply = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
                (listed,) = reply.pod_resources
                assert [c.name for c in listed.containers] == ["proxy", "app", "plain"]
                held = {c.name: [list(d.device_ids) for d in c.devices] for c in listed.containers}
                # proxy (the first init container) got g0, setup g1, which went on to the app
                # container once setup had finished.
                assert held == {"proxy": [["g0"]], "app": [["g1"]], "plain": []}

                got = await stub.Get(
                    api_pb2.GetPodResourcesRequest(name="mixed", namespace="default"), timeout=5
                )
                assert got.pod_resources == listed
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.Get(
                        api_pb2.GetPodResourcesRequest(name="nope", namespace="default"), timeout=5
                    )
                assert caught.value.code() == grpc.StatusCode.UNKNOWN
                assert caught.value.details() == "pod nope in namespace default not found"

                await plugin.set_devices({"g0": "Healthy", "g1": "Unhealthy", "g2": "Healthy"})
                await eventually(
                    lambda: kubelet.resources()[FAKE_RESOURCE].allocatable == 2,
                    what="the kubelet sees one device turn unhealthy",
                )
                allocatable = await stub.GetAllocatableResources(
                    api_pb2.AllocatableResourcesRequest(), timeout=5
                )
                assert [(d.resource_name, list(d.device_ids)) for d in allocatable.devices] == [
                    (FAKE_RESOURCE, ["g0"]),
                    (FAKE_RESOURCE, ["g2"]),
                ]
        finally:
            await plugin.stop()


async def test_waiting_rejected_and_deleted_pods_are_not_listed(plugin_dir: Path) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        plugin = await plugin_with(plugin_dir, sim, 2)
        try:
            async with lister(kubelet.pod_resources_socket) as stub:
                kubelet.pause()
                await sim.server.create(
                    "pods", device_pod("queued", [("c", 1)], nodeName=TEST_NODE)
                )
                await eventually(lambda: kubelet.describe()["waiting"] == 1)
                assert await listing(stub) == {}  # not admitted yet: not in the pod manager
                kubelet.resume()
                await eventually(lambda: pod_phase(sim, "queued") == "Running")
                assert await listing(stub) == {"default/queued": {"c": {FAKE_RESOURCE: ["g0"]}}}

                plugin.allocate_error = "device number not matched"
                await sim.server.create(
                    "pods", device_pod("refused", [("c", 1)], nodeName=TEST_NODE)
                )
                await eventually(lambda: pod_phase(sim, "refused") == "Failed")
                assert set(await listing(stub)) == {"default/queued"}
                assert kubelet.devices_in_use(FAKE_RESOURCE) == {"g0"}

                await sim.server.delete("pods", "queued", namespace="default")
                await eventually(lambda: pod_phase(sim, "queued") is None)
                await eventually(lambda: kubelet.devices_in_use(FAKE_RESOURCE) == frozenset())
                assert await listing(stub) == {}
        finally:
            await plugin.stop()


def _running_pod_with_record(name: str, device: str) -> dict[str, Any]:
    pod = device_pod(name, [("c", 1)], nodeName=TEST_NODE)
    record = {
        "node": TEST_NODE,
        "containers": [
            {
                "name": "c",
                "kind": "app",
                "resources": [
                    {"resource": FAKE_RESOURCE, "deviceIDs": [device], "envs": {"X": device}}
                ],
            }
        ],
    }
    pod["metadata"]["annotations"] = {ALLOCATIONS_ANNOTATION: json.dumps(record)}
    pod["status"] = {"phase": "Running"}
    return pod


async def test_a_pod_running_before_the_kubelet_saw_it_keeps_its_checkpointed_devices(
    plugin_dir: Path,
) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        plugin = await plugin_with(plugin_dir, sim, 2)
        try:
            sim.server.restore("pods", _running_pod_with_record("old", "g0"))
            await eventually(lambda: kubelet.devices_in_use(FAKE_RESOURCE) == {"g0"})
            allocation = kubelet.allocation("default", "old")
            assert allocation is not None
            assert allocation.containers[0].envs == {"X": "g0"}
            async with lister(kubelet.pod_resources_socket) as stub:
                assert await listing(stub) == {"default/old": {"c": {FAKE_RESOURCE: ["g0"]}}}
            assert plugin.allocate_calls == []  # not admitted again
            # The next pod gets the other device, never the one the running pod holds.
            await sim.server.create("pods", device_pod("new", [("c", 1)], nodeName=TEST_NODE))
            await eventually(lambda: pod_phase(sim, "new") == "Running")
            assert plugin.allocate_calls == [[["g1"]]]
            assert kubelet.admission_log == ["default/new"]
        finally:
            await plugin.stop()


async def test_pod_resources_is_served_again_after_a_kubelet_restart(plugin_dir: Path) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        plugin = await plugin_with(plugin_dir, sim, 1)
        try:
            await sim.server.create("pods", device_pod("held", [("c", 1)], nodeName=TEST_NODE))
            await eventually(lambda: pod_phase(sim, "held") == "Running")
            await kubelet.restart()
            assert kubelet.pod_resources_socket.is_socket()
            async with lister(kubelet.pod_resources_socket) as stub:
                assert await listing(stub) == {"default/held": {"c": {FAKE_RESOURCE: ["g0"]}}}
        finally:
            await plugin.stop()


async def test_the_pod_resources_dir_can_be_chosen(plugin_dir: Path) -> None:
    chosen = plugin_dir.parent / "pr"
    settings = KubeletSettings(node_name="n", plugin_dir=plugin_dir, api_url="http://x")
    assert settings.pod_resources_socket == plugin_dir.parent / "dp-pod-resources" / "kubelet.sock"
    async with kubelet_on_node(plugin_dir, pod_resources_dir=chosen) as (_, kubelet):
        assert kubelet.pod_resources_socket == chosen / "kubelet.sock"
        assert kubelet.pod_resources_socket.is_socket()
    assert not (chosen / "kubelet.sock").exists()


def test_the_stack_points_each_device_plugin_at_its_kubelets_pod_resources(tmp_path: Path) -> None:
    node = gpu_model_node("n1", "Tesla T4", count=1, memory_mib=15360)
    socket = tmp_path / "p" / "n1" / "kubelet.sock"
    args = deviceplugin_args(
        SystemSpec(nodes=(node,)),
        node,
        api_url="http://127.0.0.1:1",
        kubelet_socket=socket,
        devices=tmp_path / "n1.yaml",
    )
    served = KubeletSettings(node_name="n1", plugin_dir=socket.parent, api_url="http://x")
    assert f"--pod-resources-socket={served.pod_resources_socket}" in args
    assert f"--kubelet-socket={socket}" in args
