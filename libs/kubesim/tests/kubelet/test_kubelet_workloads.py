"""The kubelet stand-in's containers playing HAMi-core: which containers play and where their
region files lie (pure), the usage they write (properties), and the stand-in keeping real region
files current for a running pod and letting go of them when the pod goes."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.kubelet.pods.workloads import (
    MEMORY_SHARE,
    Workload,
    Workloads,
    plan_workloads,
    usage_at,
)
from hami_kubesim.kubelet.status import (
    ALLOCATIONS_ANNOTATION,
    ContainerAllocation,
    MountRecord,
    PodAllocation,
    ResourceAllocation,
)
from hami_kubesim.kubelet.testing import TEST_NODE, kubelet_on_node, pod_phase
from hami_kubesim.testing import eventually
from hami_protocol.region.codec import SharedRegion, decode_region

GPU = "nvidia.com/gpu"
UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
UID = "0b7c1f9e-3a52-4c3e-9d0e-5f7a2b6c8d01"


def _hami_answer(
    uid: str, container: str, uuids: list[str], mib: int, cores: int
) -> dict[str, Any]:
    """An Allocate answer as the device plugin gives it with a host root (HAMi's env/mounts)."""
    envs = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(uuids),
        "CUDA_DEVICE_SM_LIMIT": str(cores),
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"/usr/local/vgpu/{container}-cache.cache",
        **{f"CUDA_DEVICE_MEMORY_LIMIT_{i}": f"{mib}m" for i in range(len(uuids))},
    }
    return {
        "resource": GPU,
        "deviceIDs": uuids,
        "envs": envs,
        "mounts": [
            {
                "containerPath": "/usr/local/vgpu/libvgpu.so",
                "hostPath": "/usr/local/vgpu/libvgpu.so",
                "readOnly": True,
            },
            {
                "containerPath": "/usr/local/vgpu",
                "hostPath": f"/usr/local/vgpu/containers/{uid}_{container}",
                "readOnly": False,
            },
        ],
    }


def _resource(answer: dict[str, Any]) -> ResourceAllocation:
    return ResourceAllocation(
        resource=answer["resource"],
        device_ids=tuple(answer["deviceIDs"]),
        envs=answer["envs"],
        mounts=tuple(
            MountRecord(m["containerPath"], m["hostPath"], m["readOnly"]) for m in answer["mounts"]
        ),
    )


