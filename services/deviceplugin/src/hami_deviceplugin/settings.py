"""Command-line flags and environment → one frozen :class:`Settings`.

HAMi's flag names where HAMi has them: ``--node-name`` (env ``NODE_NAME``), ``--config-file``
(``device-config.yaml``), ``--device-split-count``, ``--device-memory-scaling``,
``--device-cores-scaling``, ``--disable-core-limit``, ``--resource-name``, ``--kubelet-socket``,
``--mig-strategy``, ``--device-list-strategy``, ``--fail-on-init-error``; the env names are the
flag names upper-cased (``DEVICE_SPLIT_COUNT``, ...), ``HOOK_PATH`` for ``--hook-path``.  Ours
take ``HAMI_`` + the upper-cased name (``--fake-devices`` → ``HAMI_FAKE_DEVICES``).  A flag on the
command line wins over its environment variable.

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

RDMA (a second plugin in the same process, see the README): ``--enable-rdma`` (``auto``, the
default, serves it when NICs are found at start; ``true``; ``false``), ``--rdma-resource-name``
(default ``koordinator.sh/rdma``), ``--rdma-socket-name`` (default from the resource name,
``koordinator-rdma.sock``), ``--rdma-discovery`` (``sysfs``, or ``fake``: the ``nics`` of
``--fake-devices``; default ``fake`` with the fake backend, else ``sysfs``),
``--rdma-poll-interval`` (seconds between rescans, default 10).

Refused loudly rather than ignored: an operating mode other than ``hami-core`` (MIG and MPS are
not implemented), a MIG strategy other than ``none`` (flag or ``migstrategy``), a device-list
strategy other than ``envvar``, unknown flags, unreadable config files.  Health checks follow the
kubelet device plugin's ``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, cast

import yaml

from hami_deviceplugin.backends.nvml import HealthChecks, parse_health_env
from hami_kube.config import KubeSettings
from hami_kube.deviceplugin_api.constants import KUBELET_SOCKET
from hami_kube.runtime.logs import LOG_FORMATS, LogFormat
from hami_kube.runtime.sites import parse_bind
from hami_protocol.config import DeviceConfig, device_config_from_mapping
from hami_protocol.errors import ConfigError
from hami_protocol.node_config import NodeSettings, effective_node_config, parse_node_configs
from hami_protocol.topology import RDMA_RESOURCE as _RDMA_RESOURCE

__all__ = [
    "DEFAULT_HOOK_PATH",
    "DEFAULT_METRICS_BIND",
    "DEFAULT_NODE_CONFIG_FILE",
    "DEFAULT_RDMA_RESOURCE",
    "BackendKind",
    "NicSourceKind",
    "Settings",
    "build_parser",
    "parse_settings",
    "socket_name_for",
]

BackendKind = Literal["nvml", "fake"]
NicSourceKind = Literal["sysfs", "fake"]
DEFAULT_HOOK_PATH: Final = "/usr/local"
DEFAULT_RDMA_RESOURCE: Final = _RDMA_RESOURCE
DEFAULT_METRICS_BIND: Final = ":9397"
DEFAULT_NODE_CONFIG_FILE: Final = "/config/config.json"
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
    socket_name: str = ""
    """The plugin's socket file in the kubelet's plugin dir ("" = derived from the resource)."""
    device_backend: BackendKind = "nvml"
    fake_devices: Path | None = None
    sysfs_root: Path = Path("/sys")
    hook_path: str = DEFAULT_HOOK_PATH
    host_root: Path | None = Path("/")
    """Host paths (HOOK_PATH files, per-container dirs) are read and created under this root;
    ``None`` touches no host files."""
    kube: KubeSettings = field(default_factory=KubeSettings)
    metrics_bind_address: str = DEFAULT_METRICS_BIND
    log_format: LogFormat = "json"
    log_level: str = "info"
    health: HealthChecks = field(default_factory=HealthChecks)
    fail_on_init_error: bool = True
    register_interval_s: float = 30.0
    register_retry_interval_s: float = 5.0
    kubelet_poll_interval_s: float = 1.0
    fake_poll_interval_s: float = 1.0
    usage_interval_s: float = 10.0
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

    def __post_init__(self) -> None:
        if not self.node_name:
            raise ValueError("--node-name (or NODE_NAME) is required")
        if self.node.operating_mode != "hami-core":
            raise ValueError(
                f"operating mode {self.node.operating_mode!r} is not supported "
                "(only hami-core is implemented)"
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
            "usage_interval_s",
            "allocate_timeout_s",
            "rdma_poll_interval_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not self.hook_path.startswith("/"):
            raise ValueError(f"HOOK_PATH must be absolute, got {self.hook_path!r}")
        if len(str(self.socket_path).encode()) > _MAX_SOCKET_PATH:
            raise ValueError(f"plugin socket path {self.socket_path} is too long for a socket")
        self._check_rdma()

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


# --- flags ----------------------------------------------------------------------------------------


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool`` spellings."""
    if text in {"1", "t", "T", "TRUE", "true", "True"}:
        return True
    if text in {"0", "f", "F", "FALSE", "false", "False"}:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def parse_tristate(text: str) -> bool | str:
    """``auto`` or a Go boolean."""
    if text.strip().lower() == "auto":
        return "auto"
    return parse_bool(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def _only(allowed: str, what: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text != allowed:
            raise argparse.ArgumentTypeError(
                f"{what} {text!r} is not supported by this device plugin (only {allowed!r})"
            )
        return text

    return check


@dataclass(frozen=True, slots=True)
class _Flag:
    name: str
    env: str
    help: str
    kind: Callable[[str], Any] = str
    default: Any = None
    is_bool: bool = False
    choices: tuple[str, ...] | None = None


def _ours(name: str) -> str:
    return "HAMI_" + name.upper().replace("-", "_")


def _hamis(name: str) -> str:
    return name.upper().replace("-", "_")


_FLAGS: Final = (
    _Flag("node-name", "NODE_NAME", "this node's name"),
    _Flag("config-file", "CONFIG_FILE", "device-config.yaml (the nvidia section is read)"),
    _Flag(
        "node-config-file",
        "NODE_CONFIG_FILE",
        f"per-node config.json (default {DEFAULT_NODE_CONFIG_FILE} when it exists)",
    ),
    _Flag("device-split-count", _hamis("device-split-count"), "tasks per GPU", _positive_int),
    _Flag(
        "device-memory-scaling",
        _hamis("device-memory-scaling"),
        "registered memory factor",
        _positive_float,
    ),
    _Flag(
        "device-cores-scaling",
        _hamis("device-cores-scaling"),
        "registered core factor",
        _positive_float,
    ),
    _Flag(
        "disable-core-limit",
        _hamis("disable-core-limit"),
        "set GPU_CORE_UTILIZATION_POLICY=disable in containers",
        parse_bool,
        is_bool=True,
    ),
    _Flag("resource-name", _hamis("resource-name"), "resource advertised to the kubelet"),
    _Flag(
        "kubelet-socket",
        _hamis("kubelet-socket"),
        "kubelet registration socket",
        default=KUBELET_SOCKET,
    ),
    _Flag("mig-strategy", "MIG_STRATEGY", "only 'none'", _only("none", "MIG strategy"), "none"),
    _Flag(
        "device-list-strategy",
        _hamis("device-list-strategy"),
        "only 'envvar'",
        _only("envvar", "device list strategy"),
        "envvar",
    ),
    _Flag(
        "fail-on-init-error",
        _hamis("fail-on-init-error"),
        "exit when the GPU backend cannot start (else run with no GPUs)",
        parse_bool,
        "true",
        is_bool=True,
    ),
    _Flag("hook-path", "HOOK_PATH", "where HAMi-core lives on the host", default=DEFAULT_HOOK_PATH),
    _Flag(
        "device-backend",
        _ours("device-backend"),
        "GPU backend",
        default="nvml",
        choices=("nvml", "fake"),
    ),
    _Flag("fake-devices", _ours("fake-devices"), "YAML file of the fake backend"),
    _Flag("sysfs-root", _ours("sysfs-root"), "sysfs mount point", default="/sys"),
    _Flag(
        "host-root",
        _ours("host-root"),
        "host files are under this directory; 'none' touches no host files",
        default="/",
    ),
    _Flag("socket-name", _ours("socket-name"), "plugin socket file name (default from resource)"),
    _Flag("kube-url", _ours("kube-url"), "API server URL without authentication"),
    _Flag("kubeconfig", _ours("kubeconfig"), "kubeconfig file"),
    _Flag(
        "metrics-bind-address",
        _ours("metrics-bind-address"),
        "metrics, /healthz and /readyz",
        default=DEFAULT_METRICS_BIND,
    ),
    _Flag("log-format", _ours("log-format"), "log format", default="json", choices=LOG_FORMATS),
    _Flag("log-level", _ours("log-level"), "debug, info, warning or error", default="info"),
    _Flag(
        "register-interval",
        _ours("register-interval"),
        "seconds between node registrations",
        _positive_float,
        "30",
    ),
    _Flag(
        "register-retry-interval",
        _ours("register-retry-interval"),
        "seconds before retrying a failed registration",
        _positive_float,
        "5",
    ),
    _Flag(
        "kubelet-poll-interval",
        _ours("kubelet-poll-interval"),
        "seconds between kubelet.sock checks",
        _positive_float,
        "1",
    ),
    _Flag(
        "fake-poll-interval",
        _ours("fake-poll-interval"),
        "seconds between re-reads of the fake devices file",
        _positive_float,
        "1",
    ),
    _Flag(
        "usage-interval",
        _ours("usage-interval"),
        "seconds between GPU usage samples",
        _positive_float,
        "10",
    ),
    _Flag(
        "enable-rdma",
        _ours("enable-rdma"),
        "serve the RDMA NIC plugin: auto (when NICs are found at start), true or false",
        parse_tristate,
        "auto",
        is_bool=True,
    ),
    _Flag(
        "rdma-resource-name",
        _ours("rdma-resource-name"),
        "resource the RDMA plugin advertises (100 units per NIC)",
        default=DEFAULT_RDMA_RESOURCE,
    ),
    _Flag(
        "rdma-socket-name",
        _ours("rdma-socket-name"),
        "RDMA plugin socket file name (default from its resource)",
    ),
    _Flag(
        "rdma-discovery",
        _ours("rdma-discovery"),
        "where RDMA NICs come from (default fake with the fake backend, else sysfs)",
        choices=("sysfs", "fake"),
    ),
    _Flag(
        "rdma-poll-interval",
        _ours("rdma-poll-interval"),
        "seconds between RDMA NIC rescans",
        _positive_float,
        "10",
    ),
    _Flag(
        "allocate-timeout",
        _ours("allocate-timeout"),
        "deadline of one Allocate, API calls included",
        _positive_float,
        "3",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The flag parser.  Defaults are ``None`` so explicit flags can be told apart."""
    parser = argparse.ArgumentParser(
        prog="hami-deviceplugin",
        description="Kubelet device plugin and node registration for shared GPUs.",
    )
    for flag in _FLAGS:
        shown = "" if flag.default is None else f"; default {flag.default!r}"
        help_text = f"{flag.help} (env {flag.env}{shown})"
        if flag.is_bool:
            parser.add_argument(
                f"--{flag.name}",
                nargs="?",
                const="true",
                default=None,
                type=flag.kind,
                metavar="BOOL",
                help=help_text,
            )
        else:
            parser.add_argument(
                f"--{flag.name}",
                default=None,
                type=flag.kind,
                choices=flag.choices,
                help=help_text,
            )
    return parser


def _explicit(
    args: argparse.Namespace, environ: Mapping[str, str], parser: argparse.ArgumentParser
) -> dict[str, Any]:
    """Every flag given on the command line or through its environment variable, converted."""
    given: dict[str, Any] = {}
    for flag in _FLAGS:
        dest = flag.name.replace("-", "_")
        value = getattr(args, dest)
        if value is None and flag.env in environ:
            text = environ[flag.env]
            try:
                value = flag.kind(text)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                parser.error(f"{flag.env}={text!r}: {exc}")
            if flag.choices is not None and value not in flag.choices:
                parser.error(f"{flag.env}={text!r}: choose from {', '.join(flag.choices)}")
        if value is not None:
            given[dest] = value
    return given


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(what, path, f"cannot read: {exc}") from None


def load_device_config(path: str | None, overrides: Mapping[str, Any]) -> DeviceConfig:
    """``device-config.yaml`` (defaults when no file) with ``overrides`` laid over ``nvidia``."""
    document: dict[str, Any] = {}
    if path:
        text = _read(path, "--config-file")
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError("--config-file", path, f"not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("--config-file", path, "expected a YAML mapping")
        document = dict(loaded or {})
    nvidia = document.get("nvidia") or {}
    if not isinstance(nvidia, dict):
        raise ConfigError("nvidia", nvidia, "expected a mapping")
    document["nvidia"] = {**nvidia, **overrides}
    return device_config_from_mapping(document)


_FLAG_TO_CONFIG: Final = {
    "device_split_count": "deviceSplitCount",
    "device_memory_scaling": "deviceMemoryScaling",
    "device_cores_scaling": "deviceCoreScaling",
    "disable_core_limit": "disableCoreLimit",
    "resource_name": "resourceCountName",
}


def _node_config_path(given: Mapping[str, Any]) -> str | None:
    path = given.get("node_config_file")
    if path is not None:
        return str(path) or None
    return DEFAULT_NODE_CONFIG_FILE if os.path.isfile(DEFAULT_NODE_CONFIG_FILE) else None


def _host_root(text: str) -> Path | None:
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
    given = _explicit(args, env, parser)

    def pick(name: str) -> Any:
        if name in given:
            return given[name]
        flag = next(f for f in _FLAGS if f.name.replace("-", "_") == name)
        return None if flag.default is None else flag.kind(flag.default)

    try:
        overrides = {key: given[flag] for flag, key in _FLAG_TO_CONFIG.items() if flag in given}
        config = load_device_config(given.get("config_file"), overrides)
        node_name = str(given.get("node_name") or "")
        node_path = _node_config_path(given)
        entries = parse_node_configs(_read(node_path, "--node-config-file")) if node_path else None
        node = effective_node_config(config, entries.entries if entries else (), node_name)
        warnings = config.warnings + (entries.warnings if entries else ())
        fake = given.get("fake_devices")
        return Settings(
            node_name=node_name,
            device_config=config,
            node=node,
            kubelet_socket=Path(pick("kubelet_socket")),
            socket_name=str(given.get("socket_name") or ""),
            device_backend=cast("BackendKind", pick("device_backend")),
            fake_devices=Path(fake) if fake else None,
            sysfs_root=Path(pick("sysfs_root")),
            hook_path=str(pick("hook_path")),
            host_root=_host_root(str(pick("host_root"))),
            kube=KubeSettings(
                kube_url=given.get("kube_url") or None,
                kubeconfig=given.get("kubeconfig") or None,
                user_agent="hami-deviceplugin",
            ),
            metrics_bind_address=str(pick("metrics_bind_address")),
            log_format=cast("LogFormat", pick("log_format")),
            log_level=str(pick("log_level")),
            health=parse_health_env(
                env.get("DP_DISABLE_HEALTHCHECKS"), env.get("DP_ENABLE_HEALTHCHECKS")
            ),
            fail_on_init_error=bool(pick("fail_on_init_error")),
            register_interval_s=float(pick("register_interval")),
            register_retry_interval_s=float(pick("register_retry_interval")),
            kubelet_poll_interval_s=float(pick("kubelet_poll_interval")),
            fake_poll_interval_s=float(pick("fake_poll_interval")),
            usage_interval_s=float(pick("usage_interval")),
            allocate_timeout_s=float(pick("allocate_timeout")),
            config_warnings=warnings,
            enable_rdma=_enable_rdma(pick("enable_rdma")),
            rdma_resource_name=str(pick("rdma_resource_name")),
            rdma_socket_name=str(given.get("rdma_socket_name") or ""),
            rdma_discovery=cast("NicSourceKind | None", given.get("rdma_discovery")),
            rdma_poll_interval_s=float(pick("rdma_poll_interval")),
        )
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
