"""Which pod an Allocate is for, end to end: kubesim's API server, its kubelet stand-in (pod
admission one pod at a time, its pause knob, its pod-resources API) and the plugin, over real
sockets.

HAMi #3096: pod A is bound and waits (the kubelet is slow), pod B is bound to the same node later
and takes the node lock; HAMi then served A's container with B's GPU and limits.  Here every
container gets its own pod's devices and limits, or a clear refusal, whatever the kubelet's
admission order — with the kubelet's pod-resources API, and without it (then a node where two
pods wait refuses the first admitted rather than guess).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hami_deviceplugin.app import RunningPlugin, serving
from hami_kube.objects import ObjectView
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.testing import RunningApiServer
from hami_protocol.config.node import NodeSettings
from hami_protocol.keys import (
    ALLOCATE_IDENTITY_POD_RESOURCES,
    BIND_PHASE,
    NODE_ALLOCATE_IDENTITY,
    NODE_LOCK,
    NVIDIA_DEVICES_TO_ALLOCATE,
    NVIDIA_REGISTER,
)
from hami_protocol.node.identity import identity_is_fresh

from ..helpers import (
    NODE,
    RESOURCE,
    UUIDS,
    annotations_of,
    container,
    devices_value,
    events_for,
    eventually,
    gpu,
    lock_annotation,
    node_stack,
    phase,
    plugin_settings,
    resource_counts,
    scheduled_pod,
    stand_in_settings,
    write_devices,
)

EARLY = "2026-01-01T00:00:00Z"
LATE = "2026-01-01T00:01:00Z"


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.yaml"
    write_devices(path, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1)])
    return path


async def place(
    sim: RunningApiServer,
    pod: dict[str, Any],
    *,
    created: str = LATE,
    lock: bool = True,
) -> None:
    """Store ``pod`` as created at ``created`` (the kubelet admits a batch oldest first), take
    the node lock for it when ``lock`` (as the extender's bind does), and bind it."""
    pod["metadata"]["creationTimestamp"] = created
    pod.setdefault("status", {"phase": "Pending"})
    sim.server.restore("pods", pod)
    name = pod["metadata"]["name"]
    if lock:
        await sim.server.patch(
            "nodes",
            NODE,
            {"metadata": {"annotations": lock_annotation("default", name)}},
            patch_type="merge",
        )
    await sim.server.bind("default", name, NODE)


async def all_waiting(kubelet: KubeletStandIn, count: int) -> None:
    """Until the paused kubelet holds ``count`` pods for admission: its pod watch has delivered
    every binding.  Resumed before, it admits what it holds first, whatever the creation times."""
    await eventually(
        lambda: kubelet.describe()["waiting"] == count, what=f"{count} pods wait for admission"
    )


async def watched(plugin: RunningPlugin, *names: str) -> None:
    """Until the plugin's pod watch has every pod of ``names`` (so an Allocate reads none)."""
    await eventually(
        lambda: {f"default/{name}" for name in names} <= set(plugin.node_pods.snapshot()),
        what=f"the plugin's watch has {', '.join(names)}",
    )


async def lock_seen(sim: RunningApiServer, plugin: RunningPlugin) -> None:
    """Until the plugin's node watch shows the node lock as it is (a pod identified through the
    kubelet's pod-resources releases the lock its node watch shows, reading nothing)."""

    def seen() -> bool:
        node = plugin.registrar.cached_node()
        watched = None if node is None else ObjectView(node).annotations.get(NODE_LOCK)
        return watched == annotations_of(sim, "nodes", NODE).get(NODE_LOCK)

    await eventually(seen, what="the plugin's node watch shows the lock")


def envs(kubelet: KubeletStandIn, pod: str, name: str) -> Mapping[str, str]:
    allocation = kubelet.allocation("default", pod)
    assert allocation is not None, f"{pod} has no allocation"
    found = allocation.container(name)
    assert found is not None, f"{pod}/{name} got nothing"
    return found.envs


def kubelet_ids(kubelet: KubeletStandIn, pod: str, name: str) -> tuple[str, ...]:
    allocation = kubelet.allocation("default", pod)
    assert allocation is not None
    found = allocation.container(name)
    assert found is not None
    given = found.resource(RESOURCE)
    assert given is not None
    return tuple(given.device_ids)


def message(sim: RunningApiServer, name: str) -> str:
    pod = sim.server.get("pods", name, namespace="default")
    return str((pod.get("status") or {}).get("message", ""))


def pod_a(gpu_uuid: str) -> dict[str, Any]:
    """Two containers, 1000 MiB each on ``gpu_uuid``."""
    value = devices_value([(gpu_uuid, 1000, 10)], [(gpu_uuid, 1000, 10)])
    return scheduled_pod("a", [container("main", 1), container("side", 1)], to_allocate=value)


def pod_b(gpu_uuid: str) -> dict[str, Any]:
    """One container, 3000 MiB on ``gpu_uuid``."""
    value = devices_value([(gpu_uuid, 3000, 30)])
    return scheduled_pod("b", [container("main", 1)], to_allocate=value)


def order(first: str) -> tuple[str, str]:
    """Creation times that make the kubelet admit ``first`` first, though A is bound first."""
    return (EARLY, LATE) if first == "a" else (LATE, EARLY)


@pytest.mark.parametrize("first", ["a", "b"], ids=["a-admitted-first", "b-admitted-first"])
@pytest.mark.parametrize("shared", [False, True], ids=["own-gpus", "one-gpu"])
async def test_hami_3096_each_pod_gets_its_own_devices_and_limits(
    sim: RunningApiServer,
    plugin_dir: Path,
    host_root: Path,
    devices: Path,
    first: str,
    shared: bool,
) -> None:
    a_gpu, b_gpu = UUIDS[0], UUIDS[0] if shared else UUIDS[1]
    a_created, b_created = order(first)
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, plugin):
        kubelet.pause()  # a slow kubelet: A waits for its Allocate
        await place(sim, pod_a(a_gpu), created=a_created)
        # B is bound later and takes the lock (HAMi takes an expired lock by age).
        await place(sim, pod_b(b_gpu), created=b_created)
        await all_waiting(kubelet, 2)
        await watched(plugin, "a", "b")
        await lock_seen(sim, plugin)
        kubelet.resume()
        await eventually(lambda: phase(sim, "a") == "Running", what="a running")
        await eventually(lambda: phase(sim, "b") == "Running", what="b running")

        assert kubelet.admission_log[:2] == (
            ["default/a", "default/b"] if first == "a" else ["default/b", "default/a"]
        )
        for name in ("main", "side"):
            given = envs(kubelet, "a", name)
            assert given["NVIDIA_VISIBLE_DEVICES"] == a_gpu
            assert given["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
            assert given["CUDA_DEVICE_SM_LIMIT"] == "10"
            assert kubelet_ids(kubelet, "a", name)[0].startswith(a_gpu)
        given = envs(kubelet, "b", "main")
        assert given["NVIDIA_VISIBLE_DEVICES"] == b_gpu
        assert given["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
        assert kubelet_ids(kubelet, "b", "main")[0].startswith(b_gpu)
        for name in ("a", "b"):
            assert annotations_of(sim, "pods", name)[BIND_PHASE] == "success"
        # B's lock went with B's allocation; A's never touched it.
        await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        assert plugin.metrics.allocate_requests.labels(outcome="failed")._value.get() == 0
        assert plugin.node_pods.reads == 0  # the watch had both pods: nothing read


@pytest.mark.parametrize("first", ["a", "b"], ids=["a-admitted-first", "b-admitted-first"])
async def test_hami_3096_without_pod_resources_the_first_admitted_is_refused(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path, first: str
) -> None:
    a_created, b_created = order(first)
    second = "b" if first == "a" else "a"
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=False) as (
        kubelet,
        _,
    ):
        kubelet.pause()
        await place(sim, pod_a(UUIDS[0]), created=a_created)
        await place(sim, pod_b(UUIDS[1]), created=b_created)
        await all_waiting(kubelet, 2)
        kubelet.resume()
        await eventually(lambda: phase(sim, first) == "Failed", what=f"{first} refused")
        await eventually(lambda: phase(sim, second) == "Running", what=f"{second} running")
        text = message(sim, first)
        assert (
            "no binding pod found on node gpu-node-1: 2 pods bound to it wait for GPUs "
            "(default/a, default/b)"
        ) in text
        # Nothing was guessed: the refused pod's list is as the scheduler wrote it.
        assert annotations_of(sim, "pods", first)[BIND_PHASE] == "allocating"
        assert kubelet.allocation("default", first) is None
        await eventually(lambda: bool(events_for(sim, NODE)), what="event on the node")
        expected = {"a": (UUIDS[0], "1000m"), "b": (UUIDS[1], "3000m")}[second]
        given = envs(kubelet, second, "main")
        assert (given["NVIDIA_VISIBLE_DEVICES"], given["CUDA_DEVICE_MEMORY_LIMIT_0"]) == expected
        assert annotations_of(sim, "pods", second)[BIND_PHASE] == "success"


def stray_pod() -> dict[str, Any]:
    """Asks for nvidia.com/gpu, placed by the default scheduler (the webhook failed open)."""
    pod = scheduled_pod("stray", [container("main", 1)], to_allocate="")
    pod["metadata"]["annotations"] = {}
    pod["metadata"]["labels"] = {}
    pod["spec"]["schedulerName"] = "default-scheduler"
    return pod


@pytest.mark.parametrize(
    ("stray_first", "pod_resources"),
    [(True, True), (False, True), (True, False)],
    ids=["stray-first", "placed-first", "stray-first-without-pod-resources"],
)
async def test_a_default_scheduler_pod_is_refused_while_a_placed_pod_is_served(
    sim: RunningApiServer,
    plugin_dir: Path,
    host_root: Path,
    devices: Path,
    stray_first: bool,
    pod_resources: bool,
) -> None:
    stray_created, placed_created = (EARLY, LATE) if stray_first else (LATE, EARLY)
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=pod_resources) as (
        kubelet,
        plugin,
    ):
        kubelet.pause()
        await place(sim, stray_pod(), created=stray_created, lock=False)
        value = devices_value([(UUIDS[1], 2000, 20)])
        placed = scheduled_pod("placed", [container("main", 1)], to_allocate=value)
        await place(sim, placed, created=placed_created)
        await all_waiting(kubelet, 2)
        kubelet.resume()
        await eventually(lambda: phase(sim, "stray") == "Failed", what="stray refused")
        await eventually(lambda: phase(sim, "placed") == "Running", what="placed running")
        text = message(sim, "stray")
        assert "no binding pod found on node gpu-node-1: " in text
        if pod_resources:
            assert (
                "pod default/stray was not placed by hami-scheduler "
                "(schedulerName default-scheduler): it has no device decision"
            ) in text
            await eventually(lambda: bool(events_for(sim, "stray")), what="event on the pod")
        else:
            assert "2 pods bound to it wait for GPUs (default/placed, default/stray)" in text
        assert annotations_of(sim, "pods", "stray") == {}  # not ours: nothing written
        assert envs(kubelet, "placed", "main")["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        assert envs(kubelet, "placed", "main")["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
        assert plugin.metrics.allocate_failures.labels(reason="no_pod")._value.get() == 1


async def test_plugin_restart_between_bind_and_allocate(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    kubelet_settings = stand_in_settings(sim, plugin_dir)
    settings = plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=devices,
        host_root=host_root,
        pod_resources_socket=kubelet_settings.pod_resources_socket,
    )
    async with KubeletStandIn(kubelet_settings) as kubelet:
        async with serving(settings) as first:
            await eventually(first.ready, what="first plugin registered")
            kubelet.pause()
            value = devices_value([(UUIDS[1], 1500, 15)])
            await place(sim, scheduled_pod("p", [container("main", 1)], to_allocate=value))
        # The plugin is gone before the kubelet calls Allocate; a new one starts with empty
        # memory and caches.
        async with serving(settings) as second:
            await eventually(second.ready, what="second plugin registered")
            await eventually(lambda: resource_counts(kubelet) == (8, 8), what="GPUs listed")
            kubelet.resume()
            await eventually(lambda: phase(sim, "p") == "Running", what="p running")
            given = envs(kubelet, "p", "main")
            assert given["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
            assert given["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1500m"
            assert annotations_of(sim, "pods", "p")[BIND_PHASE] == "success"
            await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))


async def test_an_init_containers_replica_handed_on_serves_the_next_containers_own_gpu(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    # The kubelet gives "main" the replica "setup" held (no GetPreferredAllocation for it), a
    # replica of UUIDS[0]; main's entry names UUIDS[1].  The replica was answered to this very
    # pod, so it stands for any GPU of its entry.
    async with node_stack(sim, plugin_dir, host_root, devices) as (kubelet, _):
        value = devices_value([(UUIDS[0], 500, 5)], [(UUIDS[1], 4000, 40)])
        pod = scheduled_pod(
            "init", [container("main", 1)], init=[container("setup", 1)], to_allocate=value
        )
        await place(sim, pod)
        await eventually(lambda: phase(sim, "init") == "Running", what="pod running")
        assert kubelet_ids(kubelet, "init", "main") == kubelet_ids(kubelet, "init", "setup")
        assert kubelet_ids(kubelet, "init", "setup")[0].startswith(UUIDS[0])
        assert envs(kubelet, "init", "setup")["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
        assert envs(kubelet, "init", "main")["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        assert envs(kubelet, "init", "main")["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"


async def test_a_kubelet_choice_that_names_other_gpus_is_refused(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    # Every replica of UUIDS[1] (split 4) is held by "hog"; the scheduler's count and the
    # kubelet's disagree (a fifth pod on UUIDS[1]), so the kubelet can only give a replica of
    # UUIDS[0]: the pod is refused rather than served on a GPU it was not given.
    async with node_stack(sim, plugin_dir, host_root, devices) as (_, plugin):
        value = devices_value(*([(UUIDS[1], 100, 0)] for _ in range(4)))
        hog = scheduled_pod("hog", [container(f"c{i}", 1) for i in range(4)], to_allocate=value)
        await place(sim, hog)
        await eventually(lambda: phase(sim, "hog") == "Running", what="hog running")
        await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        late = devices_value([(UUIDS[1], 100, 0)])
        await place(sim, scheduled_pod("late", [container("main", 1)], to_allocate=late))
        await eventually(lambda: phase(sim, "late") == "Failed", what="late refused")
        chosen = f"the kubelet chose GPUs [{UUIDS[0]}] but pod default/late was given [{UUIDS[1]}]"
        assert chosen in message(sim, "late")
        assert annotations_of(sim, "pods", "late")[BIND_PHASE] == "failed"
        assert annotations_of(sim, "pods", "late")[NVIDIA_DEVICES_TO_ALLOCATE] == late
        await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        await eventually(lambda: bool(events_for(sim, "late")), what="event on the pod")
        assert plugin.metrics.allocate_failures.labels(reason="invalid")._value.get() == 1


async def test_api_requests_for_one_pod(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    async with node_stack(sim, plugin_dir, host_root, devices, register_interval_s=300.0) as (
        kubelet,
        plugin,
    ):
        await eventually(lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE))
        before = sim.server.requests.counts()
        value = devices_value([(UUIDS[0], 1000, 10)])
        # Admitted once the plugin's watches have the pod and the lock, as they do but for a
        # watch event still in flight: then nothing needs reading.
        kubelet.pause()
        await place(sim, scheduled_pod("one", [container("main", 1)], to_allocate=value))
        await watched(plugin, "one")
        await lock_seen(sim, plugin)
        kubelet.resume()
        await eventually(lambda: phase(sim, "one") == "Running", what="pod running")
        await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        spent = sim.server.requests.counts().since(before)
        ours = spent.by("verb", "resource", client="hami-deviceplugin")
        # One pod patch (the commit) and one node patch (the lock), nothing read.
        assert ours == {("PATCH", "pods"): 1, ("PATCH", "nodes"): 1}


@pytest.mark.parametrize("pod_resources", [True, False])
async def test_the_node_says_how_the_plugin_tells_pods_apart(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path, pod_resources: bool
) -> None:
    """``hami.io/node-allocate-identity: pod-resources`` lets the scheduler bind without the
    node lock; only a plugin the kubelet's PodResources API answers may say it."""
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=pod_resources):
        await eventually(lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE))
        said = annotations_of(sim, "nodes", NODE).get(NODE_ALLOCATE_IDENTITY)
        if pod_resources:
            assert said is not None
            assert said.startswith(f"{ALLOCATE_IDENTITY_POD_RESOURCES} ")
            assert identity_is_fresh(said, datetime.now(UTC))
        else:
            assert said is None
    # Stopped gracefully, the plugin takes it back: whatever comes next may not tell pods apart.
    assert NODE_ALLOCATE_IDENTITY not in annotations_of(sim, "nodes", NODE)
    assert NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE)


async def test_a_lagging_pod_watch_still_steers_the_kubelet_to_the_pods_gpu(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    # A lock node (no pod-resources): the kubelet asks GetPreferredAllocation before the
    # plugin's pod watch has shown the Binding.  The plugin reads the node's pods afresh rather
    # than prefer nothing (the kubelet would then pick other GPUs and the Allocate refuse it).
    node = NodeSettings(device_split_count=4, enable_get_preferred_allocation=True)
    second = devices_value([(UUIDS[1], 1000, 0)])
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=False, node=node) as (
        kubelet,
        _,
    ):
        assert sim.server.hold_watches("pods", "hami-deviceplugin") >= 1
        try:
            await place(sim, scheduled_pod("late", [container("main", 1)], to_allocate=second))
            await eventually(lambda: phase(sim, "late") == "Running", what="late running")
        finally:
            sim.server.release_watches()
        given = envs(kubelet, "late", "main")
        assert given["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]


async def test_a_lagging_node_watch_still_releases_the_lock_of_the_pod_served(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    # A lock node: the plugin's node watch has not shown the lock the scheduler took for the
    # pod when its Allocate completes.  It reads the node again and releases the lock, rather
    # than leave it to a scheduler's timeout.
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=False) as (_, _):
        assert sim.server.hold_watches("nodes", "hami-deviceplugin") >= 1
        try:
            await place(sim, pod_a(UUIDS[0]))
            await eventually(lambda: phase(sim, "a") == "Running", what="a running")
            await eventually(lambda: NODE_LOCK not in annotations_of(sim, "nodes", NODE))
        finally:
            sim.server.release_watches()
        assert annotations_of(sim, "pods", "a")[BIND_PHASE] == "success"
