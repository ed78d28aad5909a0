"""What the two HTTP services (the scheduler extender and the webhook) share in their settings.

* :class:`ServingSettings`: the fields every HTTP service has (where it serves and with which TLS
  pair, its metrics address, logs, shutdown grace period, API server access, device config,
  request body limit) and their checks.  A service's ``Settings`` subclasses it (frozen, slots),
  adds its own fields, and redeclares a field to give it its own default (its bind addresses);
* :func:`serving_flags`: the flags behind those fields, HAMi's names where HAMi has them
  (``--http_bind``, ``--cert_file``, ``--key_file``, ``--metrics-bind-address``) and ours
  (``--tls-reload-interval``, ``--log-format``, ``--log-level``, ``--debug``, ``--kube-url``,
  ``--kubeconfig``, ``--shutdown-grace-period``);
* :func:`serving_values` and :func:`kube_settings`: those fields from the parsed flags;
* :func:`parse_or_exit`: parse the flags and build the settings, turning any invalid value into
  argparse's usage error (exit status 2) instead of a stack trace;
* :func:`server_tls`: the reloading TLS context of the configured pair, its reloads counted.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypedDict, TypeVar, cast

from hami_kube.config import KubeSettings
from hami_protocol.config.device import DeviceConfig
from hami_runtime import flags
from hami_runtime.flags import Flag, parse_bool, positive_duration
from hami_runtime.lifecycle import DEFAULT_GRACE_S
from hami_runtime.logs import LOG_FORMATS, LogFormat
from hami_runtime.service_metrics import ServiceMetrics
from hami_runtime.sites import parse_bind
from hami_runtime.tls import ReloadingServerTLS

__all__ = [
    "ServingSettings",
    "ServingValues",
    "kube_settings",
    "parse_or_exit",
    "server_tls",
    "serving_flags",
    "serving_values",
]

T = TypeVar("T")

HAMI_HTTP_BIND: Final = "127.0.0.1:8080"
HAMI_METRICS_BIND: Final = ":9395"


@dataclass(frozen=True, slots=True)
class ServingSettings:
    """The settings every HTTP service has; subclass it for a service's own."""

    http_bind: str = HAMI_HTTP_BIND
    """Where the service's API, ``/healthz`` and ``/readyz`` are served."""
    cert_file: str | None = None
    key_file: str | None = None
    """Serve HTTPS with this pair, reloaded when the files change; plain HTTP when unset."""
    tls_reload_interval_s: float = 5.0
    metrics_bind_address: str = HAMI_METRICS_BIND
    log_format: LogFormat = "json"
    log_level: str = "info"
    shutdown_grace_s: float = DEFAULT_GRACE_S
    """SIGTERM → exit within this long (``--shutdown-grace-period``)."""
    kube: KubeSettings = field(default_factory=KubeSettings)
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    max_body_bytes: int = 1024 * 1024
    shutdown_timeout_s: float = 5.0
    """How long in-flight requests may take to finish once shutdown starts."""

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("--cert_file and --key_file must be given together")
        parse_bind(self.http_bind)
        parse_bind(self.metrics_bind_address)
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
        if not self.tls_reload_interval_s > 0:
            raise ValueError("--tls-reload-interval must be positive")
        if not self.shutdown_grace_s > 0:
            raise ValueError("--shutdown-grace-period must be positive")

    @property
    def tls(self) -> bool:
        return self.cert_file is not None


def serving_flags(*, default_bind: str, metrics_bind: str, what: str) -> tuple[Flag, ...]:
    """The flags of :class:`ServingSettings`' fields; ``what`` names the service in the help."""
    return (
        *flags.https_flags(default_bind=default_bind, what=what),
        Flag(
            ("--tls-reload-interval",),
            "tls_reload_interval",
            "5s",
            "how often the certificate files are checked for changes",
            positive_duration,
        ),
        *flags.process_flags(metrics_bind=metrics_bind),
        Flag(("--debug",), "debug", "false", "same as --log-level debug", parse_bool, True),
    )


class ServingValues(TypedDict):
    """:class:`ServingSettings`' fields that come straight from :func:`serving_flags`."""

    http_bind: str
    cert_file: str | None
    key_file: str | None
    tls_reload_interval_s: float
    metrics_bind_address: str
    log_format: LogFormat
    log_level: str
    shutdown_grace_s: float


def serving_values(args: argparse.Namespace) -> ServingValues:
    """The values of :func:`serving_flags` in ``args``, by field name."""
    return ServingValues(
        http_bind=args.http_bind,
        cert_file=args.cert_file or None,
        key_file=args.key_file or None,
        tls_reload_interval_s=args.tls_reload_interval,
        metrics_bind_address=args.metrics_bind_address,
        log_format=cast("LogFormat", args.log_format),
        log_level="debug" if args.debug else args.log_level,
        shutdown_grace_s=args.shutdown_grace_period,
    )


def kube_settings(
    args: argparse.Namespace,
    *,
    user_agent: str,
    qps: float = 0.0,
    burst: int = 10,
    request_timeout_s: float = 30.0,
) -> KubeSettings:
    """API server access from ``--kube-url``/``--kubeconfig`` and the service's own tuning."""
    return KubeSettings(
        kube_url=args.kube_url or None,
        kubeconfig=args.kubeconfig or None,
        qps=qps,
        burst=burst,
        request_timeout_s=request_timeout_s,
        user_agent=user_agent,
    )


def parse_or_exit(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    build: Callable[[argparse.Namespace], T],
) -> T:
    """``build(parser.parse_args(argv))``; a ``ValueError`` from ``build`` (a bad value, an
    unreadable or invalid config file) exits through ``parser.error`` with its message."""
    args = parser.parse_args(argv)
    try:
        return build(args)
    except ValueError as exc:
        parser.error(str(exc))


def server_tls(settings: ServingSettings, metrics: ServiceMetrics) -> ReloadingServerTLS | None:
    """HTTPS with ``settings``' certificate pair, reloaded when the files change, its reloads
    on ``metrics``; ``None`` (plain HTTP) without a pair.  Raises ``OSError``/``ssl.SSLError``
    when the files cannot be loaded (the service fails to start)."""
    if settings.cert_file is None or settings.key_file is None:
        return None
    tls = ReloadingServerTLS(
        settings.cert_file, settings.key_file, poll_interval=settings.tls_reload_interval_s
    )
    metrics.track_tls_reloads(lambda: tls.reloads)
    return tls
