"""The vGPU monitor's command-line flags: one table, each flag with its environment variable.

HAMi's names where HAMi has them: ``--hook-path`` (env ``HOOK_PATH``, required: the directory
holding ``containers/``), ``--node-name`` (env ``NODE_NAME``, required), ``--resync-interval``
(env ``HAMI_RESYNC_INTERVAL``, a Go duration, default ``5m``: how old a directory of an unknown
pod must be before it is removed), ``--metrics-bind-address`` (default ``:9394``) and
``--legacy-metrics`` (also export HAMi's pre-2.7 metric names).  Ours take ``HAMI_`` + the
upper-cased name: ``--kube-url``, ``--kubeconfig``, ``--log-format``, ``--log-level``,
``--shutdown-grace-period`` (every service's), ``--device-backend nvml|fake`` and
``--fake-devices`` (where the host GPU figures come from, as in the device plugin),
``--feedback-interval`` (a Go duration, default ``5s``: how often the regions are discovered and
the priority feedback is written) and ``--mig-lock-file`` (default
``/tmp/hami/hami-mig-apply.lock``: the feedback pauses while it exists).  A flag on the command
line wins over its variable; a value that does not convert exits with status 2 naming it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Final

from hami_runtime import flags
from hami_runtime.flags import Flag, parse_bool, positive_duration

__all__ = [
    "DEFAULT_FEEDBACK_INTERVAL",
    "DEFAULT_METRICS_BIND",
    "DEFAULT_MIG_LOCK_FILE",
    "DEFAULT_RESYNC_INTERVAL",
    "FLAGS",
    "build_parser",
]

DEFAULT_METRICS_BIND: Final = ":9394"
DEFAULT_RESYNC_INTERVAL: Final = "5m"
DEFAULT_FEEDBACK_INTERVAL: Final = "5s"
DEFAULT_MIG_LOCK_FILE: Final = "/tmp/hami/hami-mig-apply.lock"

FLAGS: Final = (
    Flag(
        ("--hook-path",),
        "hook_path",
        None,
        "directory holding containers/<podUID>_<container>/<uuid>.cache (required)",
        env="HOOK_PATH",
    ),
    Flag(("--node-name",), "node_name", None, "this node's name (required)", env="NODE_NAME"),
    Flag(
        ("--resync-interval",),
        "resync_interval",
        DEFAULT_RESYNC_INTERVAL,
        "how old a directory of a pod not on this node must be before it is removed",
        positive_duration,
    ),
    *flags.process_flags(metrics_bind=DEFAULT_METRICS_BIND),
    Flag(
        ("--legacy-metrics",),
        "legacy_metrics",
        "false",
        "also export HAMi's legacy metric names and labels",
        parse_bool,
        True,
    ),
    Flag(("--device-backend",), "device_backend", "nvml", "GPU backend", choices=("nvml", "fake")),
    Flag(("--fake-devices",), "fake_devices", None, "YAML file of the fake backend"),
    Flag(
        ("--feedback-interval",),
        "feedback_interval",
        DEFAULT_FEEDBACK_INTERVAL,
        "how often regions are discovered and the priority feedback written",
        positive_duration,
    ),
    Flag(
        ("--mig-lock-file",),
        "mig_lock_file",
        DEFAULT_MIG_LOCK_FILE,
        "the feedback pauses while this file exists",
    ),
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The flag parser; a flag's default comes from its variable in ``environ`` when set."""
    return flags.build_parser(
        prog="hami-vgpu-monitor",
        description="Per-container GPU usage from HAMi-core's shared regions, and its feedback.",
        flags=FLAGS,
        environ=environ,
    )
