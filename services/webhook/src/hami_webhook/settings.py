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
from typing import Final

from hami_runtime import flags
from hami_runtime.flags import ENV_PREFIX, Flag, parse_bool
from hami_runtime.serving import (
    ServingSettings,
    kube_settings,
    parse_or_exit,
    serving_flags,
    serving_values,
)
from hami_webhook.mutation.rules import MutationRules

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
class Settings(ServingSettings):
    """Everything the service needs to start; built by :func:`parse_settings`.

    The serving fields (bind addresses, TLS pair, logs, grace period, API server, device config)
    are :class:`~hami_runtime.serving.ServingSettings`'.
    """

    http_bind: str = DEFAULT_HTTP_BIND
    """Where ``/webhook``, ``/healthz`` and ``/readyz`` are served."""
    metrics_bind_address: str = DEFAULT_METRICS_BIND
    max_body_bytes: int = 4 * 1024 * 1024
    enable_quota: bool = True
    """Watch ResourceQuotas and placed pods to check namespace device quotas."""
    dra_claims: bool = False
    """Serve ``/webhook/dra``: NVIDIA requests become DRA claims (creates
    ResourceClaimTemplates through the API server)."""
    rules: MutationRules = field(default_factory=MutationRules)


_FLAGS: Final = (
    *serving_flags(
        default_bind=DEFAULT_HTTP_BIND, metrics_bind=DEFAULT_METRICS_BIND, what="webhook"
    ),
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
        ("--write-capacity-totals",),
        "write_capacity_totals",
        "false",
        "write each container's NVIDIA totals as hami.io/nvidia-memory and hami.io/nvidia-cores "
        "(the capacity totals mode; the device plugin's --advertise-capacity-totals advertises "
        "the node side)",
        parse_bool,
        True,
    ),
    Flag(
        ("--dra-claims",),
        "dra_claims",
        "false",
        "serve /webhook/dra, which turns NVIDIA requests into DRA ResourceClaims from shared "
        "ResourceClaimTemplates (created through the API server) for pods the "
        "MutatingWebhookConfiguration sends there (docs/dra.md)",
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


def _settings(args: argparse.Namespace) -> Settings:
    config, vendors = flags.devices_from_flags(args, overwriteEnv=args.overwrite_env)
    return Settings(
        **serving_values(args),
        kube=kube_settings(args, user_agent="hami-webhook"),
        device_config=config,
        enable_quota=args.enable_quota,
        dra_claims=args.dra_claims,
        rules=MutationRules(
            scheduler_name=args.scheduler_name,
            force_overwrite_default_scheduler=args.force_overwrite_default_scheduler,
            nvidia=config.nvidia,
            vendors=vendors,
            devices=config,
            capacity_totals=args.write_capacity_totals,
        ),
    )


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags (and ``HAMI_*`` variables); exits with a usage message on invalid input."""
    return parse_or_exit(build_parser(environ), argv, _settings)
