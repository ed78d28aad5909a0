"""Command-line flags shared by the services: a declarative flag table with ``HAMI_*`` env
defaults, Go's boolean spellings, and the device-config loading every service does the same way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hami_protocol.config import DeviceConfig, device_config_from_mapping
from hami_protocol.errors import ConfigError

ENV_PREFIX = "HAMI_"


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: its spellings (the first names its env var), destination, default and type."""

    names: tuple[str, ...]
    dest: str
    default: Any
    help: str
    kind: Callable[[str], Any] | None = None
    is_bool: bool = False
    choices: tuple[str, ...] | None = None


def env_name(flag: str, prefix: str = ENV_PREFIX) -> str:
    """``--node-lock-timeout`` → ``HAMI_NODE_LOCK_TIMEOUT``."""
    return prefix + flag.lstrip("-").upper().replace("-", "_")


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool`` spellings (plus yes/no/on/off)."""
    lowered = text.strip().lower()
    if lowered in {"1", "t", "true", "yes", "y", "on"}:
        return True
    if lowered in {"0", "f", "false", "no", "n", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def non_negative(text: str) -> int:
    """An integer ≥ 0, for argparse."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def build_parser(
    *,
    prog: str,
    description: str,
    flags: Sequence[Flag],
    environ: Mapping[str, str] | None = None,
) -> argparse.ArgumentParser:
    """The parser for ``flags``; a flag's default comes from its ``HAMI_*`` env var when set."""
    env = environ or {}
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for flag in flags:
        variable = env_name(flag.names[0])
        default = env.get(variable, flag.default)
        help_text = f"{flag.help} (env {variable}; default {flag.default!r})"
        if flag.is_bool:
            parser.add_argument(
                *flag.names,
                dest=flag.dest,
                nargs="?",
                const="true",
                default=default,
                type=parse_bool,
                metavar="BOOL",
                help=help_text,
            )
        else:
            parser.add_argument(
                *flag.names,
                dest=flag.dest,
                default=default,
                type=flag.kind or str,
                choices=flag.choices,
                help=help_text,
            )
    return parser


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
    Flag(("--device-config-file",), "device_config_file", None, "device-config.yaml"),
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


def load_device_config(path: str | None, nvidia_from_flags: Mapping[str, object]) -> DeviceConfig:
    """The flags' ``nvidia`` values, overridden by whatever the config file at ``path`` sets.

    That is HAMi's precedence: values in device-config.yaml win over the resource-name and
    default flags.
    """
    document: dict[str, Any] = {}
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("--device-config-file", path, f"cannot read: {exc}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError("--device-config-file", path, f"not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("--device-config-file", path, "expected a YAML mapping")
        document = dict(loaded or {})
    file_nvidia = document.get("nvidia") or {}
    if not isinstance(file_nvidia, dict):
        raise ConfigError("nvidia", file_nvidia, "expected a mapping")
    document["nvidia"] = {**nvidia_from_flags, **file_nvidia}
    return device_config_from_mapping(document)
