"""Flags and environment → one frozen :class:`Settings` (the flag table is
:mod:`hami_deviceplugin.cli_flags`).

Where the node's settings come from, later wins:

1. built-in defaults (the values HAMi's chart renders: split 10, scaling 1, ...);
2. ``--config-file``: the ``nvidia`` section of ``device-config.yaml``;
3. ``--device-split-count``, ``--device-memory-scaling``, ``--device-cores-scaling``,
   ``--disable-core-limit``, ``--resource-name`` when given (flag or env).  HAMi's plugin accepts
   these flags and ignores them; here they work, overriding the file, so one DaemonSet argument
   changes every node;
4. ``--node-config-file`` (``config.json``, default ``/config/config.json`` when that file
   exists): the entries named like this node override split count, scaling, operating mode,
   ``filterdevices``, ``enablegetpreferredallocation``, ... for this node only.

Operating modes (``operatingmode`` of the node's ``config.json`` entry): ``hami-core``; ``mig``
(dynamic MIG: the plugin creates the MIG instances the scheduler reserved, see
:mod:`hami_deviceplugin.gpu.mig`); ``mps`` (registered as ``mode: "mps"``, allocated exactly as
hami-core — HAMi has no working MPS path either).  Refused loudly rather than ignored: a MIG
strategy other than ``none`` (flag or ``migstrategy``; the ``single``/``mixed`` strategies of
NVIDIA's plugin advertise MIG devices as resources, which this plugin does not), a device-list
strategy other than ``envvar``, unknown flags, unreadable config files.  Health checks follow the
kubelet device plugin's ``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, cast

from hami_deviceplugin.cli_flags import (
    DEFAULT_CDI_DIR,
    DEFAULT_HOOK_PATH,
    DEFAULT_METRICS_BIND,
    DEFAULT_MIG_LOCK_FILE,
    DEFAULT_NODE_CONFIG_FILE,
    DEFAULT_RDMA_RESOURCE,
    FLAG_TO_CONFIG,
    FLAGS,
    build_parser,
)
from hami_deviceplugin.gpu.backends.nvml import HealthChecks, parse_health_env
from hami_kube.config import KubeSettings
from hami_kubelet_api.constants import (
    KUBELET_DIR,
    KUBELET_SOCKET,
    PLUGINS_DIR_NAME,
    POD_RESOURCES_SOCKET,
)
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import DeviceConfig, MigProfileAllow, parse_device_config
from hami_protocol.config.node import (
    OPERATING_MODES,
    NodeSettings,
    effective_node_config,
    parse_node_configs,
)
from hami_protocol.dra_driver import DRIVER
from hami_protocol.errors import ConfigError
from hami_runtime import flags
from hami_runtime.lifecycle import DEFAULT_GRACE_S
from hami_runtime.logs import LOG_FORMATS, LogFormat
from hami_runtime.sites import parse_bind

__all__ = [
    "BackendKind",
    "Mode",
    "NicSourceKind",
    "Settings",
    "parse_settings",
    "socket_name_for",
]

BackendKind = Literal["nvml", "fake"]
Mode = Literal["device-plugin", "dra"]
NicSourceKind = Literal["sysfs", "fake"]
_MAX_SOCKET_PATH: Final = 107


def socket_name_for(resource_name: str) -> str:
    """``nvidia.com/gpu`` → ``nvidia-gpu.sock`` (HAMi's socket name for its resource)."""
    domain, _, short = resource_name.partition("/")
    vendor = domain.split(".", 1)[0] or "hami"
    return f"{vendor}-{(short or domain).replace('/', '-')}.sock"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service needs to start; built by :func:`parse_settings`."""

    node_name: str
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    """``device-config.yaml`` with the explicit flags applied (resource name, core limit)."""
    node: NodeSettings = field(default_factory=NodeSettings)
    """This node's effective settings (split count, scaling, filters, ...)."""
    kubelet_socket: Path = Path(KUBELET_SOCKET)
    pod_resources_socket: Path | None = Path(POD_RESOURCES_SOCKET)
    """The kubelet's pod-resources API; None: pods are identified without it."""
    socket_name: str = ""
    """The plugin's socket file in the kubelet's plugin dir ("" = derived from the resource)."""
    device_backend: BackendKind = "nvml"
    fake_devices: Path | None = None
    fake_mig_state: Path | None = None
    """The fake backend's MIG layout file (None: beside the fake devices file)."""
    sysfs_root: Path = Path("/sys")
    hook_path: str = DEFAULT_HOOK_PATH
    host_root: Path | None = Path("/")
    """Host paths (HOOK_PATH files, per-container dirs) are read and created under this root;
    ``None`` touches no host files."""
    kube: KubeSettings = field(default_factory=KubeSettings)
    metrics_bind_address: str = DEFAULT_METRICS_BIND
    log_format: LogFormat = "json"
    log_level: str = "info"
    shutdown_grace_s: float = DEFAULT_GRACE_S
    """SIGTERM → exit within this long (``--shutdown-grace-period``)."""
    health: HealthChecks = field(default_factory=HealthChecks)
    fail_on_init_error: bool = True
    enable_topology_score: bool = False
    """Compute GPU pair scores and write ``hami.io/node-nvidia-score``."""
    advertise_capacity_totals: bool = False
    """Keep ``hami.io/nvidia-memory`` / ``hami.io/nvidia-cores`` in node status capacity."""
    register_interval_s: float = 30.0
    register_retry_interval_s: float = 5.0
    kubelet_poll_interval_s: float = 1.0
    fake_poll_interval_s: float = 1.0
    allocate_timeout_s: float = 3.0
    config_warnings: tuple[str, ...] = ()
    enable_rdma: bool | None = None
    """Serve the RDMA plugin: True, False, or None = when NICs are found at start."""
    rdma_resource_name: str = DEFAULT_RDMA_RESOURCE
    rdma_socket_name: str = ""
    """The RDMA plugin's socket file ("" = derived from its resource)."""
    rdma_discovery: NicSourceKind | None = None
    """Where NICs come from; None = ``fake`` with the fake backend, else ``sysfs``."""
    rdma_poll_interval_s: float = 10.0
    mig_lock_file: Path = Path(DEFAULT_MIG_LOCK_FILE)
    """Exists while the plugin changes the MIG layout (the vGPU monitor pauses feedback)."""
    mig_reconcile_interval_s: float = 5.0
    """How often instances no live pod references are looked for (``mig`` mode)."""
    mode: Mode = "device-plugin"
    """``dra``: serve the node's GPUs as a DRA kubelet plugin instead (docs/dra.md)."""
    kubelet_dir: Path = Path(KUBELET_DIR)
    cdi_dir: Path = Path(DEFAULT_CDI_DIR)
    dra_state_dir_path: Path | None = None
    """The DRA checkpoint's directory (None: ``<kubelet dir>/plugins/gpu.hami.io``)."""
    slice_resync_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ValueError("--node-name (or NODE_NAME) is required")
        if self.node.operating_mode not in OPERATING_MODES:
            raise ValueError(
                f"operating mode {self.node.operating_mode!r} is not supported "
                f"(one of {', '.join(OPERATING_MODES)})"
            )
        if self.node.mig_strategy not in (None, "none"):
            raise ValueError(f"migstrategy {self.node.mig_strategy!r} is not supported (only none)")
        if self.device_backend == "fake" and self.fake_devices is None:
            raise ValueError("--device-backend fake needs --fake-devices FILE")
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
        parse_bind(self.metrics_bind_address)
        for name in (
            "register_interval_s",
            "register_retry_interval_s",
            "kubelet_poll_interval_s",
            "fake_poll_interval_s",
            "allocate_timeout_s",
            "rdma_poll_interval_s",
            "mig_reconcile_interval_s",
            "slice_resync_interval_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not self.hook_path.startswith("/"):
            raise ValueError(f"HOOK_PATH must be absolute, got {self.hook_path!r}")
        if len(str(self.socket_path).encode()) > _MAX_SOCKET_PATH:
            raise ValueError(f"plugin socket path {self.socket_path} is too long for a socket")
        if self.mode == "dra":
            if self.node.operating_mode == "mig":
                raise ValueError("--mode dra does not support operating mode 'mig'")
        else:
            self._check_rdma()

    @property
    def dra_state_dir(self) -> Path:
        return self.dra_state_dir_path or self.kubelet_dir / PLUGINS_DIR_NAME / DRIVER

    def _check_rdma(self) -> None:
        if "/" not in self.rdma_resource_name.strip("/"):
            raise ValueError(
                f"--rdma-resource-name {self.rdma_resource_name!r} needs a domain "
                "(like koordinator.sh/rdma)"
            )
        if self.rdma_resource_name == self.resource_name:
            raise ValueError("the RDMA resource name must differ from the GPU resource name")
        if self.rdma_socket_path == self.socket_path:
            raise ValueError(f"the GPU and RDMA plugins cannot share {self.socket_path}")
        if len(str(self.rdma_socket_path).encode()) > _MAX_SOCKET_PATH:
            raise ValueError(f"RDMA socket path {self.rdma_socket_path} is too long for a socket")
        if self.nic_source == "fake" and self.fake_devices is None:
            raise ValueError("--rdma-discovery fake needs --fake-devices FILE")

    @property
    def resource_name(self) -> str:
        return self.device_config.nvidia.resource_count_name

    @property
    def mig_allowlist(self) -> tuple[MigProfileAllow, ...]:
        """``nvidia.migProfileAllowlist``, or the chart's default list when none is configured
        (a ``mig`` node without one would register no GPU at all)."""
        return self.device_config.nvidia.mig_profile_allowlist or _chart_mig_allowlist()

    @property
    def disable_core_limit(self) -> bool:
        return self.device_config.nvidia.disable_core_limit

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_socket.parent

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / (self.socket_name or socket_name_for(self.resource_name))

    @property
    def rdma_socket_path(self) -> Path:
        name = self.rdma_socket_name or socket_name_for(self.rdma_resource_name)
        return self.plugin_dir / name

    @property
    def nic_source(self) -> NicSourceKind:
        if self.rdma_discovery is not None:
            return self.rdma_discovery
        return "fake" if self.device_backend == "fake" else "sysfs"


@functools.cache
def _chart_mig_allowlist() -> tuple[MigProfileAllow, ...]:
    return parse_device_config(DEFAULT_DEVICE_CONFIG_YAML).nvidia.mig_profile_allowlist


def _node_config_path(given: Mapping[str, Any]) -> str | None:
    path = given.get("node_config_file")
    if path is not None:
        return str(path) or None
    return DEFAULT_NODE_CONFIG_FILE if os.path.isfile(DEFAULT_NODE_CONFIG_FILE) else None


def _optional_path(text: str) -> Path | None:
    """``none`` (or nothing) → None."""
    return None if text.strip().lower() in {"", "none"} else Path(text)


def _enable_rdma(value: bool | str) -> bool | None:
    return None if value == "auto" else bool(value)


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags and environment; exits with a usage message on invalid input."""
    env = dict(os.environ if environ is None else environ)
    parser = build_parser()
    args = parser.parse_args(argv)
    given = flags.explicit_values(parser, args, FLAGS, env)
    value = {flag.dest: flags.default_value(flag) for flag in FLAGS} | given
    try:
        overrides = {key: given[dest] for dest, key in FLAG_TO_CONFIG.items() if dest in given}
        config = flags.load_device_config(
            given.get("config_file"), nvidia_overrides=overrides, flag="--config-file"
        )
        node_name = str(given.get("node_name") or "")
        node_path = _node_config_path(given)
        entries = (
            parse_node_configs(flags.read_flag_file(node_path, "--node-config-file"))
            if node_path
            else None
        )
        node = effective_node_config(config, entries.entries if entries else (), node_name)
        warnings = config.warnings + (entries.warnings if entries else ())
        fake = given.get("fake_devices")
        return Settings(
            node_name=node_name,
            device_config=config,
            node=node,
            kubelet_socket=Path(value["kubelet_socket"]),
            pod_resources_socket=_optional_path(str(value["pod_resources_socket"])),
            socket_name=str(given.get("socket_name") or ""),
            device_backend=cast("BackendKind", value["device_backend"]),
            fake_devices=Path(fake) if fake else None,
            fake_mig_state=Path(str(given["fake_mig_state"]))
            if given.get("fake_mig_state")
            else None,
            sysfs_root=Path(value["sysfs_root"]),
            hook_path=str(value["hook_path"]),
            host_root=_optional_path(str(value["host_root"])),
            kube=KubeSettings(
                kube_url=given.get("kube_url") or None,
                kubeconfig=given.get("kubeconfig") or None,
                user_agent="hami-deviceplugin",
            ),
            metrics_bind_address=str(value["metrics_bind_address"]),
            log_format=cast("LogFormat", value["log_format"]),
            log_level=str(value["log_level"]),
            shutdown_grace_s=float(value["shutdown_grace_period"]),
            health=parse_health_env(
                env.get("DP_DISABLE_HEALTHCHECKS"), env.get("DP_ENABLE_HEALTHCHECKS")
            ),
            fail_on_init_error=bool(value["fail_on_init_error"]),
            enable_topology_score=bool(value["enable_topology_score"]),
            advertise_capacity_totals=bool(value["advertise_capacity_totals"]),
            register_interval_s=float(value["register_interval"]),
            register_retry_interval_s=float(value["register_retry_interval"]),
            kubelet_poll_interval_s=float(value["kubelet_poll_interval"]),
            fake_poll_interval_s=float(value["fake_poll_interval"]),
            allocate_timeout_s=float(value["allocate_timeout"]),
            config_warnings=warnings,
            enable_rdma=_enable_rdma(value["enable_rdma"]),
            rdma_resource_name=str(value["rdma_resource_name"]),
            rdma_socket_name=str(given.get("rdma_socket_name") or ""),
            rdma_discovery=cast("NicSourceKind | None", given.get("rdma_discovery")),
            rdma_poll_interval_s=float(value["rdma_poll_interval"]),
            mig_lock_file=Path(value["mig_lock_file"]),
            mig_reconcile_interval_s=float(value["mig_reconcile_interval"]),
            mode=cast("Mode", value["mode"]),
            kubelet_dir=Path(value["kubelet_dir"]),
            cdi_dir=Path(value["cdi_dir"]),
            dra_state_dir_path=Path(str(given["dra_state_dir"]))
            if given.get("dra_state_dir")
            else None,
            slice_resync_interval_s=float(value["slice_resync_interval"]),
        )
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
