"""The device plugin's Prometheus metrics (served on ``--metrics-bind-address`` with ``/healthz``
and ``/readyz``).  Every sample carries the constant label ``zone="vGPU"``, as HAMi's do.

Ours:

* ``hami_deviceplugin_kubelet_registrations_total{outcome}``: ``Register`` calls to the kubelet,
  ``outcome`` success / error;
* ``hami_deviceplugin_node_register_syncs_total{outcome}``: registration-loop passes, ``outcome``
  unchanged / patched / error; ``hami_deviceplugin_node_register_duration_seconds`` their time;
* ``hami_deviceplugin_allocate_requests_total{outcome}`` and
  ``hami_deviceplugin_allocate_duration_seconds{outcome}``: ``Allocate`` calls, success / failed,
  the time including the API round trips; ``hami_deviceplugin_allocate_failures_total{reason}``:
  failures by kind (no_pod, invalid, api, host, timeout, internal);
* ``hami_deviceplugin_devices{health}``: GPUs by health (healthy / unhealthy);
* ``hami_deviceplugin_device_health{node,device_uuid,device_index,device_type}``: 1 healthy, 0 not.

The RDMA plugin's (series appear once the RDMA plugin runs):

* ``hami_deviceplugin_rdma_kubelet_registrations_total{outcome}``;
* ``hami_deviceplugin_rdma_allocate_requests_total{outcome}``,
  ``hami_deviceplugin_rdma_allocate_duration_seconds{outcome}`` and
  ``hami_deviceplugin_rdma_allocate_failures_total{reason}``, as for GPUs;
* ``hami_deviceplugin_rdma_nics{health}``: RDMA NICs by health;
* ``hami_deviceplugin_rdma_nic_health{node,nic_id,nic_name}``: 1 healthy, 0 not;
* ``hami_deviceplugin_rdma_nic_vfs{node,nic_id,nic_name}``: SR-IOV VFs of the NIC.

HAMi's host GPU gauges (``hami_host_gpu_*``) and per-container series (``hami_vgpu_memory_*``,
``hami_container_*``) are the vGPU monitor's alone (:mod:`hami_deviceplugin.monitor`), as in
HAMi: both run on every node and both are scraped, so the same series here would be duplicates.
``hami_build_info`` has HAMi's label set with ``python_version`` in place of ``go_version``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.metric_labels import HOST_LABELS, ZONE, gpu_labels, zoned_registries
from hami_deviceplugin.rdma.nics import Nic
from hami_runtime.build_info import package_version, register_build_info

__all__ = ["ZONE", "PluginMetrics", "plugin_version"]

_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def plugin_version() -> str:
    return package_version("hami-deviceplugin")


class PluginMetrics:
    """Every metric of one device plugin process; serve :attr:`registry`."""

    def __init__(self, *, node: str) -> None:
        self._node = node
        self.registry, inner = zoned_registries()
        self.kubelet_registrations = Counter(
            "hami_deviceplugin_kubelet_registrations",
            "Register calls to the kubelet, by outcome.",
            ["outcome"],
            registry=inner,
        )
        self.register_syncs = Counter(
            "hami_deviceplugin_node_register_syncs",
            "Node registration passes, by outcome (unchanged, patched, error).",
            ["outcome"],
            registry=inner,
        )
        self.register_duration = Histogram(
            "hami_deviceplugin_node_register_duration_seconds",
            "Time of one node registration pass (read, decide, patch).",
            buckets=_BUCKETS,
            registry=inner,
        )
        self.allocate_requests = Counter(
            "hami_deviceplugin_allocate_requests",
            "Allocate calls from the kubelet, by outcome.",
            ["outcome"],
            registry=inner,
        )
        self.allocate_duration = Histogram(
            "hami_deviceplugin_allocate_duration_seconds",
            "Time to answer Allocate, API round trips included, by outcome.",
            ["outcome"],
            buckets=_BUCKETS,
            registry=inner,
        )
        self.allocate_failures = Counter(
            "hami_deviceplugin_allocate_failures",
            "Failed Allocate calls, by reason.",
            ["reason"],
            registry=inner,
        )
        self.devices = Gauge(
            "hami_deviceplugin_devices", "GPUs on this node, by health.", ["health"], registry=inner
        )
        self.device_health = Gauge(
            "hami_deviceplugin_device_health",
            "1 when the GPU is healthy, 0 when not.",
            list(HOST_LABELS),
            registry=inner,
        )
        self._rdma_metrics(inner)
        register_build_info(inner, distribution="hami-deviceplugin")
        for outcome in ("success", "error"):
            self.kubelet_registrations.labels(outcome=outcome)
        for outcome in ("unchanged", "patched", "error"):
            self.register_syncs.labels(outcome=outcome)
        for outcome in ("success", "failed"):
            self.allocate_requests.labels(outcome=outcome)
            self.allocate_duration.labels(outcome=outcome)

    def _rdma_metrics(self, inner: CollectorRegistry) -> None:
        self.rdma_kubelet_registrations = Counter(
            "hami_deviceplugin_rdma_kubelet_registrations",
            "Register calls of the RDMA plugin to the kubelet, by outcome.",
            ["outcome"],
            registry=inner,
        )
        self.rdma_allocate_requests = Counter(
            "hami_deviceplugin_rdma_allocate_requests",
            "RDMA Allocate calls from the kubelet, by outcome.",
            ["outcome"],
            registry=inner,
        )
        self.rdma_allocate_duration = Histogram(
            "hami_deviceplugin_rdma_allocate_duration_seconds",
            "Time to answer an RDMA Allocate, API round trips included, by outcome.",
            ["outcome"],
            buckets=_BUCKETS,
            registry=inner,
        )
        self.rdma_allocate_failures = Counter(
            "hami_deviceplugin_rdma_allocate_failures",
            "Failed RDMA Allocate calls, by reason.",
            ["reason"],
            registry=inner,
        )
        self.rdma_nics = Gauge(
            "hami_deviceplugin_rdma_nics",
            "RDMA NICs on this node, by health.",
            ["health"],
            registry=inner,
        )
        self.rdma_nic_health = Gauge(
            "hami_deviceplugin_rdma_nic_health",
            "1 when every port of the RDMA NIC is active, 0 when not.",
            ["node", "nic_id", "nic_name"],
            registry=inner,
        )
        self.rdma_nic_vfs = Gauge(
            "hami_deviceplugin_rdma_nic_vfs",
            "SR-IOV virtual functions of the RDMA NIC.",
            ["node", "nic_id", "nic_name"],
            registry=inner,
        )

    def enable_rdma(self) -> None:
        """Create the RDMA plugin's fixed series (zero) once it runs."""
        for outcome in ("success", "error"):
            self.rdma_kubelet_registrations.labels(outcome=outcome)
        for outcome in ("success", "failed"):
            self.rdma_allocate_requests.labels(outcome=outcome)
            self.rdma_allocate_duration.labels(outcome=outcome)

    def set_nics(self, nics: Iterable[Nic]) -> None:
        listed = list(nics)
        healthy = sum(1 for nic in listed if nic.healthy)
        self.rdma_nics.labels(health="healthy").set(healthy)
        self.rdma_nics.labels(health="unhealthy").set(len(listed) - healthy)
        self.rdma_nic_health.clear()
        self.rdma_nic_vfs.clear()
        for nic in listed:
            labels = {"node": self._node, "nic_id": nic.id, "nic_name": nic.name}
            self.rdma_nic_health.labels(**labels).set(1 if nic.healthy else 0)
            self.rdma_nic_vfs.labels(**labels).set(len(nic.info.vfs))

    def observe_rdma_allocate(self, *, ok: bool, seconds: float, reason: str = "") -> None:
        outcome = "success" if ok else "failed"
        self.rdma_allocate_requests.labels(outcome=outcome).inc()
        self.rdma_allocate_duration.labels(outcome=outcome).observe(seconds)
        if not ok:
            self.rdma_allocate_failures.labels(reason=reason or "internal").inc()

    def set_gpus(self, gpus: Iterable[Gpu]) -> None:
        listed = list(gpus)
        healthy = sum(1 for gpu in listed if gpu.healthy)
        self.devices.labels(health="healthy").set(healthy)
        self.devices.labels(health="unhealthy").set(len(listed) - healthy)
        self.device_health.clear()
        for gpu in listed:
            self.device_health.labels(**gpu_labels(self._node, gpu)).set(1 if gpu.healthy else 0)

    def observe_allocate(self, *, ok: bool, seconds: float, reason: str = "") -> None:
        outcome = "success" if ok else "failed"
        self.allocate_requests.labels(outcome=outcome).inc()
        self.allocate_duration.labels(outcome=outcome).observe(seconds)
        if not ok:
            self.allocate_failures.labels(reason=reason or "internal").inc()
