"""The service over real HTTPS sockets: reviews, health, metrics, bad bodies, cert rotation."""

from __future__ import annotations

import base64
import json
import ssl
from typing import Any

import aiohttp
import pytest

from hami_kubesim.certs import client_ssl_context, generate_ca
from hami_webhook.app import RunningWebhook, serving
from hami_webhook.settings import Settings

from .helpers import WebhookTls, container, eventually, gpu, pod, review

pytestmark = pytest.mark.timeout(60)


def settings_for(tls: WebhookTls | None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "http_bind": "127.0.0.1:0",
        "metrics_bind_address": "127.0.0.1:0",
        "enable_quota": False,
        "tls_reload_interval_s": 0.05,
    }
    if tls is not None:
        values["cert_file"] = str(tls.files.cert)
        values["key_file"] = str(tls.files.key)
    values.update(overrides)
    return Settings(**values)


async def post_review(
    running: RunningWebhook, body: Any, context: ssl.SSLContext | None
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            running.url() + "/webhook",
            params={"timeout": "10s"},
            data=data,
            headers={"Content-Type": "application/json"},
            ssl=context if context is not None else False,
        ) as response,
    ):
        assert response.content_type == "application/json"
        return response.status, await response.json()


async def get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(url, ssl=context or False) as response:
        return response.status, await response.text()


async def test_review_over_https_health_and_metrics(tls: WebhookTls) -> None:
    context = client_ssl_context(tls.cert.ca_pem)
    async with serving(settings_for(tls)) as running:
        assert running.scheme == "https"
        status, reply = await post_review(
            running, review(pod(container(limits=gpu())), uid="u1"), context
        )
        assert status == 200
        assert reply["response"]["uid"] == "u1"
        ops = json.loads(base64.b64decode(reply["response"]["patch"]))
        assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in ops

        status, reply = await post_review(running, review(pod(container()), uid="u2"), context)
        assert reply["response"] == {"uid": "u2", "allowed": True}
        status, reply = await post_review(
            running, review(pod(container(limits=gpu()), nodeName="n"), uid="u3"), context
        )
        assert reply["response"]["allowed"] is False
        status, reply = await post_review(running, b"{broken", context)
        assert status == 400
        assert reply["reason"] == "BadRequest"

        assert await get(running.url() + "/healthz", context) == (200, "ok")
        assert await get(running.url() + "/readyz", context) == (200, "ok")
        status, text = await get(f"http://127.0.0.1:{running.metrics_port}/metrics")
        assert status == 200
        for outcome, count in (("mutated", 1), ("allowed", 1), ("denied", 1), ("error", 1)):
            assert f'hami_webhook_admission_requests_total{{outcome="{outcome}"}} {count}.0' in text
        assert 'hami_webhook_admission_duration_seconds_count{outcome="mutated"} 1.0' in text
        assert "hami_build_info{" in text
        assert await get(f"http://127.0.0.1:{running.metrics_port}/healthz") == (200, "ok")


async def test_plain_http_when_no_certificate() -> None:
    async with serving(settings_for(None)) as running:
        assert running.scheme == "http"
        status, reply = await post_review(running, review(pod(container()), uid="u"), None)
        assert (status, reply["response"]["allowed"]) == (200, True)


async def test_oversized_body_is_refused_with_413(tls: WebhookTls) -> None:
    context = client_ssl_context(tls.cert.ca_pem)
    async with serving(settings_for(tls, max_body_bytes=1024)) as running:
        body = review(pod(container(env=[{"name": "X", "value": "y" * 4096}])))
        status, reply = await post_review(running, body, context)
        assert status == 413
        assert "too large" in reply["message"]


async def test_certificate_rotation_without_restart(tls: WebhookTls) -> None:
    old_context = client_ssl_context(tls.cert.ca_pem)
    rotated = generate_ca("rotated-ca").issue(["127.0.0.1"])
    new_context = client_ssl_context(rotated.ca_pem)
    async with serving(settings_for(tls)) as running:
        assert (await get(running.url() + "/healthz", old_context))[0] == 200
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await get(running.url() + "/healthz", new_context)

        rotated.write(tls.files.cert.parent)

        async def serves_new_certificate() -> bool:
            try:
                return (await get(running.url() + "/healthz", new_context))[0] == 200
            except aiohttp.ClientConnectorCertificateError:
                return False

        await eventually(serves_new_certificate, what="the rotated certificate is served")
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await get(running.url() + "/healthz", old_context)
        assert running.tls is not None
        assert running.tls.reloads >= 1
        status, reply = await post_review(running, review(pod(container()), uid="r"), new_context)
        assert (status, reply["response"]["uid"]) == (200, "r")
        _, text = await get(f"http://127.0.0.1:{running.metrics_port}/metrics")
        assert "hami_webhook_tls_certificate_reloads 0.0" not in text


async def test_address_in_use_fails_to_start(tls: WebhookTls) -> None:
    async with serving(settings_for(tls)) as first:
        taken = settings_for(tls, http_bind=f"127.0.0.1:{first.webhook_port}")
        with pytest.raises(OSError, match=r"(?i)address already in use"):
            async with serving(taken):
                pass
