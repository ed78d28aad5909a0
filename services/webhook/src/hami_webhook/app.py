"""Wiring: servers, the certificate reloader and the quota watches under one TaskGroup.

Lifecycle of :func:`run`:

1. open the Kubernetes client (only when quota checks are on) and start the quota watches;
2. serve ``/webhook`` (HTTPS when a certificate is configured) and ``/metrics``;
3. wait for the stop event (SIGTERM/SIGINT when run as a process);
4. shut down in order: stop accepting and let in-flight reviews finish (bounded by aiohttp's
   shutdown timeout), cancel the background tasks, stop the metrics server, close the client.

The webhook answers from the start; ``/readyz`` turns 200 once the quota watches have listed, so a
Service only routes to a replica whose quota view is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from hami_kube.rest import open_client
from hami_runtime.embedded import embedded
from hami_runtime.signals import install_stop_signals
from hami_runtime.sites import metrics_app, serving_sites
from hami_runtime.tls import ReloadingServerTLS
from hami_webhook.http import WebhookState, build_app
from hami_webhook.metrics import WebhookMetrics
from hami_webhook.quota import QuotaCache
from hami_webhook.quota_watch import QuotaWatcher
from hami_webhook.settings import Settings

__all__ = ["RunningWebhook", "run", "serving"]

log = structlog.get_logger("hami_webhook")


@dataclass(frozen=True, slots=True)
class RunningWebhook:
    """A started service: bound ports and the live collaborators (for tests and the demo)."""

    webhook_port: int
    metrics_port: int
    tls: ReloadingServerTLS | None
    quota: QuotaCache | None
    watcher: QuotaWatcher | None
    metrics: WebhookMetrics

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def url(self, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.webhook_port}"

    def ready(self) -> bool:
        return self.watcher is None or self.watcher.synced


async def run(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    on_started: Callable[[RunningWebhook], None] | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is not given)."""
    if stop is None:
        stop = asyncio.Event()
        install_stop_signals(stop)
    metrics = WebhookMetrics()
    tls = (
        ReloadingServerTLS(
            settings.cert_file, settings.key_file, poll_interval=settings.tls_reload_interval_s
        )
        if settings.cert_file and settings.key_file
        else None
    )
    if tls is not None:
        metrics.track_tls_reloads(lambda: tls.reloads)
    async with contextlib.AsyncExitStack() as stack:
        quota: QuotaCache | None = None
        watcher: QuotaWatcher | None = None
        if settings.enable_quota:
            client = await stack.enter_async_context(open_client(settings.kube))
            quota = QuotaCache(settings.rules.vendors)
            watcher = QuotaWatcher(client, quota)
            metrics.track_quota_cache(
                quotas=lambda: quota.quota_count if quota else 0,
                pods=lambda: quota.pod_count if quota else 0,
            )

        def ready() -> bool:
            return watcher is None or watcher.synced

        # Evaluated at scrape time, so the gauge is right even when nothing probes /readyz.
        metrics.quota_synced.set_function(lambda: 1.0 if ready() else 0.0)

        state = WebhookState(rules=settings.rules, metrics=metrics, quota=quota, ready=ready)
        await _serve(
            settings, state=state, tls=tls, watcher=watcher, stop=stop, on_started=on_started
        )


async def _serve(
    settings: Settings,
    *,
    state: WebhookState,
    tls: ReloadingServerTLS | None,
    watcher: QuotaWatcher | None,
    stop: asyncio.Event,
    on_started: Callable[[RunningWebhook], None] | None,
) -> None:
    async with (
        serving_sites(
            build_app(state, max_body_bytes=settings.max_body_bytes),
            settings.http_bind,
            ssl_context=tls.context if tls else None,
            metrics=metrics_app(state.metrics.registry, ready=state.ready),
            metrics_bind=settings.metrics_bind_address,
        ) as sites,
        asyncio.TaskGroup() as group,
    ):
        background: list[asyncio.Task[None]] = []
        if tls is not None:
            background.append(group.create_task(tls.watch(), name="webhook-tls-reload"))
        if watcher is not None:
            background += watcher.start(group)
        log.info(
            "webhook_started",
            bind=settings.http_bind,
            port=sites.port,
            tls=tls is not None,
            metrics_port=sites.metrics_port,
            quota=watcher is not None,
            scheduler_name=settings.rules.scheduler_name,
            vendors=[vendor.common_word for vendor in settings.rules.vendors],
        )
        if on_started is not None:
            on_started(
                RunningWebhook(
                    webhook_port=sites.port,
                    metrics_port=sites.metrics_port,
                    tls=tls,
                    quota=watcher.cache if watcher else None,
                    watcher=watcher,
                    metrics=state.metrics,
                )
            )
        await stop.wait()
        log.info("webhook_stopping")
        await sites.drain(background)
    log.info("webhook_stopped")


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[RunningWebhook]:
    """Run the service in this event loop for the duration of the block."""

    def start(
        stop: asyncio.Event, on_started: Callable[[RunningWebhook], None]
    ) -> Coroutine[Any, Any, None]:
        return run(settings, stop=stop, on_started=on_started)

    async with embedded(start, name="hami-webhook") as running:
        yield running
