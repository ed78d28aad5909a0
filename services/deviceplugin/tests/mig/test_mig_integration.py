"""Dynamic MIG through the real gRPC interface: the plugin on a ``mig`` node (fake A100s whose
MIG state lives in a file, as a real GPU's outlives the plugin) against kubesim's API server and
kubelet stand-in.  Pods are prepared as the scheduler leaves them: one device-list entry per MIG
instance and the reservations in ``hami.io/vgpu-mig-allocations``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_deviceplugin.app import serving
from hami_deviceplugin.gpu.mig.fake_control import state_file_for
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.testing import RunningApiServer
from hami_protocol.config.node import NodeSettings
from hami_protocol.keys import (
    BIND_PHASE,
    NVIDIA_DEVICES_TO_ALLOCATE,
    NVIDIA_MIG_ALLOCATIONS,
    NVIDIA_REGISTER,
)
from hami_protocol.node.registry import MigPlacement, decode_node_devices
from hami_protocol.pod.mig import MigReservation, decode_mig_reservations, encode_mig_reservations

from ..helpers import (
    NODE,
    annotations_of,
    container,
    devices_value,
    events_for,
    eventually,
    node_stack,
    phase,
    plugin_settings,
    resource_counts,
    scheduled_pod,
    stand_in_settings,
    submit,
    write_atomically,
)

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
MIG_NODE = NodeSettings(operating_mode="mig", device_split_count=7)
PROFILES = {"1g.5gb": (4864, 13), "2g.10gb": (9856, 26), "3g.20gb": (19968, 39)}


def a100(uuid: str, index: int, **mig: Any) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "index": index,
        "model": "NVIDIA A100-SXM4-40GB",
        "memory_mib": 40960,
        "mig": {"mode": "enabled", **mig},
    }


def write(path: Path, *gpus: dict[str, Any]) -> None:
    # The plugin polls the file: never let it read half of it.
    write_atomically(path, yaml.safe_dump({"gpus": list(gpus)}))


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.yaml"
    write(path, a100(A, 0), a100(B, 1))
    return path


def instances(devices: Path, gpu: str = A) -> list[dict[str, Any]]:
    """The fake GPU's instances as the hardware (the state file) has them."""
    path = state_file_for(devices)
    if not path.exists():
        return []
    record = json.loads(path.read_text())["gpus"].get(gpu) or {}
    return list(record.get("instances") or [])


def created(devices: Path) -> int:
    """How many instances the fake GPUs have made so far (its creation serial)."""
    path = state_file_for(devices)
    return int(json.loads(path.read_text()).get("serial", 0)) if path.exists() else 0


