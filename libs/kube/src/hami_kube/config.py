"""How to reach the API server: settings and construction of a configured ``ApiClient``.

Three ways, first match wins:

1. ``kube_url`` (``--kube-url``): a plain URL, no authentication (the emulator, ``kubectl proxy``);
2. ``kubeconfig``: a kubeconfig file (optionally a ``context`` in it);
3. in-cluster service-account config when ``KUBERNETES_SERVICE_HOST`` is set;
4. otherwise the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``).

Authentication is kubernetes-asyncio's own: bearer tokens (refreshed from the service-account
file in a pod), client certificates, CA bundles, exec and auth-provider plugins of a kubeconfig.

**Import cost.**  kubernetes-asyncio's package ``__init__`` modules (``kubernetes_asyncio``,
``kubernetes_asyncio.client``, ``...client.models``) import every generated API and model class:
about 1.1 s and 70 MiB per process, for classes we never use (we send raw JSON).  So this module
imports nothing of kubernetes-asyncio when it is imported, and when a client is first built it
registers those three packages *without running their* ``__init__`` (:func:`_defer_package_init`)
before importing only the submodules it needs (``client.configuration``, ``client.api_client``,
``config``): about 0.1 s.  A deferred package behaves like the real one for every other caller:
its submodules import as usual, and the first read of any other name it defines (``CoreV1Api``,
``V1Pod``) runs its real ``__init__`` then.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Final

from hami_kube.errors import KubeError

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

_SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod finds its service-account ``token`` and the cluster's ``ca.crt``."""

_HEAVY_PACKAGES: Final = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.models",
)


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


# --- importing kubernetes-asyncio without its generated classes --------------------------------


def _defer_package_init(name: str) -> None:
    """Register package ``name`` in ``sys.modules`` without running its ``__init__`` yet.

    Its submodules import as usual (the package has its ``__path__``); reading any other name
    runs the real ``__init__`` in the same module object first, so the package ends up exactly
    as a normal import leaves it.  Nothing happens when ``name`` is imported already.
    """
    if name in sys.modules:
        return
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules[parent_name] if parent_name else None
    if parent is None:
        spec = importlib.util.find_spec(name)
    else:
        spec = importlib.machinery.PathFinder.find_spec(name, parent.__path__)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an importable package", name=name)
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)

    def __getattr__(attr: str) -> object:  # noqa: N807 - a module's attribute hook (PEP 562)
        if importlib.machinery.PathFinder.find_spec(f"{name}.{attr}", package.__path__):
            return importlib.import_module(f"{name}.{attr}")
        vars(package).pop("__getattr__", None)
        loader.exec_module(package)
        return getattr(package, attr)

    package.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = package
    if parent is not None:
        setattr(parent, child, package)


@functools.cache
def _client_classes() -> tuple[type[Configuration], type[ApiClient]]:
    """``Configuration`` and ``ApiClient``, imported without the generated APIs and models."""
    for name in _HEAVY_PACKAGES:
        _defer_package_init(name)
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    # kubernetes_asyncio.config imports these two names from the package itself.
    client: ModuleType = sys.modules["kubernetes_asyncio.client"]
    for attr, value in (("Configuration", Configuration), ("ApiClient", ApiClient)):
        if attr not in vars(client):
            setattr(client, attr, value)
    return Configuration, ApiClient


async def load_configuration(
    settings: KubeSettings,
    environ: Mapping[str, str] | None = None,
    *,
    service_account: Path | None = None,
) -> Configuration:
    """A kubernetes-asyncio ``Configuration`` for ``settings`` (never the global default one).

    ``environ`` (default ``os.environ``) selects the source and, in a pod, holds the API
    server's ``KUBERNETES_SERVICE_HOST``/``_PORT``; ``service_account`` holds its ``token`` and
    ``ca.crt`` (default: where Kubernetes mounts them).
    """
    account = _SERVICE_ACCOUNT_DIR if service_account is None else service_account
    configuration_class, _ = _client_classes()
    from kubernetes_asyncio import config as k8s_config

    env = os.environ if environ is None else environ
    configuration = configuration_class()
    configuration.connection_pool_maxsize = settings.max_connections
    source = config_source(settings, env)
    try:
        if source is ConfigSource.URL:
            configuration.host = (settings.kube_url or "").rstrip("/")
            configuration.ssl_ca_cert = settings.ca_file
            configuration.verify_ssl = not settings.insecure_skip_tls_verify
        elif source is ConfigSource.IN_CLUSTER:
            # Reads two small service-account files; untyped upstream.
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration,
                environ=dict(env),
                token_filename=str(account / "token"),
                cert_filename=str(account / "ca.crt"),
            )
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
    settings: KubeSettings,
    environ: Mapping[str, str] | None = None,
    *,
    service_account: Path | None = None,
) -> ApiClient:
    """A configured ``ApiClient``; use it as ``async with await create_api_client(s) as api``."""
    configuration = await load_configuration(settings, environ, service_account=service_account)
    _, api_client_class = _client_classes()
    api = api_client_class(configuration)
    api.user_agent = settings.user_agent
    return api


__all__ = [
    "ConfigSource",
    "KubeSettings",
    "config_source",
    "create_api_client",
    "load_configuration",
]