def test_the_app_containers_with_a_shared_cache_play(tmp_path: Path) -> None:
    two = _hami_answer(UID, "trainer", [UUID_A, UUID_B], 8000, 40)
    two["envs"]["CUDA_TASK_PRIORITY"] = "0"
    no_cache = _hami_answer(UID, "plain", [UUID_A], 1000, 10)
    del no_cache["envs"]["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    bad = _hami_answer(UID, "broken", [UUID_A], 1000, 10)
    bad["envs"]["CUDA_DEVICE_MEMORY_LIMIT_0"] = "lots"
    allocation = PodAllocation(
        namespace="ml",
        name="job",
        uid=UID,
        node=TEST_NODE,
        containers=(
            ContainerAllocation(
                "warmup", "init", (_resource(_hami_answer(UID, "warmup", [UUID_A], 1000, 10)),)
            ),
            ContainerAllocation(
                "proxy", "sidecar", (_resource(_hami_answer(UID, "proxy", [UUID_B], 500, 0)),)
            ),
            ContainerAllocation("trainer", "app", (_resource(two),)),
            ContainerAllocation("plain", "app", (_resource(no_cache),)),
            ContainerAllocation("broken", "app", (_resource(bad),)),
            ContainerAllocation("cpu", "app"),
        ),
    )
    workloads, problems = plan_workloads(tmp_path, allocation)
    assert [w.container for w in workloads] == ["proxy", "trainer"]
    trainer = workloads[1]
    assert trainer.region == (
        tmp_path / f"usr/local/vgpu/containers/{UID}_trainer/trainer-cache.cache"
    )
    assert trainer.devices == ((UUID_A, 8000 << 20, 40), (UUID_B, 8000 << 20, 40))
    assert trainer.priority == 0
    assert workloads[0].priority == 1  # HAMi-core's default
    assert (trainer.namespace, trainer.pod, trainer.key) == ("ml", "job", (UID, "trainer"))
    assert len(problems) == 1
    assert "broken" in problems[0]
    assert "lots" in problems[0]


_devices = st.lists(
    st.tuples(
        st.just(UUID_A),
        st.integers(min_value=0, max_value=1 << 40),
        st.integers(min_value=0, max_value=100),
    ),
    min_size=1,
    max_size=16,
)


def _workload(
    devices: list[tuple[str, int, int]], uid: str = UID, container: str = "c"
) -> Workload:
    return Workload(
        pod_uid=uid,
        namespace="default",
        pod="p",
        container=container,
        region=Path("/nowhere/x.cache"),
        devices=tuple(devices),
        priority=1,
    )


@given(
    devices=_devices,
    uid=st.uuids().map(str),
    container=st.text(min_size=1, max_size=20),
    tick=st.integers(min_value=0, max_value=10**6),
)
def test_usage_stays_plausible(
    devices: list[tuple[str, int, int]], uid: str, container: str, tick: int
) -> None:
    workload = _workload(devices, uid, container)
    usage = usage_at(workload, tick)
    low, high = MEMORY_SHARE
    assert usage == usage_at(workload, tick)  # deterministic
    for index, (_, limit, sm_limit) in enumerate(devices):
        base = limit or 1 << 30
        used = usage.used_bytes[index]
        assert low * base - 1 <= used <= high * base
        ceiling = sm_limit if 0 < sm_limit < 100 else 100
        assert 0 <= usage.sm_util[index] <= ceiling
        parts = usage.context_bytes[index] + usage.module_bytes[index] + usage.buffer_bytes[index]
        assert parts == used
        assert min(usage.buffer_bytes[index], usage.context_bytes[index]) >= 0


@given(uid=st.uuids().map(str), first=st.integers(0, 10**6), second=st.integers(0, 10**6))
def test_memory_is_a_stable_share_and_moves_only_a_little(
    uid: str, first: int, second: int
) -> None:
    limit = 10 << 30
    workload = _workload([(UUID_A, limit, 0)], uid)
    one = usage_at(workload, first).used_bytes[0]
    two = usage_at(workload, second).used_bytes[0]
    assert abs(one - two) <= 0.04 * limit + 1


def test_utilisation_varies_over_time_and_memory_differs_per_container() -> None:
    workload = _workload([(UUID_A, 8 << 30, 0), (UUID_B, 8 << 30, 30)])
    ticks = [usage_at(workload, t) for t in range(40)]
    assert len({u.sm_util[0] for u in ticks}) > 10
    assert len({u.sm_util[1] for u in ticks}) > 5
    assert max(u.sm_util[1] for u in ticks) <= 30
    shares = {
        usage_at(_workload([(UUID_A, 8 << 30, 0)], container=f"c{i}"), 0).used_bytes[0]
        for i in range(20)
    }
    assert len(shares) == 20


def test_a_workload_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="interval"):
        Workloads(tmp_path, node="n", interval=0)


async def test_a_region_that_cannot_be_written_leaves_the_others_playing(tmp_path: Path) -> None:
    allocation = PodAllocation(
        namespace="default",
        name="job",
        uid=UID,
        node=TEST_NODE,
        containers=tuple(
            ContainerAllocation(c, "app", (_resource(_hami_answer(UID, c, [UUID_A], 100, 0)),))
            for c in ("good", "bad")
        ),
    )
    containers = tmp_path / "usr/local/vgpu/containers"
    containers.mkdir(parents=True)
    (containers / f"{UID}_bad").write_text("a file where the directory should be")
    workloads = Workloads(tmp_path, node=TEST_NODE, interval=0.01)
    workloads.play(allocation)
    runner = asyncio.create_task(workloads.run())
    try:
        await eventually(lambda: workloads.ticks >= 3)
        assert workloads.playing == {(UID, "good")}
        assert set(workloads.wanted) == {(UID, "good"), (UID, "bad")}
    finally:
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
    assert workloads.playing == frozenset()  # closed on the way out
    assert (containers / f"{UID}_good/good-cache.cache").is_file()


# --- the stand-in ---------------------------------------------------------------------------


