"""Command-line flags and environment variables → one frozen :class:`Settings`.

Flags keep HAMi's names where HAMi has them (``--http_bind``, ``--cert_file``, ``--scheduler-name``,
``--resource-mem``, ...).  Every flag may also come from the environment as ``HAMI_`` plus the
flag name upper-cased with dashes as underscores (``--scheduler-name`` → ``HAMI_SCHEDULER_NAME``,
``--cert_file`` → ``HAMI_CERT_FILE``); a flag on the command line wins over the environment.
Boolean flags take Go's forms: ``--overwrite-env``, ``--overwrite-env=true``, ``=false``.

Defaults that differ from HAMi's scheduler binary (which serves this webhook next to its
extender) and why:

* ``--scheduler-name hami-scheduler``: HAMi's flag defaults to ``""`` (which disables routing) and
  its chart always passes the profile name; ``hami-scheduler`` is that name.
* ``--http_bind 0.0.0.0:9443``: the API server must reach the webhook, so it listens on every
  address; 9443 is the usual admission webhook port (HAMi's flag default is ``127.0.0.1:8080``).
* ``--metrics-bind-address :9396``: HAMi's ``:9395`` belongs to the scheduler, ``:9394`` to the
  vGPU monitor.

NVIDIA resource flags (``--resource-name``, ``--resource-mem``, ``--resource-mem-percentage``,
``--resource-cores``, ``--resource-priority``, ``--default-mem``, ``--default-cores``,
``--default-gpu``, ``--overwrite-env``) seed the ``nvidia`` section; keys present in
``--device-config-file`` override them, as in HAMi.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, cast

from hami_kube.config import KubeSettings
from hami_protocol.config.device import DeviceConfig
from hami_protocol.errors import ConfigError
from hami_protocol.vendor.table import vendors_from_config
from hami_runtime import flags
from hami_runtime.flags import ENV_PREFIX, Flag, parse_bool
from hami_runtime.lifecycle import DEFAULT_GRACE_S
from hami_runtime.logs import LOG_FORMATS, LogFormat
from hami_runtime.sites import parse_bind
from hami_webhook.mutate import MutationRules

__all__ = [
    "DEFAULT_HTTP_BIND",
    "DEFAULT_METRICS_BIND",
    "DEFAULT_SCHEDULER_NAME",
    "ENV_PREFIX",
    "Settings",
    "build_parser",
    "parse_settings",
]

DEFAULT_HTTP_BIND: Final = "0.0.0.0:9443"
DEFAULT_METRICS_BIND: Final = ":9396"
DEFAULT_SCHEDULER_NAME: Final = "hami-scheduler"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service needs to start; built by :func:`parse_settings`."""

    http_bind: str = DEFAULT_HTTP_BIND
    """Where ``/webhook``, ``/healthz`` and ``/readyz`` are served."""
    cert_file: str | None = None
    key_file: str | None = None
    """Serve HTTPS with this pair, reloaded when the files change; plain HTTP when unset."""
    tls_reload_interval_s: float = 5.0
    metrics_bind_address: str = DEFAULT_METRICS_BIND
    log_format: LogFormat = "json"
    log_level: str = "info"
    shutdown_grace_s: float = DEFAULT_GRACE_S
    """SIGTERM → exit within this long (``--shutdown-grace-period``)."""
    kube: KubeSettings = field(default_factory=KubeSettings)
    enable_quota: bool = True
    """Watch ResourceQuotas and placed pods to check namespace device quotas."""
    rules: MutationRules = field(default_factory=MutationRules)
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    max_body_bytes: int = 4 * 1024 * 1024
    shutdown_timeout_s: float = 5.0
    """How long in-flight reviews may take to finish once shutdown starts."""

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("--cert_file and --key_file must be given together")
        parse_bind(self.http_bind)
        parse_bind(self.metrics_bind_address)
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
        if self.tls_reload_interval_s <= 0:
            raise ValueError("--tls-reload-interval must be positive")

    @property
    def tls(self) -> bool:
        return self.cert_file is not None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


_FLAGS: Final = (
    *flags.https_flags(default_bind=DEFAULT_HTTP_BIND, what="webhook"),
    Flag(
        ("--tls-reload-interval",),
        "tls_reload_interval",
        "5",
        "seconds between checks of the certificate files",
        _positive_float,
    ),
    *flags.process_flags(metrics_bind=DEFAULT_METRICS_BIND),
    Flag(("--debug",), "debug", "false", "same as --log-level debug", parse_bool, True),
    Flag(
        ("--enable-quota",),
        "enable_quota",
        "true",
        "check namespace ResourceQuotas on device memory and cores (watches the API server)",
        parse_bool,
        True,
    ),
    Flag(
        ("--scheduler-name",),
        "scheduler_name",
        DEFAULT_SCHEDULER_NAME,
        "scheduler written into spec.schedulerName of pods that request devices",
    ),
    Flag(
        ("--force-overwrite-default-scheduler",),
        "force_overwrite_default_scheduler",
        "true",
        "also reroute pods that name default-scheduler",
        parse_bool,
        True,
    ),
    Flag(
        ("--overwrite-env",),
        "overwrite_env",
        "false",
        "set NVIDIA_VISIBLE_DEVICES=none in containers without NVIDIA GPUs",
        parse_bool,
        True,
    ),
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The flag parser; defaults come from ``environ`` (``HAMI_*``) when set there."""
    return flags.build_parser(
        prog="hami-webhook",
        description="Mutating admission webhook routing GPU-sharing pods to the HAMi scheduler.",
        flags=(*_FLAGS, *flags.DEVICE_FLAGS),
        environ=environ,
    )


def load_device_config(args: argparse.Namespace) -> DeviceConfig:
    """The flags' ``nvidia`` values, overridden by whatever the config file sets."""
    return flags.load_device_config(
        args.device_config_file,
        {**flags.nvidia_from_flags(args), "overwriteEnv": args.overwrite_env},
    )


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags (and ``HAMI_*`` variables); exits with a usage message on invalid input."""
    parser = build_parser(environ)
    args = parser.parse_args(argv)
    try:
        config = load_device_config(args)
        vendors = vendors_from_config(
            config, enable_ascend=args.enable_ascend, enable_iluvatar=args.enable_iluvatar
        )
        rules = MutationRules(
            scheduler_name=args.scheduler_name,
            force_overwrite_default_scheduler=args.force_overwrite_default_scheduler,
            nvidia=config.nvidia,
            vendors=vendors,
        )
        return Settings(
            http_bind=args.http_bind,
            cert_file=args.cert_file or None,
            key_file=args.key_file or None,
            tls_reload_interval_s=args.tls_reload_interval,
            metrics_bind_address=args.metrics_bind_address,
            log_format=cast("LogFormat", args.log_format),
            log_level="debug" if args.debug else args.log_level,
            shutdown_grace_s=args.shutdown_grace_period,
            kube=KubeSettings(
                kube_url=args.kube_url or None,
                kubeconfig=args.kubeconfig or None,
                user_agent="hami-webhook",
            ),
            enable_quota=args.enable_quota,
            rules=rules,
            device_config=config,
        )
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
