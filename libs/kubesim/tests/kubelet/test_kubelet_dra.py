"""The kubelet stand-in as a DRA host, against a fake DRA driver over real gRPC on unix sockets
(:mod:`hami_kubesim.kubelet.dra.testing`) and kubesim's API server.

No scheduler runs: each test writes the claim's allocation and ``reservedFor`` itself, as the
scheduler's PreBind would, before binding the pod to the node.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hami_kubesim import dra_objects as dra
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.kubelet.dra.testing import FakeDevice, FakeDraDriver
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.kubelet.status import ALLOCATIONS_ANNOTATION
from hami_kubesim.kubelet.testing import TEST_NODE, kubelet_on_node, pod_phase
from hami_kubesim.testing import RunningApiServer, eventually

if ApiServer().registry.lookup("resource.k8s.io", "v1", "resourceclaims") is None:
    pytest.skip(
        "kubesim's API server does not serve resource.k8s.io/v1 resourceclaims (branch dra-api)",
        allow_module_level=True,
    )

DRIVER = "gpu.hami.io"
_FAST: dict[str, Any] = {"plugin_watch_interval": 0.02, "dra_retry_interval": 0.05}


@contextlib.asynccontextmanager
async def dra_node(
    plugin_dir: Path, **settings: Any
) -> AsyncIterator[tuple[RunningApiServer, KubeletStandIn, FakeDraDriver]]:
    async with kubelet_on_node(plugin_dir, **{**_FAST, **settings}) as (sim, kubelet):
        driver = _driver(plugin_dir, kubelet)
        try:
            yield sim, kubelet, driver
        finally:
            await driver.stop()


def _driver(plugin_dir: Path, kubelet: KubeletStandIn) -> FakeDraDriver:
    return FakeDraDriver(
        registry_dir=kubelet.settings.registry_dir,
        plugins_dir=plugin_dir.parent / "plugins",
        cdi_dir=kubelet.settings.cdi_dirs[0],
        node=TEST_NODE,
    )


async def _registered(kubelet: KubeletStandIn, driver: FakeDraDriver) -> None:
    await driver.serve()
    await eventually(lambda: DRIVER in kubelet.dra_drivers, what="the driver registers")


def _pod(name: str, claims: dict[str, str], containers: dict[str, Sequence[Any]]) -> dict[str, Any]:
    """A pod using ``claims`` (pod claim name -> claim name); ``containers``: name -> its
    ``resources.claims`` entries."""
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": [dra.pod_claim(k, claim=v) for k, v in claims.items()],
            "containers": [
                {"name": c, "image": "x", "resources": {"claims": list(entries)}}
                for c, entries in containers.items()
            ],
        },
    }


async def _claim(sim: RunningApiServer, name: str = "c1") -> str:
    created = await sim.server.create("resourceclaims", dra.resource_claim(name))
    return str(created["metadata"]["uid"])


async def _reserve(sim: RunningApiServer, claim: str, pods: Sequence[dict[str, Any]]) -> None:
    """Write the claim's allocation (``gpu-0`` of this node) and ``reservedFor`` ``pods``."""
    stored = sim.server.get("resourceclaims", claim, namespace="default")
    stored["status"] = {
        "allocation": dra.allocation(
            [dra.allocation_result("gpu", "gpu-0", pool=TEST_NODE)], node=TEST_NODE
        ),
        "reservedFor": [dra.pod_reference(p) for p in pods],
    }
    await sim.server.update("resourceclaims", stored, subresource="status")


