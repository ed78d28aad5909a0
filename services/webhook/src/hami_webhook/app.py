"""Wiring: the webhook's parts as the steps of one :class:`~hami_runtime.lifecycle.Lifecycle`.

:func:`run` enters, in this order:

1. ``api-client``: the Kubernetes client (only when quota checks or ``--dra-claims`` are on);
2. ``quota-watches``: the ResourceQuota and placed-pod reflectors feeding the quota cache;
3. ``sites``: ``/webhook`` (HTTPS when a certificate is configured) and ``/metrics``;
4. ``loops``: the certificate reloader;

then waits for the stop event (SIGTERM/SIGINT when run as a process) and leaves the steps in
reverse: the reloader ends, the sites stop accepting and let in-flight reviews finish, the watches
end, the client closes.  The whole shutdown ends within ``--shutdown-grace-period`` even when a
peer hangs (a client holding a connection or sending half a request, an API server that stops
answering): a step that overruns is cut off and named in the log.  In-flight reviews get at most
half the grace period (a review takes well under a millisecond; one still running after that
waits on a hung client), so the watches and the client always have time to close.

The webhook answers from the start; ``/readyz`` turns 200 once the quota watches have listed, so a
Service only routes to a replica whose quota view is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

import structlog

from hami_kube.rest import KubeClient, open_client
from hami_runtime.embedded import embedded
from hami_runtime.lifecycle import Lifecycle
from hami_runtime.serving import server_tls
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, site
from hami_runtime.tls import ReloadingServerTLS
from hami_webhook.admission.http import WebhookState, build_app
from hami_webhook.dra.template_writer import TemplateWriter
from hami_webhook.metrics import WebhookMetrics
from hami_webhook.quota.cache import QuotaCache
from hami_webhook.quota.watch import QuotaWatcher
from hami_webhook.settings import Settings

__all__ = ["RunningWebhook", "run", "serving"]

log = structlog.get_logger("hami_webhook")

COMPONENT: Final = "webhook"
_CLIENT_CLOSE_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class RunningWebhook:
    """A started service: bound ports and the live collaborators (for tests and the demo)."""

    webhook_port: int
    metrics_port: int
    tls: ReloadingServerTLS | None
    quota: QuotaCache | None
    watcher: QuotaWatcher | None
    metrics: WebhookMetrics
    templates: TemplateWriter | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.webhook_port}"

    def ready(self) -> bool:
        return self.watcher is None or self.watcher.synced


async def _quota_watches(
    life: Lifecycle, settings: Settings, metrics: WebhookMetrics, client: KubeClient
) -> QuotaWatcher:
    watcher = QuotaWatcher(client, QuotaCache(settings.rules.vendors))
    watches = await life.tasks("quota-watches")
    for reflector in watcher.reflectors:
        watches.spawn(f"reflector-{reflector.name}", reflector.run())
    metrics.track_quota_cache(
        quotas=lambda: watcher.cache.quota_count, pods=lambda: watcher.cache.pod_count
    )
    return watcher


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningWebhook], None] | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given)."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop, component=COMPONENT)
    metrics = WebhookMetrics()
    tls = server_tls(settings, metrics)
    async with Lifecycle(COMPONENT, grace_s=settings.shutdown_grace_s) as life:
        client = None
        if settings.enable_quota or settings.dra_claims:
            client = await life.enter(
                "api-client", open_client(settings.kube), within=_CLIENT_CLOSE_S
            )
        watcher = None
        if settings.enable_quota and client is not None:
            watcher = await _quota_watches(life, settings, metrics, client)
        templates = TemplateWriter(client) if settings.dra_claims and client else None

        def ready() -> bool:
            return watcher is None or watcher.synced

        # Evaluated at scrape time, so the gauge is right even when nothing probes /readyz.
        metrics.quota_synced.set_function(lambda: 1.0 if ready() else 0.0)
        state = WebhookState(
            rules=settings.rules,
            metrics=metrics,
            quota=watcher.cache if watcher else None,
            ready=ready,
            templates=templates,
        )
        # In-flight reviews get half the grace at most: the watches and the client still need
        # the rest to close.
        site_s = min(settings.shutdown_timeout_s, settings.shutdown_grace_s / 2) / 2
        metrics_port = await life.enter(
            "metrics-site",
            site(
                metrics_app(metrics.registry, ready=ready),
                settings.metrics_bind_address,
                within=site_s,
            ),
            within=site_s,
        )
        port = await life.enter(
            "webhook-site",
            site(
                build_app(state, max_body_bytes=settings.max_body_bytes),
                settings.http_bind,
                within=site_s,
                ssl_context=tls.context if tls else None,
            ),
            within=site_s,
        )
        loops = await life.tasks("loops")
        if tls is not None:
            loops.spawn("tls-reload", tls.watch())
        log.info(
            "webhook_started",
            bind=settings.http_bind,
            port=port,
            tls=tls is not None,
            metrics_port=metrics_port,
            quota=watcher is not None,
            dra_claims=templates is not None,
            scheduler_name=settings.rules.scheduler_name,
            vendors=[vendor.common_word for vendor in settings.rules.vendors],
        )
        if on_started is not None:
            on_started(
                RunningWebhook(
                    webhook_port=port,
                    metrics_port=metrics_port,
                    tls=tls,
                    quota=watcher.cache if watcher else None,
                    watcher=watcher,
                    metrics=metrics,
                    templates=templates,
                )
            )
        await life.run_until(stop)
        log.info("webhook_stopping", grace_s=settings.shutdown_grace_s)
    log.info("webhook_stopped", timed_out=life.timed_out)


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[RunningWebhook]:
    """Run the service in this event loop for the duration of the block."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningWebhook], None]
    ) -> Coroutine[Any, Any, None]:
        return run(settings, stop=stop, on_started=on_started)

    async with embedded(start, name="hami-webhook", grace_s=settings.shutdown_grace_s) as running:
        yield running
