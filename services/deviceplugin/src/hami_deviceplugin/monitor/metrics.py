"""The vGPU monitor's Prometheus metrics, served on ``--metrics-bind-address`` (default
``:9394``) with ``/healthz`` and ``/readyz``.  Every sample carries ``zone="vGPU"``, as HAMi's.

HAMi's: the host GPU gauges (:class:`~hami_deviceplugin.monitor.host.HostGpuMetrics`, filled from
the backend at each scrape), the per-container series (:mod:`.series`, read from the regions at
each scrape) and ``hami_build_info``.

Ours:

* ``hami_vgpu_monitor_region_errors_total{reason}``: bad input, counted once per occurrence;
  ``reason`` is a content fault of the region codec (``truncated``, ``oversized``, ``magic``,
  ``version``, ``devices``, ``procnum``) or ``unreadable``, ``vanished``, ``bad_directory``,
  ``too_many_files``, ``unknown_pod``, ``unknown_container``;
* ``hami_vgpu_monitor_regions{state}``: region files by ``valid`` / ``invalid`` at the last pass;
* ``hami_vgpu_monitor_feedback_writes_total{field}``: feedback stores, by ``recent_kernel`` /
  ``utilization_switch``;
* ``hami_vgpu_monitor_feedback_paused``: 1 while the MIG lock file stops the feedback;
* ``hami_vgpu_monitor_scan_duration_seconds``: time of one pass (discovery, reads, feedback).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

from hami_deviceplugin.metric_labels import zoned_registries
from hami_deviceplugin.monitor.host import HostGpuMetrics
from hami_deviceplugin.monitor.pods import PodRef
from hami_deviceplugin.monitor.problems import REASONS
from hami_deviceplugin.monitor.regions import ContainerUsage, PassReport
from hami_deviceplugin.monitor.series import render_containers, render_mig
from hami_protocol.region.feedback import FeedbackField
from hami_runtime.build_info import register_build_info

__all__ = ["MonitorMetrics"]

_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class MonitorMetrics:
    """Every metric of one monitor process; :meth:`render` is a scrape's text."""

    def __init__(self, *, node: str, legacy: bool = False) -> None:
        self.legacy = legacy
        self.registry, inner = zoned_registries()
        self.host = HostGpuMetrics(inner, node=node, legacy=legacy)
        self.region_errors = Counter(
            "hami_vgpu_monitor_region_errors",
            "Bad region files and directories, by reason, once per occurrence.",
            ["reason"],
            registry=inner,
        )
        self.regions = Gauge(
            "hami_vgpu_monitor_regions",
            "Region files at the last pass, by state (valid, invalid).",
            ["state"],
            registry=inner,
        )
        self.feedback_writes = Counter(
            "hami_vgpu_monitor_feedback_writes",
            "Priority feedback stores into regions, by field.",
            ["field"],
            registry=inner,
        )
        self.feedback_paused = Gauge(
            "hami_vgpu_monitor_feedback_paused",
            "1 while the MIG lock file pauses the priority feedback.",
            registry=inner,
        )
        self.scan_duration = Histogram(
            "hami_vgpu_monitor_scan_duration_seconds",
            "Time of one pass over the regions (discovery, reads, feedback).",
            buckets=_BUCKETS,
            registry=inner,
        )
        register_build_info(inner, distribution="hami-deviceplugin")
        for reason in REASONS:
            self.region_errors.labels(reason=reason)
        for state in ("valid", "invalid"):
            self.regions.labels(state=state)
        for field in FeedbackField:
            self.feedback_writes.labels(field=str(field))

    def count_error(self, reason: str) -> None:
        self.region_errors.labels(reason=reason).inc()

    def observe_pass(self, report: PassReport, seconds: float) -> None:
        self.regions.labels(state="valid").set(report.valid)
        self.regions.labels(state="invalid").set(report.invalid)
        for write in report.writes:
            self.feedback_writes.labels(field=str(write.field)).inc()
        self.feedback_paused.set(1 if report.paused else 0)
        self.scan_duration.observe(seconds)

    def render(
        self, rows: Iterable[ContainerUsage], *, now: float, pods: Iterable[PodRef] = ()
    ) -> bytes:
        """The exposition text: the registry's families, then the containers', then the pods'
        MIG instances (blocking when there are many regions: call it from a worker thread)."""
        containers = render_containers(rows, now=now, legacy=self.legacy)
        mig = render_mig(pods, legacy=self.legacy)
        return prometheus_client.generate_latest(self.registry) + (containers + mig).encode()
