"""Metrics for vendor pods through the scheduler's own endpoints against the emulated API server:
HAMi's device families carry every vendor's devices with their ``device_type``, the quota
families carry vendor resources (memory in MiB of the vendor's unit), and our decision and
rejection counters count vendor pods and vendor reason words."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from hami_kubesim.testing import eventually

from ..service_helpers import (
    MLU_CAPACITY,
    MTHREADS_CAPACITY,
    Harness,
    container,
    gpus,
    harness,
    pod_object,
    refused,
)

MLU_MEMORY = "cambricon.com/mlu.smlu.vmemory"
MIB = 1024 * 1024


def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


async def samples(h: Harness, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    url = f"http://127.0.0.1:{h.scheduler.metrics_port}/metrics"
    async with h.http.get(url) as response:
        text = await response.text()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


async def test_device_families_carry_each_vendors_devices_with_their_type() -> None:
    async with harness() as h:
        await h.add_node("n", allocatable={**MLU_CAPACITY, **MTHREADS_CAPACITY})
        await h.synced_node("n")
        overview = await samples(h, "hami_node_gpu_overview")
    types = {dict(labels)["device_uuid"]: dict(labels)["device_type"] for labels in overview}
    assert types == {
        "n-cambricon-mlu-0": "MLU",
        "n-cambricon-mlu-1": "MLU",
        "n-mthreads-0": "Mthreads",
        "n-mthreads-1": "Mthreads",
    }


async def test_quota_families_carry_a_vendor_resource_in_mib() -> None:
    async with harness() as h:
        await h.add_node("n", allocatable=MLU_CAPACITY)
        await h.synced_node("n")
        await h.api.create(
            "resourcequotas",
            {
                "metadata": {"name": "mlu", "namespace": "default"},
                "spec": {"hard": {f"limits.{MLU_MEMORY}": "16"}},
            },
        )
        limits = {"cambricon.com/vmlu": "1", MLU_MEMORY: "4"}
        pod = await h.add_pod(pod_object("mlu", container(limits=limits)))
        await eventually(lambda: len(h.scheduler.cache.quotas) == 1, what="quota seen")
        assert (await h.schedule(pod, ["n"]))["NodeNames"] == ["n"]
        base = {"namespace": "default", "quota_name": MLU_MEMORY, "zone": "vGPU"}
        await eventually(lambda: h.scheduler.cache.ledger.used("default", "MLU")[0] > 0, what="use")
        used = await samples(h, "hami_resource_quota_used")
        assert used == {key({**base, "limit": str(16 * 256)}): 1024}
        limit = await samples(h, "hami_resource_quota_limit")
        assert limit == {key(base): 16 * 256}
        over = await h.add_pod(pod_object("over", container(limits={**limits, MLU_MEMORY: "13"})))
        reply = await h.filter(over, ["n"])
        assert "ResourceQuotaNotFit" in refused(reply)["n"]


async def test_decisions_and_rejections_count_vendor_pods_and_words() -> None:
    async with harness() as h:
        await h.add_node("n", allocatable=MTHREADS_CAPACITY)
        await h.synced_node("n")
        fits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4"}
        pod = await h.add_pod(pod_object("mt", container(limits=fits)))
        assert (await h.schedule(pod, ["n"]))["NodeNames"] == ["n"]
        big = await h.add_pod(
            pod_object("big", container(limits={**fits, "mthreads.com/sgpu-memory": "4096"}))
        )
        assert not (await h.filter(big, ["n"]))["NodeNames"]
        decisions = await samples(h, "hami_scheduler_decisions_total")
        rejections = await samples(h, "hami_scheduler_node_rejections_total")
    outcomes = {
        dict(labels)["verb"] + "/" + dict(labels)["outcome"]: v for labels, v in decisions.items()
    }
    assert outcomes.get("bind/bound") == 1
    assert sum(v for k, v in outcomes.items() if k.startswith("filter/")) == 2
    assert rejections == {(("reason", "CardInsufficientMemory"),): 1}


async def test_a_vendors_bad_input_is_one_rejection_label_whatever_the_node() -> None:
    async with harness() as h:
        broken = {"cambricon.com/vmlu": "2", "cambricon.com/mlu.smlu.vcore": "200"}
        for name in ("a", "b"):
            await h.add_node(name, gpus(name, 1), allocatable={"nvidia.com/gpu": "10", **broken})
            await h.synced_node(name)
        limits = {"cambricon.com/vmlu": "1", MLU_MEMORY: "4"}
        pod = await h.add_pod(pod_object("mlu", container(limits=limits)))
        reply = await h.filter(pod, ["a", "b"])
        assert not reply["NodeNames"]
        rejections = await samples(h, "hami_scheduler_node_rejections_total")
    # The text names the key (and may quote a value); the label stays one word.
    assert all(MLU_MEMORY in text for text in refused(reply).values())
    assert rejections == {(("reason", "Other"),): 2}


async def test_a_placed_vendor_pod_leaves_its_devices_memory_limits_in_bytes() -> None:
    async with harness() as h:
        await h.add_node("n", allocatable=MLU_CAPACITY)
        await h.synced_node("n")
        limits = {"cambricon.com/vmlu": "1", MLU_MEMORY: "4"}
        pod = await h.add_pod(pod_object("mlu", container(limits=limits)))
        assert (await h.schedule(pod, ["n"]))["NodeNames"] == ["n"]
        found = await samples(h, "hami_gpu_memory_limit_bytes")
    limits_by_device = {
        dict(labels)["device_uuid"]: (dict(labels)["device_type"], value)
        for labels, value in found.items()
    }
    assert limits_by_device == {
        "n-cambricon-mlu-0": ("MLU", 64 * 256 * MIB),
        "n-cambricon-mlu-1": ("MLU", 64 * 256 * MIB),
    }
