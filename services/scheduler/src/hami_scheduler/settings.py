"""Command-line flags and environment variables → one frozen :class:`Settings`.

Flags keep HAMi's names and defaults where HAMi has them (``--http_bind``, ``--cert_file``,
``--scheduler-name``, ``--node-scheduler-policy``, ``--gpu-scheduler-policy``,
``--metrics-bind-address``, ``--node-label-selector``, ``--node-lock-timeout``,
``--node-lock-retry-timeout``, ``--leader-elect*``, ``--device-config-file``, ``--kube-qps``...).
Every flag may also come from the environment as ``HAMI_`` plus the flag name upper-cased with
dashes as underscores (``--filter-mode`` → ``HAMI_FILTER_MODE``); the command line wins.
Durations are Go-style (``5m``, ``30s``, ``1h30m``).  Boolean flags take Go's forms
(``--leader-elect``, ``--leader-elect=true``, ``=false``).

Our own flags: ``--kube-url``/``--kubeconfig``, ``--log-format``/``--log-level``,
``--filter-mode single|all``, ``--node-lock-wait`` (default ``20s``: how long a bind waits
for a node lock another pod still needs; it must stay below the extender ``httpTimeout`` of
30 s our KubeSchedulerConfiguration sets, since kube-scheduler abandons the bind then and the
bind still has to write the lock and the Binding after its wait), ``--handshake-timeout``
(default ``5m``, the seed protocol's rule; HAMi's code uses 60 s), ``--handshake-interval``
(HAMi's register loop period, 15 s), ``--tls-reload-interval`` and the leader-election
details ``--leader-elect-mode``, ``--leader-elect-identity``, ``--leader-elect-lease-duration``,
``--leader-elect-renew-deadline`` and ``--leader-elect-retry-period`` (kube-scheduler's names);
``--gpumap-bind-address`` (default ``:9397``, empty disables: the read-only GPU map,
docs/gpumap.md), ``--gpumap-frame-ancestors`` (its CSP ``frame-ancestors``, default
``'none'``), ``--gpumap-monitors`` (where the map reads the vGPU monitors' usage: a URL template,
default ``http://{node_ip}:9394/metrics``, or ``<namespace>/<service>`` whose EndpointSlices
locate them; empty: no usage), ``--gpumap-monitor-timeout`` (default ``2s``) and
``--gpumap-max-age`` (default ``5s``: how long a map or pending answer is shared) and
``--gpumap-dra`` (default true: the map watches ResourceSlices and ResourceClaims of driver
``gpu.hami.io`` to show DRA-managed GPUs).

NVIDIA resource flags (``--resource-name``, ``--resource-mem``, ``--resource-mem-percentage``,
``--resource-cores``, ``--resource-priority``, ``--default-mem``, ``--default-cores``,
``--default-gpu``) seed the ``nvidia`` section; keys present in ``--device-config-file`` override
them, as in HAMi.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, cast

from hami_protocol.config.device import DeviceConfig
from hami_protocol.durations import format_go_duration
from hami_protocol.pod.policy import (
    SPREAD,
    GpuPolicy,
    NodePolicy,
    parse_gpu_policy,
    parse_node_policy,
)
from hami_protocol.selectors import format_selector, parse_selector_string
from hami_protocol.vendor.table import Vendor, vendors_from_config
from hami_runtime import flags
from hami_runtime.flags import ENV_PREFIX, Flag, duration, non_negative, number, parse_bool
from hami_runtime.serving import (
    ServingSettings,
    kube_settings,
    parse_or_exit,
    serving_flags,
    serving_values,
)
from hami_runtime.sites import parse_bind
from hami_scheduler.gpumap.locate import DEFAULT_MONITORS, parse_monitor_source

__all__ = [
    "DEFAULT_FRAME_ANCESTORS",
    "DEFAULT_GPUMAP_BIND",
    "DEFAULT_HTTP_BIND",
    "DEFAULT_METRICS_BIND",
    "DEFAULT_NODE_LOCK_WAIT_S",
    "ENV_PREFIX",
    "EXTENDER_HTTP_TIMEOUT_S",
    "FILTER_MODES",
    "LEADER_MODES",
    "FilterMode",
    "LeaderElectSettings",
    "LeaderMode",
    "Settings",
    "build_parser",
    "parse_settings",
]

DEFAULT_HTTP_BIND: Final = "127.0.0.1:8080"
DEFAULT_METRICS_BIND: Final = ":9395"
DEFAULT_COMPONENT: Final = "hami-scheduler"
DEFAULT_GPUMAP_BIND: Final = ":9397"
"""``--gpumap-bind-address``'s default (the GPU map, docs/gpumap.md); ``""`` disables it."""
DEFAULT_FRAME_ANCESTORS: Final = "'none'"
EXTENDER_HTTP_TIMEOUT_S: Final = 30.0
"""The extender ``httpTimeout`` our KubeSchedulerConfiguration sets: kube-scheduler abandons a
``/bind`` after it, so a bind's wait for the node lock must end well before."""
DEFAULT_NODE_LOCK_WAIT_S: Final = 20.0
"""``--node-lock-wait``: 20 s of waiting leave 10 s of the 30 s for the lock write and the
Binding."""

