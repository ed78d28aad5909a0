"""Flags and environment → one frozen :class:`Settings` for the vGPU monitor (the flag table is
:mod:`hami_deviceplugin.monitor.cli_flags`).

Refused (exit status 2, the message naming the value): a missing or relative ``HOOK_PATH``, a
missing node name, ``--device-backend fake`` without ``--fake-devices``, an unparsable bind
address, duration or boolean, an unknown log format.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from hami_deviceplugin.gpu.backends.choice import BackendKind
from hami_deviceplugin.monitor.cli_flags import DEFAULT_METRICS_BIND, DEFAULT_MIG_LOCK_FILE
from hami_deviceplugin.monitor.cli_flags import build_parser as _build_parser
from hami_kube.config import KubeSettings
from hami_runtime.lifecycle import DEFAULT_GRACE_S
from hami_runtime.logs import LOG_FORMATS, LogFormat
from hami_runtime.serving import kube_settings, parse_or_exit
from hami_runtime.sites import parse_bind

__all__ = ["Settings", "parse_settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the monitor needs to start; built by :func:`parse_settings`."""

    node_name: str
    hook_path: Path
    """Regions are under ``<hook_path>/containers/``."""
    resync_interval_s: float = 300.0
    """A directory of a pod not on this node is removed once it is older than this."""
    feedback_interval_s: float = 5.0
    """Discovery and the priority feedback run this often."""
    mig_lock_file: Path = Path(DEFAULT_MIG_LOCK_FILE)
    legacy_metrics: bool = False
    device_backend: BackendKind = "nvml"
    fake_devices: Path | None = None
    fake_poll_interval_s: float = 1.0
    sysfs_root: Path = Path("/sys")
    kube: KubeSettings = field(default_factory=KubeSettings)
    metrics_bind_address: str = DEFAULT_METRICS_BIND
    log_format: LogFormat = "json"
    log_level: str = "info"
    shutdown_grace_s: float = DEFAULT_GRACE_S
    """SIGTERM → exit within this long (``--shutdown-grace-period``)."""

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ValueError("--node-name (or NODE_NAME) is required")
        if not str(self.hook_path) or not self.hook_path.is_absolute():
            raise ValueError(f"HOOK_PATH must be an absolute path, got {str(self.hook_path)!r}")
        if self.device_backend == "fake" and self.fake_devices is None:
            raise ValueError("--device-backend fake needs --fake-devices FILE")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
        if not isinstance(logging.getLevelName(self.log_level.upper()), int):
            raise ValueError(f"--log-level {self.log_level!r} is not a log level")
        parse_bind(self.metrics_bind_address)
        for name in (
            "resync_interval_s",
            "feedback_interval_s",
            "fake_poll_interval_s",
            "shutdown_grace_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")

    @property
    def containers_dir(self) -> Path:
        return self.hook_path / "containers"


def _settings(args: argparse.Namespace) -> Settings:
    if not args.hook_path:
        raise ValueError("--hook-path (or HOOK_PATH) is required")
    return Settings(
        node_name=str(args.node_name or ""),
        hook_path=Path(args.hook_path),
        resync_interval_s=args.resync_interval,
        feedback_interval_s=args.feedback_interval,
        mig_lock_file=Path(args.mig_lock_file),
        legacy_metrics=args.legacy_metrics,
        device_backend=cast("BackendKind", args.device_backend),
        fake_devices=Path(args.fake_devices) if args.fake_devices else None,
        kube=kube_settings(args, user_agent="hami-vgpu-monitor"),
        metrics_bind_address=args.metrics_bind_address,
        log_format=cast("LogFormat", args.log_format),
        log_level=args.log_level,
        shutdown_grace_s=args.shutdown_grace_period,
    )


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags and environment; exits with a usage message (status 2) on invalid input."""
    env = os.environ if environ is None else environ
    return parse_or_exit(_build_parser(env), argv, _settings)
