"""Command-line flags shared by the services: a declarative flag table with environment
variables (``HAMI_*`` unless a flag names its own), the value converters (Go's boolean spellings,
Go durations, bounded numbers), the two ways a table becomes an argparse parser, and the
device-config loading every service does the same way.

Two ways to combine flags with their environment variables:

* :func:`build_parser`: a set variable becomes the flag's default, so the parsed namespace holds
  every flag's value (the scheduler and the webhook);
* :func:`build_explicit_parser` with :func:`explicit_values`: only the flags given on the
  command line or through their variable, so a caller can let them win over a config file
  while the built-in defaults (:func:`default_value`) lose to it (the device plugin).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hami_protocol.config.device import DeviceConfig, device_config_from_mapping
from hami_protocol.durations import parse_go_duration
from hami_protocol.errors import ConfigError
from hami_protocol.vendor.table import Vendor, vendors_from_config
from hami_runtime.logs import LOG_FORMATS

T = TypeVar("T")

ENV_PREFIX = "HAMI_"
DEVICE_CONFIG_FLAG = "--device-config-file"


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: its spellings, destination, default, help and type.

    ``env`` names its environment variable; empty means ``HAMI_`` plus the first spelling
    (:func:`env_name`).  A boolean flag's type is :func:`parse_bool` unless ``kind`` says else.
    """

    names: tuple[str, ...]
    dest: str
    default: Any
    help: str
    kind: Callable[[str], Any] | None = None
    is_bool: bool = False
    choices: tuple[str, ...] | None = None
    env: str = ""


def env_name(flag: str, prefix: str = ENV_PREFIX) -> str:
    """``--node-lock-timeout`` → ``HAMI_NODE_LOCK_TIMEOUT``."""
    return prefix + flag.lstrip("-").upper().replace("-", "_")


