"""How the control-plane stand-ins (scheduling loop, admission dispatcher, kubelet) reach the API
server: through :mod:`hami_kube` like any other client, over the plain-http URL the emulator
serves, with reconnect pacing suited to an in-process cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from hami_kube.backoff import BackoffPolicy
from hami_kube.config import KubeSettings
from hami_kube.reflector import ReflectorConfig
from hami_kube.rest import KubeClient, open_client

__all__ = ["RECONNECT_BACKOFF", "connect", "reflector_config"]

RECONNECT_BACKOFF = BackoffPolicy(initial=0.05, factor=2.0, cap=2.0)
"""Failed lists and watches, and retried writes, back off from 50 ms to at most 2 s: the emulator
restarts or recovers from an injected fault in moments, not minutes."""


@asynccontextmanager
async def connect(api_url: str, *, component: str) -> AsyncIterator[KubeClient]:
    """A :class:`KubeClient` for the API server at ``api_url``, closed on exit."""
    settings = KubeSettings(kube_url=api_url, user_agent=component)
    async with open_client(settings) as client:
        yield client


def reflector_config(*, field_selector: str | None = None) -> ReflectorConfig:
    """List+watch settings for a stand-in's cache of one resource."""
    return ReflectorConfig(field_selector=field_selector, backoff=RECONNECT_BACKOFF)
