"""What the device plugin's metrics and the vGPU monitor's share: HAMi's constant label
``zone="vGPU"`` on every sample and the label set of a host GPU's series.

* :func:`zoned_registries`: the registry a process serves and the one its families are registered
  on; every sample of the second is served with ``zone="vGPU"`` added;
* :data:`HOST_LABELS` and :func:`gpu_labels`: ``{node,device_index,device_uuid,device_type}`` of
  one GPU, as HAMi labels its host series.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.node.register import device_type

__all__ = ["HOST_LABELS", "ZONE", "gpu_labels", "zoned_registries"]

ZONE: Final = "vGPU"
HOST_LABELS: Final = ("node", "device_index", "device_uuid", "device_type")


class _ConstLabels(Collector):
    """Re-emits another registry's samples with extra constant labels."""

    def __init__(self, inner: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self._inner = inner
        self._labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self._inner.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [
                sample._replace(labels={**sample.labels, **self._labels})
                for sample in family.samples
            ]
            yield out


def zoned_registries() -> tuple[CollectorRegistry, CollectorRegistry]:
    """``(served, inner)``: register families on ``inner``, serve ``served``, whose samples are
    ``inner``'s with ``zone="vGPU"``."""
    inner = CollectorRegistry(auto_describe=True)
    served = CollectorRegistry(auto_describe=False)
    served.register(_ConstLabels(inner, {"zone": ZONE}))
    return served, inner


def gpu_labels(node: str, gpu: Gpu) -> dict[str, str]:
    """:data:`HOST_LABELS` of ``gpu`` on ``node``."""
    return {
        "node": node,
        "device_index": str(gpu.index),
        "device_uuid": gpu.uuid,
        "device_type": device_type(gpu.model),
    }
