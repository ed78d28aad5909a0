"""What every service's Prometheus metrics share: their own registry, ``hami_build_info`` and,
for a service that serves HTTPS, ``<prefix>_tls_certificate_reloads``.

A service's metrics class subclasses :class:`ServiceMetrics` and registers its own families on
``self.registry`` (served on ``--metrics-bind-address``); a registry of its own keeps a test's
or the demo's several services in one process apart.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge

from hami_runtime.build_info import register_build_info

__all__ = ["ServiceMetrics"]


class ServiceMetrics:
    """A registry with ``hami_build_info`` (of ``distribution``) and the certificate-reload
    gauge ``<prefix>_tls_certificate_reloads``."""

    def __init__(
        self, prefix: str, *, distribution: str, registry: CollectorRegistry | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        register_build_info(self.registry, distribution=distribution)
        self.tls_reloads = Gauge(
            f"{prefix}_tls_certificate_reloads",
            "Serving certificate reloads since the process started.",
            registry=self.registry,
        )

    def track_tls_reloads(self, reloads: Callable[[], int]) -> None:
        """Read the reload count at scrape time."""
        self.tls_reloads.set_function(reloads)