FilterMode = Literal["single", "all"]
FILTER_MODES: Final[tuple[FilterMode, ...]] = ("single", "all")
LeaderMode = Literal["follow", "campaign"]
LEADER_MODES: Final[tuple[LeaderMode, ...]] = ("follow", "campaign")


@dataclass(frozen=True, slots=True)
class LeaderElectSettings:
    """Where the Lease lives and how this replica takes part.

    ``follow`` (HAMi's way): kube-scheduler in the same pod campaigns on the Lease and this
    replica leads while the holder is itself (``identity`` or ``identity_<suffix>``, the form
    kube-scheduler writes) and the Lease is being renewed.  ``campaign``: this replica campaigns
    on the Lease itself (client-go's algorithm), for deployments without such a kube-scheduler.
    """

    enabled: bool = False
    mode: LeaderMode = "follow"
    namespace: str = "kube-system"
    name: str = DEFAULT_COMPONENT
    identity: str = ""
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Settings(ServingSettings):
    """Everything the service needs to start; built by :func:`parse_settings`.

    The serving fields (bind addresses, TLS pair, logs, grace period, API server, device config)
    are :class:`~hami_runtime.serving.ServingSettings`'.
    """

    http_bind: str = DEFAULT_HTTP_BIND
    """Where ``/filter``, ``/bind``, ``/prioritize``, ``/healthz`` and ``/readyz`` are served."""
    metrics_bind_address: str = DEFAULT_METRICS_BIND
    scheduler_name: str = ""
    """HAMi's ``--scheduler-name``: the Events' source component (``hami-scheduler`` if empty)."""
    node_policy: NodePolicy = "binpack"
    gpu_policy: GpuPolicy = SPREAD
    node_label_selector: str = ""
    """Canonical label selector; only matching nodes are registered (empty: every node)."""
    node_lock_timeout_s: float = 300.0
    node_lock_retry_timeout_s: float = 28.0
    """How long members of a PodGroup wait for a contended node lock (0: as other pods)."""
    node_lock_wait_s: float = DEFAULT_NODE_LOCK_WAIT_S
    """How long a bind waits for a contended node lock (0: fail at once, as HAMi)."""
    leader: LeaderElectSettings = field(default_factory=LeaderElectSettings)
    filter_mode: FilterMode = "single"
    handshake_timeout_s: float = 300.0
    handshake_interval_s: float = 15.0
    vendors: tuple[Vendor, ...] = field(default_factory=lambda: vendors_from_config(DeviceConfig()))
    pod_name: str = ""
    pod_namespace: str = ""
    """This replica's own pod (``POD_NAME``/``POD_NAMESPACE``), labelled with its role."""
    gpumap_bind_address: str = ""
    """Where the GPU map is served (``""``: not at all — the default here, so embedded and
    test instances open no fixed port; the flag's default is :data:`DEFAULT_GPUMAP_BIND`)."""
    gpumap_frame_ancestors: str = DEFAULT_FRAME_ANCESTORS
    """The page's CSP ``frame-ancestors`` sources (who may embed it in a frame)."""
    gpumap_monitors: str = ""
    """Where the map reads the vGPU monitors (:mod:`hami_scheduler.gpumap.locate`; ``""``: no
    usage — the default here; the flag's default is :data:`DEFAULT_MONITORS`)."""
    gpumap_monitor_timeout_s: float = 2.0
    """One monitor scrape's limit, and the most a map request waits for its page's scrapes."""
    gpumap_max_age_s: float = 0.0
    """How long a map or pending answer is shared between requests (0: never — the default
    here, so tests see every change at once; the flag's default is 5 s)."""
    gpumap_dra: bool = True
    """The map shows DRA-managed GPUs (watches this driver's ResourceSlices and allocated
    ResourceClaims; :mod:`hami_scheduler.cache.dra`)."""

    def __post_init__(self) -> None:
        ServingSettings.__post_init__(self)
        if self.filter_mode not in FILTER_MODES:
            raise ValueError(f"--filter-mode must be one of {', '.join(FILTER_MODES)}")
        for name, value in (
            ("--node-lock-timeout", self.node_lock_timeout_s),
            ("--handshake-timeout", self.handshake_timeout_s),
            ("--handshake-interval", self.handshake_interval_s),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive")
        if self.gpumap_bind_address:
            parse_bind(self.gpumap_bind_address)
        sources = self.gpumap_frame_ancestors
        if not sources.strip() or any(c in sources for c in ";,\r\n\t\x00"):
            raise ValueError(
                "--gpumap-frame-ancestors must be CSP sources separated by spaces "
                "(e.g. 'none', 'self', https://portal.example.com), without ';' or ','"
            )
        parse_monitor_source(self.gpumap_monitors)
        if not 0 < self.gpumap_monitor_timeout_s <= 60:
            raise ValueError("--gpumap-monitor-timeout must be above 0 and at most 1m")
        if not 0 <= self.gpumap_max_age_s <= 300:
            raise ValueError("--gpumap-max-age must be between 0 and 5m")
        if self.node_lock_retry_timeout_s < 0:
            raise ValueError("--node-lock-retry-timeout must not be negative")
        if not 0 <= self.node_lock_wait_s < EXTENDER_HTTP_TIMEOUT_S:
            raise ValueError(
                f"--node-lock-wait must be at least 0 and below "
                f"{format_go_duration(EXTENDER_HTTP_TIMEOUT_S)}: kube-scheduler gives up on a "
                f"bind after the extender's httpTimeout (30s in our KubeSchedulerConfiguration), "
                f"and after the wait the bind still needs its lock write and the Binding"
            )

    @property
    def component(self) -> str:
        """The Events' source component."""
        return self.scheduler_name or DEFAULT_COMPONENT


_FLAGS: Final = (
    *serving_flags(
        default_bind=DEFAULT_HTTP_BIND, metrics_bind=DEFAULT_METRICS_BIND, what="extender"
    ),
    Flag(("--kube-qps",), "kube_qps", "0", "API requests per second (0: unlimited)", number),
    Flag(("--kube-burst",), "kube_burst", "10", "API request burst", non_negative),
    Flag(("--kube-timeout",), "kube_timeout", "30s", "timeout of one API request", duration),
    Flag(("--scheduler-name",), "scheduler_name", "", "scheduler name (Events' source)"),
    Flag(
        ("--node-scheduler-policy",),
        "node_scheduler_policy",
        "binpack",
        "default node policy",
        choices=("binpack", "spread"),
    ),
    Flag(
        ("--gpu-scheduler-policy",),
        "gpu_scheduler_policy",
        "spread",
        "default GPU policy: binpack, spread, topology-aware, mutex, numa or a chain",
    ),
    Flag(
        ("--node-label-selector",),
        "node_label_selector",
        "",
        "only nodes matching this label selector are registered (k=v,k2=v2)",
    ),
    Flag(("--node-lock-timeout",), "node_lock_timeout", "5m", "node lock expiry", duration),
    Flag(
        ("--node-lock-retry-timeout",),
        "node_lock_retry_timeout",
        "28s",
        "how long PodGroup members retry a contended node lock (0 disables)",
        duration,
    ),
    Flag(
        ("--node-lock-wait",),
        "node_lock_wait",
        "20s",
        "how long a bind waits, in line per node, for a node lock another pod still needs "
        "(below the extender httpTimeout, 30s; 0: fail at once)",
        duration,
    ),
    Flag(
        ("--leader-elect",),
        "leader_elect",
        "false",
        "only the Lease holder serves",
        parse_bool,
        True,
    ),
    Flag(
        ("--leader-elect-mode",),
        "leader_elect_mode",
        "follow",
        "follow kube-scheduler's Lease, or campaign on it",
        choices=tuple(LEADER_MODES),
    ),
    Flag(
        ("--leader-elect-resource-name",),
        "leader_elect_resource_name",
        "",
        "Lease name (default: the scheduler name, else hami-scheduler)",
    ),
    Flag(
        ("--leader-elect-resource-namespace",),
        "leader_elect_resource_namespace",
        "",
        "Lease namespace (default: POD_NAMESPACE, else kube-system)",
    ),
    Flag(
        ("--leader-elect-identity",),
        "leader_elect_identity",
        "",
        "this replica's identity (default: the host name)",
    ),
    Flag(
        ("--leader-elect-lease-duration",),
        "leader_elect_lease_duration",
        "15s",
        "Lease duration",
        duration,
    ),
    Flag(
        ("--leader-elect-renew-deadline",),
        "leader_elect_renew_deadline",
        "10s",
        "renew deadline (campaign mode)",
        duration,
    ),
    Flag(
        ("--leader-elect-retry-period",),
        "leader_elect_retry_period",
        "2s",
        "retry period (campaign mode)",
        duration,
    ),
    Flag(
        ("--filter-mode",),
        "filter_mode",
        "single",
        "single: filter picks the node (HAMi); all: filter keeps every fitting node, "
        "prioritize scores them and bind writes the decision",
        choices=tuple(FILTER_MODES),
    ),
    Flag(
        ("--gpumap-bind-address",),
        "gpumap_bind_address",
        DEFAULT_GPUMAP_BIND,
        "where the read-only GPU map page and its JSON API are served (empty: disabled)",
    ),
    Flag(
        ("--gpumap-frame-ancestors",),
        "gpumap_frame_ancestors",
        DEFAULT_FRAME_ANCESTORS,
        "CSP frame-ancestors of the GPU map page: who may embed it ('none': nobody)",
    ),
    Flag(
        ("--gpumap-monitors",),
        "gpumap_monitors",
        DEFAULT_MONITORS,
        "where the GPU map reads each node's vGPU monitor for usage: a URL template with "
        "{node_ip} and {node}, or <namespace>/<service> whose EndpointSlices locate them "
        "(empty: no usage)",
    ),
    Flag(
        ("--gpumap-monitor-timeout",),
        "gpumap_monitor_timeout",
        "2s",
        "the GPU map's limit for one monitor scrape (and its wait for a page's scrapes)",
        duration,
    ),
    Flag(
        ("--gpumap-max-age",),
        "gpumap_max_age",
        "5s",
        "how long the GPU map shares a map or pending answer between the requests asking it "
        "(each page says when it was made; 0: build every answer)",
        duration,
    ),
    Flag(
        ("--gpumap-dra",),
        "gpumap_dra",
        "true",
        "show DRA-managed GPUs (driver gpu.hami.io) on the GPU map: watches ResourceSlices "
        "and ResourceClaims (RBAC get/list/watch); refused (404/403) it is logged once and "
        "the map goes on without them",
        parse_bool,
        True,
    ),
    Flag(
        ("--handshake-timeout",),
        "handshake_timeout",
        "5m",
        "a vendor that has not reported within this long is unavailable",
        duration,
    ),
    Flag(
        ("--handshake-interval",),
        "handshake_interval",
        "15s",
        "how often node handshakes are checked and requested",
        duration,
    ),
)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The flag parser; defaults come from ``environ`` (``HAMI_*``) when set there."""
    return flags.build_parser(
        prog="hami-scheduler",
        description="Kubernetes scheduler extender for GPU sharing (HAMi protocol).",
        flags=(*_FLAGS, *flags.DEVICE_FLAGS),
        environ=environ,
    )


def _leader_settings(args: argparse.Namespace, env: Mapping[str, str]) -> LeaderElectSettings:
    name = args.leader_elect_resource_name or args.scheduler_name or DEFAULT_COMPONENT
    namespace = args.leader_elect_resource_namespace or env.get("POD_NAMESPACE") or "kube-system"
    identity = args.leader_elect_identity or env.get("POD_NAME") or socket.gethostname()
    settings = LeaderElectSettings(
        enabled=args.leader_elect,
        mode=cast("LeaderMode", args.leader_elect_mode),
        namespace=namespace,
        name=name,
        identity=identity,
        lease_duration_s=args.leader_elect_lease_duration,
        renew_deadline_s=args.leader_elect_renew_deadline,
        retry_period_s=args.leader_elect_retry_period,
    )
    if settings.enabled and not (
        settings.lease_duration_s > settings.renew_deadline_s > 1.2 * settings.retry_period_s > 0
    ):
        raise ValueError(
            "leader election needs lease duration > renew deadline > 1.2 × retry period > 0"
        )
    return settings


def _settings(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    config, vendors = flags.devices_from_flags(args)
    selector = format_selector(
        parse_selector_string(args.node_label_selector, annotation="--node-label-selector")
    )
    return Settings(
        **serving_values(args),
        kube=kube_settings(
            args,
            user_agent=DEFAULT_COMPONENT,
            qps=args.kube_qps,
            burst=max(args.kube_burst, 1),
            request_timeout_s=args.kube_timeout if args.kube_timeout > 0 else 30.0,
        ),
        device_config=config,
        scheduler_name=args.scheduler_name,
        node_policy=parse_node_policy(args.node_scheduler_policy, key="--node-scheduler-policy"),
        gpu_policy=parse_gpu_policy(args.gpu_scheduler_policy, key="--gpu-scheduler-policy"),
        node_label_selector=selector,
        node_lock_timeout_s=args.node_lock_timeout,
        node_lock_retry_timeout_s=args.node_lock_retry_timeout,
        node_lock_wait_s=args.node_lock_wait,
        leader=_leader_settings(args, env),
        filter_mode=cast("FilterMode", args.filter_mode),
        handshake_timeout_s=args.handshake_timeout,
        handshake_interval_s=args.handshake_interval,
        vendors=vendors,
        pod_name=env.get("POD_NAME", ""),
        pod_namespace=env.get("POD_NAMESPACE", ""),
        gpumap_bind_address=args.gpumap_bind_address,
        gpumap_frame_ancestors=args.gpumap_frame_ancestors,
        gpumap_monitors=args.gpumap_monitors,
        gpumap_monitor_timeout_s=args.gpumap_monitor_timeout,
        gpumap_max_age_s=args.gpumap_max_age,
        gpumap_dra=args.gpumap_dra,
    )


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags (and ``HAMI_*`` variables); exits with a usage message on invalid input."""
    env = environ or {}
    return parse_or_exit(build_parser(env), argv, lambda args: _settings(args, env))