async def _run_pod(
    sim: RunningApiServer,
    pod: dict[str, Any],
    claim: str = "c1",
    *,
    also: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Create ``pod``, reserve ``claim`` for it (and ``also``), bind it to the node."""
    created = await sim.server.create("pods", pod)
    await _reserve(sim, claim, [*also, created])
    return await sim.server.bind("default", pod["metadata"]["name"], TEST_NODE)


def _events(sim: RunningApiServer, reason: str) -> list[str]:
    return [
        str(e.get("message"))
        for e in sim.server.list("events", namespace="default")
        if e.get("reason") == reason
    ]


async def _started(sim: RunningApiServer, kubelet: KubeletStandIn, driver: FakeDraDriver) -> str:
    """Register ``driver``, run pod ``p1`` whose container ``m`` uses claim ``c1`` (its UID
    returned) and wait until it runs."""
    await _registered(kubelet, driver)
    uid = await _claim(sim)
    await _run_pod(sim, _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]}))
    await eventually(lambda: pod_phase(sim, "p1") == "Running", what="p1 runs")
    return uid


def _waiting(sim: RunningApiServer, name: str) -> dict[str, Any]:
    """The ``waiting`` state of the pod's first container (empty when it has none)."""
    status = sim.server.get("pods", name, namespace="default")["status"]
    statuses = status.get("containerStatuses") or [{}]
    return dict(statuses[0].get("state", {}).get("waiting") or {})


def _record(sim: RunningApiServer, name: str) -> dict[str, Any]:
    pod = sim.server.get("pods", name, namespace="default")
    return dict(json.loads(pod["metadata"]["annotations"][ALLOCATIONS_ANNOTATION]))


# ----- registration --------------------------------------------------------------------------


async def test_driver_registers_deregisters_and_registers_again(plugin_dir: Path) -> None:
    async with dra_node(plugin_dir) as (_, kubelet, driver):
        await _registered(kubelet, driver)
        assert kubelet.dra_drivers == {DRIVER: driver.dra_socket}
        await eventually(lambda: driver.notifications == [(True, "")])
        await driver.stop()  # its registration socket goes
        await eventually(lambda: not kubelet.dra_drivers, what="the driver is deregistered")
        await _registered(kubelet, driver)
        assert kubelet.dra.watcher.registrations == {DRIVER: 2}


_NONE_SUPPORTED = (
    "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC "
    "versions of DRA driver plugin gpu.hami.io at endpoint {endpoint}: "
)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"plugin_type": "CSIPlugin"},
            "RegisterPlugin error -- no handler registered for plugin type: CSIPlugin "
            "at socket {socket}",
        ),
        (
            {"versions": ("v1beta1.DRAPlugin",)},
            _NONE_SUPPORTED + 'none of services supported by the plugin (["v1beta1.DRAPlugin"]) '
            'are supported by the kubelet (["v1.DRAPlugin"])',
        ),
        (
            {"versions": ()},
            _NONE_SUPPORTED + "empty list of supported gRPC services (aka supported versions)",
        ),
    ],
)
async def test_registration_refusals(plugin_dir: Path, change: dict[str, Any], error: str) -> None:
    async with dra_node(plugin_dir) as (_, kubelet, driver):
        for field, value in change.items():
            setattr(driver, field, value)
        await driver.serve()
        # The driver hears the verdict before the kubelet has logged its refusal.
        await eventually(lambda: bool(kubelet.dra.watcher.refusals), what="the kubelet's verdict")
        expected = error.format(socket=driver.reg_socket, endpoint=driver.dra_socket)
        assert driver.notifications[0] == (False, expected)
        assert kubelet.dra.watcher.refusals[0].error == expected
        assert not kubelet.dra_drivers
        # Fixed and restarted (a new socket file): registered at once.
        driver.plugin_type, driver.versions = "DRAPlugin", ("v1.DRAPlugin",)
        await driver.stop()
        await _registered(kubelet, driver)


# ----- pods ----------------------------------------------------------------------------------


async def test_pod_starts_with_its_cdi_env_and_the_claim_is_unprepared_after_it(
    plugin_dir: Path,
) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        await _registered(kubelet, driver)
        uid = await _claim(sim)
        pod = _pod("p1", {"gpu": "c1"}, {"main": [dra.container_claim("gpu")], "plain": []})
        await _run_pod(sim, pod)
        await eventually(lambda: pod_phase(sim, "p1") == "Running", what="the pod runs")
        assert driver.prepare_calls == [[("default", "c1", uid)]]
        assert driver.spec_path(uid).exists()
        containers = {c["name"]: c for c in _record(sim, "p1")["containers"]}
        (entry,) = containers["main"]["resources"]
        assert entry["resource"] == "claim:gpu"
        assert entry["deviceIDs"] == [f"{DRIVER}/{TEST_NODE}/gpu-0"]
        assert entry["cdiDevices"] == [driver.cdi_id(uid, "gpu-0")]
        assert entry["envs"] == {"FAKE_CLAIM": "c1", "FAKE_CLAIM_UID": uid}
        assert containers["plain"]["resources"] == []  # lists no claim: gets nothing
        assert kubelet.devices_in_use(DRIVER) == frozenset()  # not a device-plugin device
        assert kubelet.prepared_claims()[("default", "c1")].prepared

        await sim.server.delete("pods", "p1", namespace="default")
        await eventually(lambda: driver.unprepare_calls == [[("default", "c1", uid)]])
        assert not driver.spec_path(uid).exists()
        await eventually(lambda: not kubelet.prepared_claims())


