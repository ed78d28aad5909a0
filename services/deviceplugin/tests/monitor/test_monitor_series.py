"""The per-container exposition text, written by hand for speed, read back by Prometheus's own
parser: every name, label and value survives, whatever the pod and container names hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hami_deviceplugin.monitor.regions import ContainerUsage
from hami_deviceplugin.monitor.series import render_containers
from hami_protocol.region.layout import RegionVersion
from hami_protocol.region.usage import DeviceUsage, RegionUsage

_NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12
)
_BYTES = st.integers(min_value=0, max_value=2**63 - 1)


@st.composite
def _rows(draw: st.DrawFn) -> ContainerUsage:
    count = draw(st.integers(min_value=1, max_value=3))
    devices = tuple(
        DeviceUsage(
            index=i,
            uuid=draw(_NAMES) + "-" * 40,
            limit_bytes=draw(_BYTES),
            sm_limit=draw(st.integers(0, 100)),
            used_bytes=draw(_BYTES),
            context_bytes=draw(_BYTES),
            module_bytes=draw(_BYTES),
            buffer_bytes=draw(_BYTES),
            sm_util=draw(st.integers(0, 10_000)),
        )
        for i in range(count)
    )
    usage = RegionUsage(
        version=draw(st.sampled_from(RegionVersion)),
        devices=devices,
        procnum=1,
        active_procs=1,
        priority=1,
        recent_kernel=0,
        utilization_switch=0,
        last_kernel_time=draw(st.integers(0, 1000)),
    )
    return ContainerUsage(draw(_NAMES), draw(_NAMES), draw(_NAMES), usage)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@given(row=_rows(), legacy=st.booleans())
def test_every_sample_reads_back_as_written(row: ContainerUsage, legacy: bool) -> None:
    now = 2000.0
    samples = _samples(render_containers([row], now=now, legacy=legacy))
    for device in row.usage.devices:
        labels = {
            "namespace": row.namespace,
            "pod": row.pod,
            "container": row.container,
            "vdevice_index": str(device.index),
            "device_uuid": device.uuid[:40],
            "zone": "vGPU",
        }
        key = tuple(sorted(labels.items()))
        assert samples["hami_vgpu_memory_used_bytes", key] == device.used_bytes
        assert samples["hami_vgpu_memory_limit_bytes", key] == device.limit_bytes
        assert samples["hami_vgpu_memory_buffer_bytes", key] == device.buffer_bytes
        assert samples["hami_container_device_utilization_ratio", key] == min(device.sm_util, 100)
        kernel = samples.get(("hami_container_last_kernel_elapsed_seconds", key))
        if row.usage.version is RegionVersion.V1 and row.usage.last_kernel_time > 0:
            assert kernel == now - row.usage.last_kernel_time
        else:
            assert kernel is None
        old = {
            "podnamespace": row.namespace,
            "podname": row.pod,
            "ctrname": row.container,
            "vdeviceid": str(device.index),
            "deviceuuid": device.uuid[:40],
            "zone": "vGPU",
        }
        old_key = tuple(sorted(old.items()))
        assert (("vGPU_device_memory_limit_in_bytes", old_key) in samples) is legacy


def test_every_family_is_declared_without_samples() -> None:
    text = render_containers([], now=0.0, legacy=True)
    names = {family.name for family in text_string_to_metric_families(text)}
    assert "hami_vgpu_memory_used_bytes" in names
    assert "hami_container_last_kernel_elapsed_seconds" in names
    assert "vGPU_device_memory_usage_in_bytes" in names
    assert "Device_memory_desc_of_container" in names