@pytest.fixture
def host_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="ksim-host-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _running_gpu_pod(name: str, uid: str, containers: dict[str, list[str]]) -> dict[str, Any]:
    """A pod already running on the test node, its allocation record holding HAMi answers
    (their directories named after ``uid``; the API server gives the pod a UID of its own)."""
    record = {
        "node": TEST_NODE,
        "containers": [
            {"name": c, "kind": "app", "resources": [_hami_answer(uid, c, uuids, 2000, 25)]}
            for c, uuids in containers.items()
        ],
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {ALLOCATIONS_ANNOTATION: json.dumps(record)},
        },
        "spec": {
            "nodeName": TEST_NODE,
            "containers": [{"name": c, "image": "cuda"} for c in containers],
        },
        "status": {"phase": "Running"},
    }


def _read(path: Path) -> SharedRegion | None:
    try:
        return decode_region(path.read_bytes())
    except (OSError, ValueError):
        return None


async def test_running_containers_keep_their_regions_until_the_pod_goes(
    plugin_dir: Path, host_root: Path
) -> None:
    async with kubelet_on_node(plugin_dir, host_root=host_root, workload_interval=0.05) as (
        sim,
        kubelet,
    ):
        workloads = kubelet.workloads
        assert workloads is not None
        sim.server.restore(
            "pods", _running_gpu_pod("job", UID, {"main": [UUID_A, UUID_B], "aux": [UUID_B]})
        )
        main = host_root / f"usr/local/vgpu/containers/{UID}_main/main-cache.cache"
        aux = host_root / f"usr/local/vgpu/containers/{UID}_aux/aux-cache.cache"
        await eventually(lambda: _read(main) is not None and _read(aux) is not None)
        first = _read(main)
        assert first is not None
        assert first.num == 2
        assert first.uuids[:2] == (UUID_A, UUID_B)
        assert first.limits[:2] == (2000 << 20, 2000 << 20)
        assert first.sm_limits[:2] == (25, 25)
        (proc,) = first.procs
        assert proc.status == 1
        for index in range(2):
            assert 0.2 * (2000 << 20) - 1 <= proc.used[index].total <= 0.9 * (2000 << 20)
            assert proc.device_util[index].sm_util <= 25

        def moved() -> bool:
            now = _read(main)
            return now is not None and now.procs != first.procs and now.last_kernel_time > 0

        await eventually(moved, what="the usage written again")

        await sim.server.delete("pods", "job", namespace="default")
        await eventually(lambda: pod_phase(sim, "job") is None)
        await eventually(lambda: workloads.playing == frozenset(), what="writers closed")
        assert main.is_file()
        assert aux.is_file()  # left for the monitor's resync
        before, ticks = main.read_bytes(), workloads.ticks
        await eventually(lambda: workloads.ticks >= ticks + 3)
        assert main.read_bytes() == before


async def test_a_pod_that_stops_stops_writing(plugin_dir: Path, host_root: Path) -> None:
    async with kubelet_on_node(plugin_dir, host_root=host_root, workload_interval=0.05) as (
        sim,
        kubelet,
    ):
        workloads = kubelet.workloads
        assert workloads is not None
        stored = sim.server.restore("pods", _running_gpu_pod("batch", UID, {"main": [UUID_A]}))
        uid = stored["metadata"]["uid"]
        await eventually(lambda: workloads.playing == {(uid, "main")})
        await sim.server.patch(
            "pods",
            "batch",
            {"status": {"phase": "Succeeded"}},
            namespace="default",
            patch_type="merge",
            subresource="status",
        )
        await eventually(lambda: workloads.playing == frozenset(), what="writers closed")
        assert workloads.wanted == {}


async def test_without_a_host_root_no_container_plays(plugin_dir: Path) -> None:
    async with kubelet_on_node(plugin_dir) as (sim, kubelet):
        assert kubelet.workloads is None
        sim.server.restore("pods", _running_gpu_pod("job", UID, {"main": [UUID_A]}))
        await eventually(lambda: kubelet.allocation("default", "job") is not None)
        names = {task.get_name() for task in asyncio.all_tasks()}
        assert f"kubelet-{TEST_NODE}-pod-watch" in names
        assert f"kubelet-{TEST_NODE}-workloads" not in names