async def test_a_claim_shared_by_two_pods_is_prepared_once_and_unprepared_after_the_last(
    plugin_dir: Path,
) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        await _registered(kubelet, driver)
        await _claim(sim)
        first = await _run_pod(sim, _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]}))
        await eventually(lambda: pod_phase(sim, "p1") == "Running")
        second = _pod("p2", {"g": "c1"}, {"m": [dra.container_claim("g", "gpu")]})
        await _run_pod(sim, second, also=[first])
        await eventually(lambda: pod_phase(sim, "p2") == "Running")
        assert len(driver.prepare_calls) == 1
        assert _record(sim, "p2")["containers"][0]["resources"][0]["resource"] == "claim:g/gpu"
        await sim.server.delete("pods", "p1", namespace="default")
        left = {second_uid(sim)}
        await eventually(lambda: kubelet.prepared_claims()["default", "c1"].pods == left)
        assert driver.unprepare_calls == []
        await sim.server.delete("pods", "p2", namespace="default")
        await eventually(lambda: len(driver.unprepare_calls) == 1)


def second_uid(sim: RunningApiServer) -> str:
    return str(sim.server.get("pods", "p2", namespace="default")["metadata"]["uid"])


async def test_a_prepare_error_keeps_the_pod_from_starting_until_it_clears(
    plugin_dir: Path,
) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        await _registered(kubelet, driver)
        await _claim(sim)
        driver.prepare_error = "no memory left on gpu-0"
        await _run_pod(sim, _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]}))
        reason = "FailedPrepareDynamicResources"
        await eventually(
            lambda: bool(_events(sim, reason)), what="a FailedPrepareDynamicResources event"
        )
        assert _events(sim, reason)[0] == (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            "NodePrepareResources failed for ResourceClaim c1: no memory left on gpu-0"
        )
        await eventually(lambda: _waiting(sim, "p1") == {"reason": "ContainerCreating"})
        assert pod_phase(sim, "p1") == "Pending"
        await eventually(lambda: len(driver.prepare_calls) >= 3, what="retries")
        driver.prepare_error = None
        await eventually(lambda: pod_phase(sim, "p1") == "Running", what="started once it works")


async def test_a_failed_call_is_reported_and_a_failed_unprepare_retried(plugin_dir: Path) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        await _registered(kubelet, driver)
        uid = await _claim(sim)
        driver.call_error = "driver is busy"
        await _run_pod(sim, _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]}))
        failed = (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            "NodePrepareResources: rpc error: code = Internal desc = driver is busy"
        )
        await eventually(lambda: failed in _events(sim, "FailedPrepareDynamicResources"))
        driver.call_error = None
        await eventually(lambda: pod_phase(sim, "p1") == "Running")
        driver.unprepare_error = "device still in use"
        await sim.server.delete("pods", "p1", namespace="default")
        await eventually(lambda: len(driver.unprepare_calls) >= 2, what="unprepare retried")
        assert ("default", "c1") in kubelet.prepared_claims()  # kept until it works
        driver.unprepare_error = None
        await eventually(lambda: not kubelet.prepared_claims(), what="unprepared at last")
        assert not driver.spec_path(uid).exists()


async def test_claims_the_kubelet_refuses_to_prepare(plugin_dir: Path) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        uid = await _claim(sim)
        pod = await sim.server.create(
            "pods", _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]})
        )
        await sim.server.bind("default", "p1", TEST_NODE)  # the claim is not reserved for it
        reason = "FailedPrepareDynamicResources"
        pod_uid = pod["metadata"]["uid"]
        refused = (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            f"pod p1 ({pod_uid}) is not allowed to use ResourceClaim c1 ({uid})"
        )
        await eventually(lambda: refused in _events(sim, reason))
        await _reserve(sim, "c1", [pod])  # the driver is not registered yet
        unregistered = (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            f"DRA driver {DRIVER} is not registered"
        )
        await eventually(lambda: unregistered in _events(sim, reason))
        assert not driver.prepare_calls
        await _registered(kubelet, driver)
        await eventually(lambda: pod_phase(sim, "p1") == "Running")


