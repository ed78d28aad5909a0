"""Non-NVIDIA vendors through the extender's HTTP interface against the emulated API server:
capacity-synthesised inventory, mixed nodes, pods asking two vendors, the annotations each
vendor's plugin reads, and a vendor's bad input confined to that vendor."""

from __future__ import annotations

from hami_kubesim.testing import eventually
from hami_protocol import keys

from ..service_helpers import (
    MLU_CAPACITY,
    MTHREADS_CAPACITY,
    annotations_of,
    container,
    gpu_limits,
    gpus,
    harness,
    pod_object,
    refused,
)

MLU_ALLOCATED = keys.devices_allocated_key("cambricon-mlu")
MTHREADS_ALLOCATED = keys.devices_allocated_key("mthreads-vgpu")


async def test_a_cambricon_pod_lands_on_capacity_devices_with_its_profile() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2), allocatable={"nvidia.com/gpu": "20", **MLU_CAPACITY})
        await h.synced_node("n")
        limits = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"}
        pod = await h.add_pod(pod_object("mlu", container(limits=limits)))
        assert (await h.schedule(pod, ["n"]))["NodeNames"] == ["n"]
        notes = annotations_of(h.pod("mlu"))
        assert notes[MLU_ALLOCATED].startswith("n-cambricon-mlu-")
        assert notes[MLU_ALLOCATED] == notes[keys.devices_to_allocate_key("cambricon-mlu")]
        index = notes[MLU_ALLOCATED].split(",")[0].rsplit("-", 1)[1]
        assert notes["CAMBRICON_DSMLU_PROFILE"] == f"{index}_100_4"
        assert notes["CAMBRICON_DSMLU_ASSIGNED"] == "false"
        assert keys.NVIDIA_DEVICES_ALLOCATED not in notes


async def test_a_pod_asking_nvidia_and_moore_threads_gets_both_on_a_mixed_node() -> None:
    async with harness() as h:
        capacity = {"nvidia.com/gpu": "20", **MTHREADS_CAPACITY}
        await h.add_node("n", gpus("n", 2), allocatable=capacity)
        await h.synced_node("n")
        limits = {
            **gpu_limits(1, mem=1000),
            "mthreads.com/vgpu": "1",
            "mthreads.com/sgpu-memory": "4",
        }
        pod = await h.add_pod(pod_object("both", container(limits=limits)))
        assert (await h.schedule(pod, ["n"]))["NodeNames"] == ["n"]
        notes = annotations_of(h.pod("both"))
        assert notes[keys.NVIDIA_DEVICES_ALLOCATED].startswith("GPU-n-")
        assert notes[MTHREADS_ALLOCATED].startswith("n-mthreads-")
        assert notes["mthreads.com/predicate-node"] == "n"
        assert notes["mthreads.com/gpu-index"] in {"0", "1"}


async def test_capacity_without_memory_fails_that_vendor_by_key_and_other_pods_still_fit() -> None:
    async with harness() as h:
        capacity = {
            "nvidia.com/gpu": "20",
            "cambricon.com/vmlu": "2",
            "cambricon.com/mlu.smlu.vcore": "200",
        }
        await h.add_node("n", gpus("n", 2), allocatable=capacity)
        await h.synced_node("n")
        mlu = await h.add_pod(pod_object("mlu", container(limits={"cambricon.com/vmlu": "1"})))
        reply = await h.filter(mlu, ["n"])
        assert not reply["NodeNames"]
        assert "cambricon.com/mlu.smlu.vmemory" in refused(reply)["n"]
        await eventually(lambda: bool(h.events("InvalidDeviceAnnotation")), what="event")
        (event,) = h.events("InvalidDeviceAnnotation")
        assert event["type"] == "Warning"
        assert "cambricon.com/mlu.smlu.vmemory" in event["message"]
        gpu = await h.add_pod(pod_object("gpu", container(limits=gpu_limits(1, mem=1000))))
        assert (await h.filter(gpu, ["n"]))["NodeNames"] == ["n"]
