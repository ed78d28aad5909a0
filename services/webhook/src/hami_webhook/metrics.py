"""The webhook's Prometheus metrics, on their own registry (served on ``--metrics-bind-address``).

* ``hami_webhook_admission_requests_total{outcome}`` (counter): reviews answered, ``outcome`` one
  of allowed, mutated, denied, error;
* ``hami_webhook_admission_duration_seconds{outcome}`` (histogram): time to answer a review;
* ``hami_webhook_quota_cache_objects{kind}`` (gauge): ``resourcequotas`` limiting device
  resources, ``pods`` holding device memory or cores;
* ``hami_webhook_quota_cache_synced`` (gauge): 1 once the quota watches have listed;
* ``hami_webhook_tls_certificate_reloads`` (gauge): certificate reloads since start;
* ``hami_build_info{version,revision,build_date,python_version,compiler,platform}`` = 1.

``hami_build_info`` has HAMi's name and the same label set, with ``python_version`` in place of
``go_version``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hami_runtime.service_metrics import ServiceMetrics
from hami_webhook.mutation.decision import Outcome

__all__ = ["OUTCOMES", "WebhookMetrics"]

OUTCOMES: Final[tuple[Outcome, ...]] = ("allowed", "mutated", "denied", "error")
# A review takes well under a millisecond to decide; the buckets reach up to the API server's
# default 10 s timeout so slow outliers are still visible.
_BUCKETS: Final = (
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    10.0,
)


class WebhookMetrics(ServiceMetrics):
    """Every metric the service exports, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__("hami_webhook", distribution="hami-webhook", registry=registry)
        self.requests = Counter(
            "hami_webhook_admission_requests",
            "Admission reviews answered, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "hami_webhook_admission_duration_seconds",
            "Time from receiving an admission review to having its reply, by outcome.",
            ["outcome"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.quota_objects = Gauge(
            "hami_webhook_quota_cache_objects",
            "Objects in the quota cache: ResourceQuotas limiting device resources, pods holding "
            "device memory or cores.",
            ["kind"],
            registry=self.registry,
        )
        self.quota_synced = Gauge(
            "hami_webhook_quota_cache_synced",
            "1 once the ResourceQuota and pod watches have completed their first list.",
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            # Present from the start, so a dashboard shows 0 rather than no data.
            self.requests.labels(outcome=outcome)
            self.duration.labels(outcome=outcome)

    def observe(self, outcome: Outcome, seconds: float) -> None:
        self.requests.labels(outcome=outcome).inc()
        self.duration.labels(outcome=outcome).observe(seconds)

    def track_quota_cache(self, *, quotas: Callable[[], int], pods: Callable[[], int]) -> None:
        """Read the cache sizes at scrape time (no bookkeeping on the request path)."""
        self.quota_objects.labels(kind="resourcequotas").set_function(quotas)
        self.quota_objects.labels(kind="pods").set_function(pods)
