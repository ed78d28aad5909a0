"""Dynamic MIG through the extender's HTTP interface against kubesim: registration with
profiles, the reservation carried by the Binding, occupancy from every pod's reservations
(assumed, observed, released), refusals that name the free slices, and the instance metric."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo, MigPlacement, MigProfile

from ..service_helpers import (
    Harness,
    annotations_of,
    container,
    eventually,
    gpu_limits,
    harness,
    pod_object,
    refused,
)


def spots(size: int, *starts: int) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start, size) for start in starts)


A100 = (
    MigProfile("1g.5gb", 4864, 15, 1, spots(1, 0, 1, 2, 3, 4, 5, 6)),
    MigProfile("2g.10gb", 9856, 29, 2, spots(2, 0, 2, 4)),
    MigProfile("3g.20gb", 19968, 43, 3, spots(4, 0, 4)),
    MigProfile("7g.40gb", 40192, 100, 7, spots(8, 0)),
)


def mig_gpu(node: str, index: int = 0) -> DeviceInfo:
    return DeviceInfo(
        id=f"GPU-{node}-{index}",
        index=index,
        count=7,
        devmem=40960,
        devcore=100,
        type="NVIDIA-A100-SXM4-40GB",
        numa=0,
        mode="mig",
        health=True,
        mig_profiles=A100,
    )


async def placed(h: Harness, name: str, mem: int, nums: int = 1) -> list[dict[str, Any]]:
    """Create, filter and bind a pod asking ``nums`` instances of ``mem`` MiB; its reservations."""
    pod = await h.add_pod(pod_object(name, container(limits=gpu_limits(nums, mem=mem))))
    reply = await h.filter(pod, ["m"])
    assert reply["NodeNames"] == ["m"], reply
    assert await h.bind(pod, "m") == ""
    await h.allocated(name, "m")  # the device plugin's part: bind-phase success, lock released
    notes = annotations_of(h.pod(name))
    reservations: list[dict[str, Any]] = json.loads(notes[keys.NVIDIA_MIG_ALLOCATIONS])
    return reservations


async def test_a_mig_pod_is_placed_with_a_reservation_and_the_next_pod_sees_its_slices() -> None:
    async with harness() as h:
        await h.add_node("m", [mig_gpu("m")])
        await h.synced_node("m")
        first = await placed(h, "a", 9000)
        assert first == [
            {
                "containerIndex": 0,
                "deviceIndex": 0,
                "gpuUUID": "GPU-m-0",
                "profile": "2g.10gb",
                "placement": {"start": 0, "size": 2},
            }
        ]
        notes = annotations_of(h.pod("a"))
        # The device list names the GPU once per instance, charged as the profile.
        assert notes[keys.NVIDIA_DEVICES_TO_ALLOCATE] == "GPU-m-0,NVIDIA,9856,29:;"
        # Filtered at once after the first bind: the assumption already holds [0,2).
        second = await placed(h, "b", 9000, nums=2)
        assert [(r["placement"]["start"], r["deviceIndex"]) for r in second] == [(2, 0), (4, 1)]
        await eventually(lambda: len(h.scheduler.cache.nodes["m"].mig["GPU-m-0"].held) == 3)
        # Slices [6,8) are all that is left: a 2g instance has no placement there, and the
        # reason says which slices are free and where the profile could start.
        late = await h.add_pod(pod_object("late", container(limits=gpu_limits(1, mem=9000))))
        reply = await h.filter(late, ["m"])
        assert not reply["NodeNames"]
        assert refused(reply)["m"] == (
            "1/1 CardMigTopologyInfeasible — GPU-m-0 2g.10gb fits 9000 MiB but free slices "
            "[6,8) offer no placement of it (placements start at 0,2,4)"
        )
        # Deleting the first pod frees its slices for the next one.
        await h.api.delete("pods", "a", namespace="default")
        await eventually(lambda: len(h.scheduler.cache.nodes["m"].mig["GPU-m-0"].held) == 2)
        assert (await h.filter(late, ["m"]))["NodeNames"] == ["m"]
        assert await h.bind(late, "m") == ""
        await h.allocated("late", "m")
        again = json.loads(annotations_of(h.pod("late"))[keys.NVIDIA_MIG_ALLOCATIONS])
        assert again[0]["placement"] == {"start": 0, "size": 2}
        small = await placed(h, "c", 4000)
        assert small[0]["profile"] == "1g.5gb"
        assert small[0]["placement"] == {"start": 6, "size": 1}


async def test_runtime_ids_from_the_plugin_keep_the_allocation_and_show_in_the_metric() -> None:
    async with harness() as h:
        await h.add_node("m", [mig_gpu("m")])
        await h.synced_node("m")
        [reservation] = await placed(h, "a", 4000)
        realised = {
            **reservation,
            "migUUID": "MIG-1111",
            "gpuInstanceID": 13,
            "computeInstanceID": 0,
        }
        await h.api.patch(
            "pods",
            "a",
            {"metadata": {"annotations": {keys.NVIDIA_MIG_ALLOCATIONS: json.dumps([realised])}}},
            namespace="default",
            patch_type="merge",
        )

        def realised_in_cache() -> bool:
            holding = next(
                (held for _uid, name, held in h.scheduler.cache.holdings() if name == "a"), None
            )
            return holding is not None and holding.reservations[0].runtime is not None

        await eventually(realised_in_cache, what="runtime ids seen")
        # Still one hold of those slices: the same allocation, not a second one.
        assert len(h.scheduler.cache.nodes["m"].mig["GPU-m-0"].held) == 1
        assert h.scheduler.cache.nodes["m"].device("GPU-m-0") is not None
        url = f"http://127.0.0.1:{h.scheduler.metrics_port}/metrics"
        async with h.http.get(url) as response:
            text = await response.text()
    samples = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "hami_node_gpu_mig_instance_info"
    ]
    assert [(s.labels, s.value) for s in samples] == [
        (
            {
                "node": "m",
                "device_uuid": "GPU-m-0",
                "device_index": "0",
                "mig_uuid": "MIG-1111",
                "profile": "1g.5gb",
                "gpu_instance_id": "13",
                "compute_instance_id": "0",
                "placement_start": "6",
                "placement_size": "1",
                "zone": "vGPU",
            },
            1.0,
        )
    ]


async def test_an_unreadable_reservation_keeps_its_gpu_from_new_instances() -> None:
    async with harness() as h:
        await h.add_node("m", [mig_gpu("m")])
        await h.synced_node("m")
        await placed(h, "a", 4000)
        await h.api.patch(
            "pods",
            "a",
            {"metadata": {"annotations": {keys.NVIDIA_MIG_ALLOCATIONS: "[{broken"}}},
            namespace="default",
            patch_type="merge",
        )
        await eventually(lambda: not h.scheduler.cache.nodes["m"].mig, what="holds dropped")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        reply = await h.filter(pod, ["m"])
        # The slot the pod uses is no longer explained by a reservation: slices unknown.
        assert refused(reply) == {"m": "1/1 CardNotHealth"}


async def test_vgpu_mode_routes_pods_between_mig_and_shared_gpus() -> None:
    from ..service_helpers import gpus

    async with harness() as h:
        await h.add_node("m", [mig_gpu("m")])
        await h.add_node("s", gpus("s", 1, mem=40000))
        await h.synced_node("m")
        await h.synced_node("s")
        for mode, node in (("mig", "m"), ("hami-core", "s")):
            pod = await h.add_pod(
                pod_object(
                    f"p-{mode}",
                    container(limits=gpu_limits(1, mem=4000)),
                    annotations={"nvidia.com/vgpu-mode": mode},
                )
            )
            reply = await h.filter(pod, ["m", "s"])
            assert reply["NodeNames"] == [node], reply


async def test_a_register_entry_with_malformed_mig_profiles_fails_only_that_node() -> None:
    async with harness() as h:
        await h.add_node("m", [mig_gpu("m")])
        entry = json.loads(annotations_of(h.node("m"))[keys.NVIDIA_REGISTER])[0]
        entry["migProfiles"] = [{"name": "1g.5gb", "memoryMB": "lots"}]
        await h.add_node("bad", annotations={keys.NVIDIA_REGISTER: json.dumps([entry])})
        await h.synced_node("m")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        reply = await h.filter(pod, ["bad", "m"])
        assert reply["NodeNames"] == ["m"]
        assert "hami.io/node-nvidia-register" in refused(reply)["bad"]
        assert "migProfiles[0]" in refused(reply)["bad"]
