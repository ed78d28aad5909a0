"""HAMi's per-container series, built from the regions as read at one scrape.

Per container and device (labels ``namespace``, ``pod``, ``container``, ``vdevice_index``,
``device_uuid`` — the UUID's first 40 characters, as HAMi — and ``zone="vGPU"``):

* ``hami_vgpu_memory_used_bytes`` and ``hami_container_device_memory_bytes``: Σ ``used.total`` of
  the region's active processes;
* ``hami_vgpu_memory_limit_bytes``: the device's limit;
* ``hami_container_device_utilization_ratio``: Σ SM utilisation of the device, clamped to 0-100
  (HAMi exports the raw sum, which goes above 100);
* ``hami_vgpu_memory_context_bytes`` / ``_module_bytes`` / ``_buffer_bytes``: Σ of each part;
* ``hami_container_last_kernel_elapsed_seconds``: seconds since the container's last kernel
  launch (v1 regions that recorded one).

Every device of a container gets its own series, each with its own device's figures.  With
``legacy`` also HAMi's earlier names, labels ``podnamespace``, ``podname``, ``ctrname``,
``vdeviceid``, ``deviceuuid``: ``vGPU_device_memory_usage_in_bytes``,
``vGPU_device_memory_limit_in_bytes``, ``Device_utilization_desc_of_container``,
``Device_last_kernel_of_container`` and ``Device_memory_desc_of_container`` (the total, with the
context, module, data and offset figures as labels; HAMi-core never sets ``offset``, so it is 0).
MIG is not implemented, so neither ``hami_mig_device_info`` nor the legacy ``MigInfo`` is
exported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from prometheus_client.core import GaugeMetricFamily

from hami_deviceplugin.host_metrics import ZONE
from hami_deviceplugin.monitor.regions import ContainerUsage
from hami_protocol.region.layout import RegionVersion

__all__ = ["UUID_CHARS", "clamp_percent", "container_families"]

UUID_CHARS: Final = 40
_LABELS: Final = ("namespace", "pod", "container", "vdevice_index", "device_uuid", "zone")
_LEGACY_LABELS: Final = ("podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid", "zone")
_LEGACY_MEMORY_LABELS: Final = (*_LEGACY_LABELS, "context", "module", "data", "offset")


def clamp_percent(value: float) -> float:
    return min(max(value, 0.0), 100.0)


def _family(name: str, documentation: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def container_families(
    rows: Iterable[ContainerUsage], *, now: float, legacy: bool
) -> list[GaugeMetricFamily]:
    """The families of ``rows``; ``now`` (unix seconds) dates the last-kernel ages."""
    used = _family("hami_vgpu_memory_used_bytes", "Device memory used by the container.", _LABELS)
    memory = _family(
        "hami_container_device_memory_bytes", "Device memory used by the container.", _LABELS
    )
    limit = _family(
        "hami_vgpu_memory_limit_bytes", "Device memory limit of the container.", _LABELS
    )
    util = _family(
        "hami_container_device_utilization_ratio",
        "SM utilisation of the device by the container, percent (0-100).",
        _LABELS,
    )
    context = _family(
        "hami_vgpu_memory_context_bytes", "Device memory of the container's contexts.", _LABELS
    )
    module = _family(
        "hami_vgpu_memory_module_bytes", "Device memory of the container's modules.", _LABELS
    )
    buffer = _family(
        "hami_vgpu_memory_buffer_bytes", "Device memory of the container's buffers.", _LABELS
    )
    kernel = _family(
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since the container last launched a kernel.",
        _LABELS,
    )
    old = _Legacy() if legacy else None
    for row in rows:
        usage = row.usage
        elapsed: float | None = None
        if usage.version is RegionVersion.V1 and usage.last_kernel_time > 0:
            elapsed = max(now - usage.last_kernel_time, 0.0)
        for device in usage.devices:
            labels = [
                row.namespace,
                row.pod,
                row.container,
                str(device.index),
                device.uuid[:UUID_CHARS],
                ZONE,
            ]
            sm = clamp_percent(device.sm_util)
            used.add_metric(labels, device.used_bytes)
            memory.add_metric(labels, device.used_bytes)
            limit.add_metric(labels, device.limit_bytes)
            util.add_metric(labels, sm)
            context.add_metric(labels, device.context_bytes)
            module.add_metric(labels, device.module_bytes)
            buffer.add_metric(labels, device.buffer_bytes)
            if elapsed is not None:
                kernel.add_metric(labels, elapsed)
            if old is not None:
                old.add(labels, device.used_bytes, device.limit_bytes, sm, elapsed)
                old.memory.add_metric(
                    [
                        *labels,
                        str(device.context_bytes),
                        str(device.module_bytes),
                        str(device.buffer_bytes),
                        "0",
                    ],
                    device.used_bytes,
                )
    families = [used, memory, limit, util, context, module, buffer, kernel]
    return families if old is None else [*families, *old.families]


class _Legacy:
    """HAMi's earlier names for the same figures."""

    def __init__(self) -> None:
        self.used = _family(
            "vGPU_device_memory_usage_in_bytes", "vGPU device usage", _LEGACY_LABELS
        )
        self.limit = _family(
            "vGPU_device_memory_limit_in_bytes", "vGPU device limit", _LEGACY_LABELS
        )
        self.util = _family(
            "Device_utilization_desc_of_container",
            "Container device utilization description",
            _LEGACY_LABELS,
        )
        self.kernel = _family(
            "Device_last_kernel_of_container",
            "Container device last kernel description",
            _LEGACY_LABELS,
        )
        self.memory = _family(
            "Device_memory_desc_of_container",
            "Container device memory description",
            _LEGACY_MEMORY_LABELS,
        )

    def add(
        self, labels: list[str], used: int, limit: int, util: float, elapsed: float | None
    ) -> None:
        self.used.add_metric(labels, used)
        self.limit.add_metric(labels, limit)
        self.util.add_metric(labels, util)
        if elapsed is not None:
            self.kernel.add_metric(labels, elapsed)

    @property
    def families(self) -> list[GaugeMetricFamily]:
        return [self.used, self.limit, self.util, self.kernel, self.memory]