def mig_pod(
    name: str,
    containers: Sequence[Sequence[tuple[str, str, int]]],
    *,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose app container n holds MIG devices ``(gpu, profile, start)``."""
    reservations = []
    lists = []
    for index, held in enumerate(containers):
        lists.append([(gpu, *PROFILES[profile]) for gpu, profile, _ in held])
        for device, (gpu, profile, start) in enumerate(held):
            size = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 4}[profile]
            reservations.append(
                MigReservation(index, device, gpu, profile, MigPlacement(start, size))
            )
    extra = {NVIDIA_MIG_ALLOCATIONS: encode_mig_reservations(reservations), **(annotations or {})}
    return scheduled_pod(
        name,
        [container(f"c{n}", len(held)) for n, held in enumerate(containers)],
        to_allocate=devices_value(*lists),
        extra_annotations=extra,
    )


def envs_of(kubelet: KubeletStandIn, pod: str, name: str = "c0") -> dict[str, str]:
    allocation = kubelet.allocation("default", pod)
    assert allocation is not None
    found = allocation.container(name)
    assert found is not None
    return dict(found.envs)


def mig_node(sim: RunningApiServer, plugin_dir: Path, devices: Path, **overrides: Any) -> Any:
    overrides.setdefault("mig_lock_file", plugin_dir / "mig.lock")
    overrides.setdefault("mig_reconcile_interval_s", 0.05)
    return node_stack(sim, plugin_dir, None, devices, node=MIG_NODE, **overrides)


async def test_a_mig_pod_gets_its_instances_and_nothing_of_hami_core(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    async with mig_node(sim, plugin_dir, devices) as (kubelet, plugin):
        await eventually(lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE))
        registered = decode_node_devices(annotations_of(sim, "nodes", NODE)[NVIDIA_REGISTER])
        assert [(d.id, d.mode, d.count, d.devcore) for d in registered] == [
            (A, "mig", 7, 100),
            (B, "mig", 7, 100),
        ]
        pod = mig_pod("train", [[(A, "1g.5gb", 6), (A, "3g.20gb", 0)]])
        await submit(sim, pod)
        await eventually(lambda: phase(sim, "train") == "Running", what="pod running")

        annotations = annotations_of(sim, "pods", "train")
        assert annotations[BIND_PHASE] == "success"
        assert annotations[NVIDIA_DEVICES_TO_ALLOCATE] == ";"
        realised = decode_mig_reservations(annotations[NVIDIA_MIG_ALLOCATIONS])
        assert all(r.runtime is not None for r in realised)
        made = {(i["start"], i["size"]): i for i in instances(devices)}
        assert set(made) == {(6, 1), (0, 4)}
        by_device = [r.runtime.mig_uuid for r in realised if r.runtime is not None]
        assert by_device == [made[(6, 1)]["uuid"], made[(0, 4)]["uuid"]]
        assert [r.runtime.gpu_instance_id for r in realised if r.runtime is not None] == [
            made[(6, 1)]["gi"],
            made[(0, 4)]["gi"],
        ]
        envs = envs_of(kubelet, "train")
        assert envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(by_device)}
        allocation = kubelet.allocation("default", "train")
        assert allocation is not None
        c0 = allocation.container("c0")
        assert c0 is not None
        assert all(not r.mounts for r in c0.resources)
        assert not (plugin_dir / "mig.lock").exists()
        assert plugin.mig is not None


@pytest.mark.parametrize(
    ("held", "annotations", "reason"),
    [
        ([(A, "1g.5gb", 7)], {}, "offers no 1g.5gb instance at slices 7+1"),
        (
            [(A, "1g.5gb", 0)],
            {
                NVIDIA_MIG_ALLOCATIONS: encode_mig_reservations(
                    [MigReservation(0, 0, A, "4g.20gb", MigPlacement(0, 4))]
                )
            },
            "unknown MIG profile '4g.20gb'",  # offered by the GPU, not allow-listed
        ),
        (
            [(A, "1g.5gb", 0)],
            {
                NVIDIA_MIG_ALLOCATIONS: encode_mig_reservations(
                    [MigReservation(0, 0, B, "1g.5gb", MigPlacement(0, 1))]
                )
            },
            "device 0 is GPU-aaaaaaaa",
        ),
        (
            [(A, "1g.5gb", 0)],
            {
                NVIDIA_MIG_ALLOCATIONS: encode_mig_reservations(
                    [
                        MigReservation(0, 0, A, "1g.5gb", MigPlacement(0, 1)),
                        MigReservation(0, 1, A, "1g.5gb", MigPlacement(1, 1)),
                    ]
                )
            },
            "has 1 MIG devices but 2 reservations",
        ),
    ],
)
async def test_refusals_reach_the_kubelet_and_the_pod_and_leave_no_instance(
    sim: RunningApiServer,
    plugin_dir: Path,
    devices: Path,
    held: list[tuple[str, str, int]],
    annotations: dict[str, str],
    reason: str,
) -> None:
    async with mig_node(sim, plugin_dir, devices) as (_, _plugin):
        await submit(sim, mig_pod("bad", [held], annotations=annotations))
        await eventually(lambda: phase(sim, "bad") == "Failed", what="pod rejected")
        assert annotations_of(sim, "pods", "bad")[BIND_PHASE] == "failed"
        # The Event is queued as the call fails and posted by the recorder's task: it may reach
        # the API server after the kubelet has failed the pod.
        await eventually(
            lambda: any(reason in e.get("message", "") for e in events_for(sim, "bad")),
            what=f"an AllocateFailed event saying {reason!r}",
        )
        assert instances(devices) == []


async def test_an_nvml_failure_mid_creation_destroys_what_the_call_made(
    sim: RunningApiServer, plugin_dir: Path, tmp_path: Path
) -> None:
    devices = tmp_path / "gpus.yaml"
    # GI + CI of the first instance succeed, the second instance's GI succeeds, its CI fails.
    write(devices, a100(A, 0, fail_create_after=3))
    async with mig_node(sim, plugin_dir, devices) as (_, _plugin):
        await submit(sim, mig_pod("half", [[(A, "1g.5gb", 6), (A, "2g.10gb", 0)]]))
        await eventually(lambda: phase(sim, "half") == "Failed", what="pod rejected")
        injected = "injected failure creating a compute instance"
        await eventually(
            lambda: any(injected in e.get("message", "") for e in events_for(sim, "half")),
            what="an AllocateFailed event naming the injected failure",
        )
        assert instances(devices) == []
        assert NVIDIA_MIG_ALLOCATIONS in annotations_of(sim, "pods", "half")
        realised = decode_mig_reservations(
            annotations_of(sim, "pods", "half")[NVIDIA_MIG_ALLOCATIONS]
        )
        assert all(r.runtime is None for r in realised)  # nothing was committed


async def test_deleting_the_pod_destroys_its_instance(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    async with mig_node(sim, plugin_dir, devices) as (_, plugin):
        await submit(sim, mig_pod("short", [[(B, "2g.10gb", 2)]]))
        await eventually(lambda: phase(sim, "short") == "Running", what="pod running")
        assert len(instances(devices, B)) == 1
        await sim.server.delete("pods", "short", namespace="default")
        await eventually(lambda: instances(devices, B) == [], what="instance destroyed")
        mig = plugin.mig
        assert mig is not None
        # Counted once the pass has removed the MIG lock file (a worker thread), after the
        # instance is gone from the GPU.
        await eventually(lambda: mig.destroyed == 1, what="the destruction counted")


async def test_a_restarted_plugin_keeps_a_running_pods_instance(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    kubelet = KubeletStandIn(stand_in_settings(sim, plugin_dir))
    settings = plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=devices,
        host_root=None,
        node=MIG_NODE,
        mig_lock_file=plugin_dir / "mig.lock",
        mig_reconcile_interval_s=0.05,
        pod_resources_socket=stand_in_settings(sim, plugin_dir).pod_resources_socket,
    )
    async with kubelet:
        async with serving(settings) as plugin:
            await eventually(plugin.ready, what="registered")
            await eventually(lambda: resource_counts(kubelet)[1] > 0, what="GPUs advertised")
            await submit(sim, mig_pod("long", [[(A, "3g.20gb", 4)]]))
            await eventually(lambda: phase(sim, "long") == "Running", what="pod running")
        (before,) = instances(devices)
        # A stale instance on the idle GPU B (as a crash could leave one) is cleared at start.
        stale = {"profile": "7g.40gb", "start": 0, "size": 8, "gi": 1, "ci": 0, "uuid": "MIG-x"}
        state = json.loads(state_file_for(devices).read_text())
        state["gpus"][B] = {"mode": "enabled", "instances": [stale]}
        state_file_for(devices).write_text(json.dumps(state))
        async with serving(settings) as plugin:
            await eventually(plugin.ready, what="registered again")
            assert plugin.mig is not None
            await eventually(lambda: instances(devices, B) == [], what="stale instance cleared")
            for _ in range(3):
                assert await plugin.mig.reconcile() == ()
            assert instances(devices) == [before]
            await sim.server.delete("pods", "long", namespace="default")
            await eventually(lambda: instances(devices) == [], what="adopted instance destroyed")


async def test_doubt_destroys_nothing_on_the_gpu(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    async with mig_node(sim, plugin_dir, devices) as (_, plugin):
        await submit(sim, mig_pod("keep", [[(A, "1g.5gb", 0)]]))
        await eventually(lambda: phase(sim, "keep") == "Running", what="pod running")
        # Another pod on the node carries an unreadable reservation naming GPU A.
        broken = scheduled_pod(
            "broken",
            [container("c0")],
            to_allocate=devices_value([]),
            extra_annotations={NVIDIA_MIG_ALLOCATIONS: f'[{{"gpuUUID":"{A}",'},
        )
        await submit(sim, broken, lock=False)
        assert plugin.mig is not None
        mig = plugin.mig

        async def broken_is_seen() -> bool:
            return any(
                raw["metadata"]["name"] == "broken" for raw in plugin.node_pods.snapshot().values()
            )

        await eventually(broken_is_seen, what="the watch has the broken pod")
        await sim.server.delete("pods", "keep", namespace="default")

        async def keep_is_gone() -> bool:
            return all(
                raw["metadata"]["name"] != "keep" for raw in plugin.node_pods.snapshot().values()
            )

        await eventually(keep_is_gone, what="the watch saw the deletion")
        for _ in range(3):
            assert await mig.reconcile() == ()
        assert len(instances(devices)) == 1


async def test_startup_enables_mig_and_reports_a_gpu_needing_a_reset_unhealthy(
    sim: RunningApiServer, plugin_dir: Path, tmp_path: Path
) -> None:
    devices = tmp_path / "gpus.yaml"
    write(devices, a100(A, 0, mode="pending"), a100(B, 1, mode="disabled"))
    async with mig_node(sim, plugin_dir, devices) as (_, plugin):

        def registered() -> dict[str, bool]:
            value = annotations_of(sim, "nodes", NODE).get(NVIDIA_REGISTER, "[]")
            return {d.id: d.health for d in decode_node_devices(value)}

        await eventually(lambda: registered() == {A: False, B: True}, what="A unhealthy")
        state = json.loads(state_file_for(devices).read_text())
        assert state["gpus"][B]["mode"] == "enabled"
        (a,) = (g for g in plugin.inventory.gpus if g.uuid == A)
        assert "reset" in a.reason


async def test_a_pod_list_failure_at_start_changes_nothing_until_the_pods_are_known(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    stale = {"profile": "7g.40gb", "start": 0, "size": 8, "gi": 1, "ci": 0, "uuid": "MIG-x"}
    document = {"serial": 1, "gpus": {B: {"mode": "enabled", "instances": [stale]}}}
    state_file_for(devices).write_text(json.dumps(document))
    kubelet = KubeletStandIn(stand_in_settings(sim, plugin_dir))
    settings = plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=devices,
        host_root=None,
        node=MIG_NODE,
        mig_lock_file=plugin_dir / "mig.lock",
        mig_reconcile_interval_s=3600.0,
    )
    async with kubelet:
        sim.server.inject_error(verb="list", resource="pods", code=403, times=1)
        async with serving(settings) as plugin:
            assert plugin.mig is not None
            assert not plugin.mig.started
            assert len(instances(devices, B)) == 1  # every GPU counted busy
            await eventually(lambda: plugin.node_pods.reflector.has_synced, what="pods watched")
            assert await plugin.mig.reconcile() == ()  # the start-up pass, now with the pods
            assert plugin.mig.started
            assert instances(devices, B) == []


async def test_an_allocate_that_times_out_after_creating_takes_its_instances_back(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    # The commit hangs (30 s patch latency): the deadline always ends the call, after the
    # creation even on a loaded machine (5 s for the identification and the creation).
    async with mig_node(sim, plugin_dir, devices, allocate_timeout_s=5.0) as (_, _plugin):
        sim.server.inject_latency(30.0, verb="patch", resource="pods")
        try:
            await submit(sim, mig_pod("slow", [[(A, "2g.10gb", 4)]]))
            # Made (the fake counts every creation) and taken back: on a loaded machine the
            # instance may live too briefly for a poll to see it.
            await eventually(
                lambda: created(devices) >= 1 and instances(devices) == [],
                what="an instance created and taken back",
            )
        finally:
            sim.server.clear_faults()
        await eventually(lambda: bool(events_for(sim, "slow")), what="AllocateFailed recorded")


async def test_a_later_failed_allocate_never_takes_back_an_earlier_calls_instance(
    sim: RunningApiServer, plugin_dir: Path, devices: Path
) -> None:
    async with mig_node(sim, plugin_dir, devices) as (_, _plugin):
        await submit(sim, mig_pod("first", [[(A, "1g.5gb", 2)]]))
        await eventually(lambda: phase(sim, "first") == "Running", what="first running")
        (made,) = instances(devices)
        # A pod of no scheduler of ours asks for a GPU: refused before anything is decided.
        stray = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "stray", "namespace": "default"},
            "spec": {"containers": [container("c0", 1)]},
        }
        await submit(sim, stray, lock=False)
        await eventually(lambda: phase(sim, "stray") == "Failed", what="stray rejected")
        assert instances(devices) == [made]