async def test_an_unresolvable_cdi_device_fails_the_container(plugin_dir: Path) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        driver.cdi_dir = plugin_dir.parent / "elsewhere"  # specs the runtime does not read
        await _registered(kubelet, driver)
        uid = await _claim(sim)
        await _run_pod(sim, _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]}))
        await eventually(lambda: _waiting(sim, "p1").get("reason") == "CreateContainerError")
        assert _waiting(sim, "p1")["message"] == (
            f"failed to inject CDI devices: unresolvable CDI devices {driver.cdi_id(uid, 'gpu-0')}"
        )
        assert pod_phase(sim, "p1") == "Pending"


async def test_kubelet_restart_keeps_prepared_claims_and_drivers_register_again(
    plugin_dir: Path,
) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        uid = await _started(sim, kubelet, driver)
        await kubelet.restart()
        await eventually(lambda: kubelet.dra.watcher.registrations == {DRIVER: 2})
        assert driver.reg_socket.exists()  # the kubelet leaves plugins_registry alone
        assert kubelet.prepared_claims()[("default", "c1")].prepared
        await sim.server.delete("pods", "p1", namespace="default")
        await eventually(lambda: driver.unprepare_calls == [[("default", "c1", uid)]])
        assert len(driver.prepare_calls) == 1


async def test_a_new_stand_in_prepares_a_running_pods_claims_again(plugin_dir: Path) -> None:
    async with dra_node(plugin_dir) as (sim, kubelet, driver):
        uid = await _started(sim, kubelet, driver)
        settings: KubeletSettings = kubelet.settings
    # The first stand-in is gone (its checkpoint with it); the pod still runs.
    async with (
        kubelet_on_node(plugin_dir, **_FAST) as (sim2, kubelet2),
    ):
        assert kubelet2.settings.registry_dir == settings.registry_dir
        driver2 = _driver(plugin_dir, kubelet2)
        try:
            await _registered(kubelet2, driver2)
            await _claim(sim2)
            running = _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]})
            running["spec"]["nodeName"] = TEST_NODE
            running["status"] = {"phase": "Running"}
            stored = sim2.server.restore("pods", running)
            await _reserve(sim2, "c1", [stored])
            await eventually(lambda: len(driver2.prepare_calls) >= 1, what="prepared again")
            await eventually(lambda: ("default", "c1") in kubelet2.prepared_claims())
            await sim2.server.delete("pods", "p1", namespace="default")
            await eventually(lambda: len(driver2.unprepare_calls) == 1)
        finally:
            await driver2.stop()
    assert uid  # the first server's claim is unrelated to the second's


async def test_a_dra_container_plays_hami_core(plugin_dir: Path) -> None:
    host_root = plugin_dir.parent / "host"
    async with dra_node(plugin_dir, host_root=host_root, workload_interval=0.05) as (
        sim,
        kubelet,
        driver,
    ):
        await _registered(kubelet, driver)
        uid = await _claim(sim)
        cache_dir = f"/usr/local/vgpu/claims/{uid}"
        driver.devices["c1"] = (
            FakeDevice(
                env={
                    "NVIDIA_VISIBLE_DEVICES": "GPU-0000-aaaa",
                    "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
                    "CUDA_DEVICE_SM_LIMIT": "30",
                    "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"{cache_dir}/a.cache",
                },
                mounts=[{"hostPath": f"/var/lib/hami/claims/{uid}", "containerPath": cache_dir}],
            ),
        )
        created = await _run_pod(
            sim, _pod("p1", {"gpu": "c1"}, {"m": [dra.container_claim("gpu")]})
        )
        await eventually(lambda: pod_phase(sim, "p1") == "Running")
        workloads = kubelet.workloads
        assert workloads is not None
        key = (created["metadata"]["uid"], "m")
        await eventually(lambda: key in workloads.playing, what="the container plays HAMi-core")
        assert workloads.wanted[key].devices == (("GPU-0000-aaaa", 2048 << 20, 30),)
        assert (host_root / f"var/lib/hami/claims/{uid}/a.cache").exists()