def flag_env(flag: Flag) -> str:
    """The environment variable ``flag`` is read from."""
    return flag.env or env_name(flag.names[0])


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool`` spellings (plus yes/no/on/off)."""
    lowered = text.strip().lower()
    if lowered in {"1", "t", "true", "yes", "y", "on"}:
        return True
    if lowered in {"0", "f", "false", "no", "n", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


# --- value converters (an argparse ``type``; a bad value exits with status 2 naming the flag) ----


def _read(text: str, kind: Callable[[str], T], what: str) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {what} {text!r}") from None


def non_negative(text: str) -> int:
    """An integer ≥ 0."""
    value = _read(text, int, "integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer ≥ 1."""
    value = _read(text, int, "integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def number(text: str) -> float:
    """Any finite number."""
    value = _read(text, float, "number")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid number {text!r}")
    return value


def positive_number(text: str) -> float:
    """A finite number > 0."""
    value = _read(text, float, "number")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def duration(text: str) -> float:
    """A Go duration (``5m``, ``30s``, ``1h30m``; a bare number is seconds) in seconds."""
    try:
        return parse_go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_duration(text: str) -> float:
    """A Go duration > 0, in seconds."""
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return seconds


def _converter(flag: Flag) -> Callable[[str], Any]:
    if flag.kind is not None:
        return flag.kind
    return parse_bool if flag.is_bool else str


def default_value(flag: Flag) -> Any:
    """The flag's built-in default converted as a given value would be (``None`` stays)."""
    return None if flag.default is None else _converter(flag)(flag.default)


def _parser(
    *, prog: str, description: str, flags: Sequence[Flag], default: Callable[[Flag], Any]
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag in flags:
        shown = "" if flag.default is None else f"; default {flag.default!r}"
        options: dict[str, Any] = {
            "dest": flag.dest,
            "default": default(flag),
            "type": _converter(flag),
            "help": f"{flag.help} (env {flag_env(flag)}{shown})",
        }
        if flag.is_bool:
            options |= {"nargs": "?", "const": "true", "metavar": "BOOL"}
        else:
            options["choices"] = flag.choices
        parser.add_argument(*flag.names, **options)
    return parser


def build_parser(
    *,
    prog: str,
    description: str,
    flags: Sequence[Flag],
    environ: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """The parser for ``flags``; a flag's default comes from its env var when set."""
    env = environ or {}
    return _parser(
        prog=prog,
        description=description,
        flags=flags,
        default=lambda flag: env.get(flag_env(flag), flag.default),
    )


def build_explicit_parser(
    *, prog: str, description: str, flags: Sequence[Flag]
) -> argparse.ArgumentParser:
    """The parser for ``flags`` with every default ``None``, for :func:`explicit_values`.

    The help still shows each flag's built-in default.
    """
    return _parser(prog=prog, description=description, flags=flags, default=lambda _: None)


def explicit_values(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    flags: Sequence[Flag],
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """Every flag given on the command line or else through its env var, converted, by dest.

    ``args`` comes from ``parser`` (:func:`build_explicit_parser`).  A variable that does not
    convert, or is not one of the flag's choices, exits through ``parser.error`` naming it.
    """
    given: dict[str, Any] = {}
    for flag in flags:
        value = getattr(args, flag.dest)
        variable = flag_env(flag)
        if value is None and variable in environ:
            text = environ[variable]
            try:
                value = _converter(flag)(text)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                parser.error(f"{variable}={text!r}: {exc}")
            if flag.choices is not None and value not in flag.choices:
                parser.error(f"{variable}={text!r}: choose from {', '.join(flag.choices)}")
        if value is not None:
            given[flag.dest] = value
    return given


def https_flags(*, default_bind: str, what: str) -> tuple[Flag, ...]:
    """Where a service serves HTTP(S) (HAMi's ``--http_bind``) and its TLS pair."""
    return (
        Flag(("--http_bind", "--http-bind"), "http_bind", default_bind, f"{what} listen address"),
        Flag(("--cert_file", "--cert-file"), "cert_file", None, "TLS certificate (PEM)"),
        Flag(("--key_file", "--key-file"), "key_file", None, "TLS private key (PEM)"),
    )


def process_flags(*, metrics_bind: str) -> tuple[Flag, ...]:
    """What every service process has: its metrics/health address, logs and API server access."""
    return (
        Flag(
            ("--metrics-bind-address",),
            "metrics_bind_address",
            metrics_bind,
            "metrics, /healthz and /readyz listen address",
        ),
        Flag(("--log-format",), "log_format", "json", "log line format", choices=LOG_FORMATS),
        Flag(("--log-level",), "log_level", "info", "debug, info, warning or error"),
        Flag(("--kube-url",), "kube_url", None, "API server URL without authentication"),
        Flag(("--kubeconfig",), "kubeconfig", None, "kubeconfig file"),
        Flag(
            ("--shutdown-grace-period",),
            "shutdown_grace_period",
            "10s",
            "after SIGTERM, stop within this long even when a peer hangs (keep it below the "
            "pod's terminationGracePeriodSeconds)",
            positive_duration,
        ),
    )


DEVICE_FLAGS: tuple[Flag, ...] = (
    Flag(("--resource-name",), "resource_name", "nvidia.com/gpu", "NVIDIA count resource"),
    Flag(("--resource-mem",), "resource_mem", "nvidia.com/gpumem", "NVIDIA memory resource"),
    Flag(
        ("--resource-mem-percentage",),
        "resource_mem_percentage",
        "nvidia.com/gpumem-percentage",
        "NVIDIA memory percentage resource",
    ),
    Flag(("--resource-cores",), "resource_cores", "nvidia.com/gpucores", "NVIDIA core resource"),
    Flag(("--resource-priority",), "resource_priority", "nvidia.com/priority", "task priority"),
    Flag(("--default-mem",), "default_mem", "0", "default MiB per GPU", non_negative),
    Flag(("--default-cores",), "default_cores", "0", "default cores percent", non_negative),
    Flag(("--default-gpu",), "default_gpu", "1", "GPU count when only memory/cores", non_negative),
    Flag((DEVICE_CONFIG_FLAG,), "device_config_file", None, "device-config.yaml"),
    Flag(("--enable-ascend",), "enable_ascend", "false", "handle Ascend NPUs", parse_bool, True),
    Flag(
        ("--enable-iluvatar",), "enable_iluvatar", "false", "handle Iluvatar GPUs", parse_bool, True
    ),
)
"""HAMi's resource-name and default flags, shared by every service that parses pod requests."""


def nvidia_from_flags(args: argparse.Namespace) -> dict[str, object]:
    """The ``nvidia`` device-config keys the :data:`DEVICE_FLAGS` set."""
    return {
        "resourceCountName": args.resource_name,
        "resourceMemoryName": args.resource_mem,
        "resourceMemoryPercentageName": args.resource_mem_percentage,
        "resourceCoreName": args.resource_cores,
        "resourcePriorityName": args.resource_priority,
        "defaultMemory": args.default_mem,
        "defaultCores": args.default_cores,
        "defaultGPUNum": args.default_gpu,
    }


def devices_from_flags(
    args: argparse.Namespace, **nvidia: object
) -> tuple[DeviceConfig, tuple[Vendor, ...]]:
    """The device config the :data:`DEVICE_FLAGS` select and the vendor rows it enables.

    The file's ``nvidia`` section wins over the flags' values (HAMi's precedence); ``nvidia``
    adds keys a service takes from its own flags (the webhook's ``overwriteEnv``).
    """
    config = load_device_config(args.device_config_file, {**nvidia_from_flags(args), **nvidia})
    vendors = vendors_from_config(
        config, enable_ascend=args.enable_ascend, enable_iluvatar=args.enable_iluvatar
    )
    return config, vendors


def read_flag_file(path: str, flag: str) -> str:
    """The text of the file a flag names; a :class:`ConfigError` naming ``flag`` if unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(flag, path, f"cannot read: {exc}") from None


def load_device_config(
    path: str | None,
    nvidia_defaults: Mapping[str, object] | None = None,
    *,
    nvidia_overrides: Mapping[str, object] | None = None,
    flag: str = DEVICE_CONFIG_FLAG,
) -> DeviceConfig:
    """``device-config.yaml`` at ``path`` (built-in defaults when there is none).

    Its ``nvidia`` section is laid over ``nvidia_defaults`` and under ``nvidia_overrides``.
    HAMi's precedence passes the resource-name and default flags as ``nvidia_defaults``: the
    file wins over them.  Errors about the file name it as ``flag``.
    """
    document: dict[str, Any] = {}
    if path:
        text = read_flag_file(path, flag)
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(flag, path, f"not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(flag, path, "expected a YAML mapping")
        document = dict(loaded or {})
    file_nvidia = document.get("nvidia") or {}
    if not isinstance(file_nvidia, dict):
        raise ConfigError("nvidia", file_nvidia, "expected a mapping")
    document["nvidia"] = {**(nvidia_defaults or {}), **file_nvidia, **(nvidia_overrides or {})}
    return device_config_from_mapping(document)
