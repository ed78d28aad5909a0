"""How to reach the API server: settings and construction of a configured ``ApiClient``.

Three ways, first match wins:

1. ``kube_url`` (``--kube-url``): a plain URL, no authentication (the emulator, ``kubectl proxy``);
2. ``kubeconfig``: a kubeconfig file (optionally a ``context`` in it);
3. in-cluster service-account config when ``KUBERNETES_SERVICE_HOST`` is set;
4. otherwise the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from hami_kube.errors import KubeError


class ConfigSource(StrEnum):
    URL = "url"
    KUBECONFIG = "kubeconfig"
    IN_CLUSTER = "in-cluster"
    DEFAULT_KUBECONFIG = "default-kubeconfig"


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """Connection settings shared by every service.

    ``ca_file`` / ``insecure_skip_tls_verify`` apply to an ``https`` ``kube_url`` only (a
    kubeconfig or the in-cluster config carries its own CA).
    ``qps``/``burst``: client-side token bucket over request starts; ``qps <= 0`` disables it.
    ``request_timeout_s``: total time allowed for one non-watch request.
    ``max_connections``: connection pool size; every open watch holds one connection.
    """

    kube_url: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    ca_file: str | None = None
    insecure_skip_tls_verify: bool = False
    qps: float = 0.0
    burst: int = 10
    request_timeout_s: float = 30.0
    max_connections: int = 64
    user_agent: str = "hami"

    def __post_init__(self) -> None:
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")
        if self.qps > 0 and self.burst < 1:
            raise ValueError("burst must be at least 1 when qps is set")


def config_source(settings: KubeSettings, environ: Mapping[str, str] | None = None) -> ConfigSource:
    """Which of the ways in the module docstring ``settings`` selects."""
    env = os.environ if environ is None else environ
    if settings.kube_url:
        return ConfigSource.URL
    if settings.kubeconfig:
        return ConfigSource.KUBECONFIG
    if env.get("KUBERNETES_SERVICE_HOST"):
        return ConfigSource.IN_CLUSTER
    return ConfigSource.DEFAULT_KUBECONFIG


async def load_configuration(
    settings: KubeSettings, environ: Mapping[str, str] | None = None
) -> k8s_client.Configuration:
    """A kubernetes-asyncio ``Configuration`` for ``settings`` (never the global default one)."""
    configuration = k8s_client.Configuration()
    configuration.connection_pool_maxsize = settings.max_connections
    source = config_source(settings, environ)
    try:
        if source is ConfigSource.URL:
            configuration.host = (settings.kube_url or "").rstrip("/")
            configuration.ssl_ca_cert = settings.ca_file
            configuration.verify_ssl = not settings.insecure_skip_tls_verify
        elif source is ConfigSource.IN_CLUSTER:
            # Reads two small service-account files; untyped upstream.
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=settings.kubeconfig,
                context=settings.context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (k8s_config.ConfigException, OSError) as exc:
        raise KubeError(f"cannot load Kubernetes client configuration ({source}): {exc}") from exc
    return configuration


async def create_api_client(
    settings: KubeSettings, environ: Mapping[str, str] | None = None
) -> k8s_client.ApiClient:
    """A configured ``ApiClient``; use it as ``async with await create_api_client(s) as api``."""
    configuration = await load_configuration(settings, environ)
    api = k8s_client.ApiClient(configuration)
    api.user_agent = settings.user_agent
    return api


__all__ = [
    "ConfigSource",
    "KubeSettings",
    "config_source",
    "create_api_client",
    "load_configuration",
]
