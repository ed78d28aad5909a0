"""HAMi's host GPU gauges, exported by the vGPU monitor alone (as in HAMi, where the device plugin
beside it exports none):

* ``hami_host_gpu_memory_used_bytes`` and ``hami_host_gpu_utilization_ratio``
  ``{node,device_index,device_uuid,device_type}`` and
  ``hami_host_gpu_memory_controller_utilization_ratio{device_index,device_uuid,device_type}``
  (NVML's memory used, GPU and memory-controller utilisation, 0-100), filled from a backend's
  :meth:`~hami_deviceplugin.gpu.backends.base.Backend.usage`; with ``legacy`` also HAMi's
  pre-2.7 names ``HostGPUMemoryUsage`` and ``HostCoreUtilization``
  ``{nodeid,deviceidx,deviceuuid,devicetype}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Gauge

from hami_deviceplugin.gpu.backends.base import Gpu, GpuUsage
from hami_deviceplugin.metric_labels import HOST_LABELS, gpu_labels

__all__ = ["HostGpuMetrics"]

_LEGACY_HOST_LABELS: Final = ("nodeid", "deviceidx", "deviceuuid", "devicetype")


class HostGpuMetrics:
    """HAMi's host GPU gauges (see the module docstring) on ``registry``."""

    def __init__(self, registry: CollectorRegistry, *, node: str, legacy: bool = False) -> None:
        self._node = node
        self.memory_used = Gauge(
            "hami_host_gpu_memory_used_bytes",
            "GPU memory in use on the host (NVML), bytes.",
            list(HOST_LABELS),
            registry=registry,
        )
        self.utilization = Gauge(
            "hami_host_gpu_utilization_ratio",
            "GPU utilisation on the host (NVML), percent.",
            list(HOST_LABELS),
            registry=registry,
        )
        self.memory_controller = Gauge(
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilisation on the host (NVML), percent.",
            ["device_index", "device_uuid", "device_type"],
            registry=registry,
        )
        self._legacy: tuple[Gauge, Gauge] | None = None
        if legacy:
            self._legacy = (
                Gauge(
                    "HostGPUMemoryUsage",
                    "GPU device memory usage (legacy name of hami_host_gpu_memory_used_bytes).",
                    list(_LEGACY_HOST_LABELS),
                    registry=registry,
                ),
                Gauge(
                    "HostCoreUtilization",
                    "GPU core utilization (legacy name of hami_host_gpu_utilization_ratio).",
                    list(_LEGACY_HOST_LABELS),
                    registry=registry,
                ),
            )

    def set_usage(self, gpus: Iterable[Gpu], usage: Mapping[str, GpuUsage]) -> None:
        """Replace the gauges with ``usage`` (GPUs without a value get no series)."""
        for gauge in (self.memory_used, self.utilization, self.memory_controller):
            gauge.clear()
        for gauge in self._legacy or ():
            gauge.clear()
        for gpu in gpus:
            figures = usage.get(gpu.uuid)
            if figures is None:
                continue
            labels = gpu_labels(self._node, gpu)
            legacy = dict(zip(_LEGACY_HOST_LABELS, labels.values(), strict=True))
            if figures.memory_used_bytes is not None:
                self.memory_used.labels(**labels).set(figures.memory_used_bytes)
                if self._legacy is not None:
                    self._legacy[0].labels(**legacy).set(figures.memory_used_bytes)
            if figures.utilization_percent is not None:
                self.utilization.labels(**labels).set(figures.utilization_percent)
                if self._legacy is not None:
                    self._legacy[1].labels(**legacy).set(figures.utilization_percent)
            if figures.memory_utilization_percent is not None:
                del labels["node"]
                self.memory_controller.labels(**labels).set(figures.memory_utilization_percent)
