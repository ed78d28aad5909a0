"""HAMi's scheduler metrics (names, labels, ``zone="vGPU"``) and ours, read from a scrape."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ..service_helpers import container, eventually, gpu_limits, gpus, harness, pod_object


async def test_device_quota_pod_and_request_metrics() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 1, mem=8000))
        await h.synced_node("n")
        await h.api.create(
            "resourcequotas",
            {
                "metadata": {"name": "q", "namespace": "default"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "6000"}},
            },
        )
        await eventually(lambda: len(h.scheduler.cache.quotas) == 1, what="quota")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=2000, cores=30))))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        await h.post("filter", None, raw=b"nope")
        url = f"http://127.0.0.1:{h.scheduler.metrics_port}/metrics"
        async with h.http.get(url) as response:
            text = await response.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        assert key in samples, (name, labels, [k for k in samples if k[0] == name])
        return samples[key]

    device = {
        "node": "n",
        "device_uuid": "GPU-n-0",
        "device_index": "0",
        "device_type": "NVIDIA-Tesla T4",
        "zone": "vGPU",
    }
    mib = 1024 * 1024
    assert value("hami_gpu_memory_limit_bytes", **device) == 8000 * mib
    assert value("hami_gpu_core_limit_ratio", **device) == 100
    assert value("hami_gpu_memory_allocated_bytes", **device, device_cores="30") == 2000 * mib
    assert value("hami_gpu_shared_count", **device) == 1
    assert value("hami_gpu_core_allocated_ratio", **device) == 30
    assert value("hami_node_gpu_memory_allocated_ratio", **device) == 0.25
    assert (
        value(
            "hami_node_gpu_overview",
            **device,
            device_cores="30",
            device_memory_limit=str(8000 * mib),
        )
        == 2000 * mib
    )
    quota = {"namespace": "default", "quota_name": "nvidia.com/gpumem", "zone": "vGPU"}
    assert value("hami_resource_quota_used", **quota, limit="6000") == 2000
    assert value("hami_resource_quota_limit", **quota) == 6000
    per_pod = {
        "namespace": "default",
        "node": "n",
        "pod": "p",
        "container_index": "0",
        "device_uuid": "GPU-n-0",
        "zone": "vGPU",
    }
    assert value("hami_vgpu_memory_allocated_bytes", **per_pod) == 2000 * mib
    assert value("hami_vgpu_core_allocated_ratio", **per_pod) == 30
    assert (
        value("hami_scheduler_decisions_total", verb="filter", outcome="scheduled", reason="") == 1
    )
    assert (
        value(
            "hami_scheduler_decisions_total", verb="filter", outcome="error", reason="bad_request"
        )
        == 1
    )
    assert (
        value("hami_scheduler_request_duration_seconds_count", verb="filter", outcome="scheduled")
        == 1
    )
    assert value("hami_scheduler_cache_objects", kind="registered_nodes") == 1
    assert value("hami_scheduler_cache_synced") == 1
    assert value("hami_scheduler_leader") == 1
