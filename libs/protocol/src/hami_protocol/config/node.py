"""The device plugin's per-node ``config.json`` and the settings one node ends up with.

The file (ConfigMap ``<release>-device-plugin``) looks like::

    {"nodeconfig": [{"name": "gpu-node-1", "operatingmode": "mig", "devicesplitcount": 4,
                     "filterdevices": {"uuid": ["GPU-a"], "index": [3]}}]}

:func:`parse_node_configs` validates the JSON text; :func:`effective_node_config` lays the
entries whose ``name`` equals the node over the ``nvidia`` defaults of ``device-config.yaml``.
Merging follows HAMi's ``mergo.WithOverride``: a field overrides only when the entry sets it
(an explicit ``0`` or ``false`` counts as set for the numeric and boolean node settings; an empty
``operatingmode`` or ``migstrategy`` does not).  Several entries for one node apply in file
order, later ones winning field by field.

Keys are matched case-insensitively, as Go's ``encoding/json`` does, so ``deviceSplitCount``
works as well as ``devicesplitcount``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar, cast

from hami_protocol import _fields as f
from hami_protocol.config.device import LIB_CUDA_LOG_LEVELS, DeviceConfig
from hami_protocol.errors import ConfigError

__all__ = [
    "OPERATING_MODES",
    "FilterDevices",
    "NodeConfigDocument",
    "NodeConfigEntry",
    "NodeSettings",
    "OperatingMode",
    "effective_node_config",
    "node_configs_from_mapping",
    "parse_node_configs",
]

T = TypeVar("T")

OperatingMode = Literal["hami-core", "mig", "mps"]
OPERATING_MODES: Final = ("hami-core", "mig", "mps")


@dataclass(frozen=True, slots=True)
class FilterDevices:
    """GPUs the device plugin must not register at all, by UUID or NVML index."""

    uuids: tuple[str, ...] = ()
    indexes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeConfigEntry:
    """One ``nodeconfig`` item; ``None`` means "not set here"."""

    name: str
    operating_mode: OperatingMode | None = None
    device_split_count: int | None = None
    device_memory_scaling: float | None = None
    device_core_scaling: float | None = None
    preconfigured_device_memory: int | None = None
    lib_cuda_log_level: str | None = None
    enable_numa_topology: bool | None = None
    mig_strategy: str | None = None
    """Parsed for completeness; HAMi's device plugin takes the CLI flag instead."""
    filter_devices: FilterDevices | None = None
    enable_get_preferred_allocation: bool | None = None


@dataclass(frozen=True, slots=True)
class NodeConfigDocument:
    entries: tuple[NodeConfigEntry, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """What the device plugin on one node runs with."""

    operating_mode: OperatingMode = "hami-core"
    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    preconfigured_device_memory: int = 0
    lib_cuda_log_level: str | None = "1"
    enable_numa_topology: bool = False
    mig_strategy: str | None = None
    filter_devices: FilterDevices = field(default_factory=FilterDevices)
    enable_get_preferred_allocation: bool = False


_ENTRY_KEYS: Final = (
    "name",
    "operatingmode",
    "devicesplitcount",
    "devicememoryscaling",
    "devicecorescaling",
    "preconfigureddevicememory",
    "libcudaloglevel",
    "enablenumatopology",
    "migstrategy",
    "filterdevices",
    "enablegetpreferredallocation",
)


def parse_node_configs(text: str) -> NodeConfigDocument:
    """Parse ``config.json`` text; blank text means no per-node entries."""
    if not isinstance(text, str):
        raise ConfigError("config.json", text, "expected JSON text")
    if not text.strip():
        return NodeConfigDocument()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("config.json", text, f"not valid JSON: {exc}") from None
    return node_configs_from_mapping(data)


def _lowered(data: Mapping[str, object]) -> dict[str, object]:
    return {key.lower(): value for key, value in data.items()}


def node_configs_from_mapping(data: object) -> NodeConfigDocument:
    """Validate an already-decoded ``config.json`` document (``None`` = no entries)."""
    top = _lowered(f.as_mapping(data, "config.json"))
    warnings = f.unknown_keys(top, ("nodeconfig",), "")
    entries = [
        _parse_entry(item, f.join("nodeconfig", index), warnings)
        for index, item in enumerate(f.as_list(top.get("nodeconfig"), "nodeconfig"))
    ]
    return NodeConfigDocument(entries=tuple(entries), warnings=tuple(warnings))


def _parse_entry(item: object, path: str, warnings: list[str]) -> NodeConfigEntry:
    data = _lowered(f.as_mapping(item, path))
    warnings += f.unknown_keys(data, _ENTRY_KEYS, path)
    name = f.get_str(data, "name", path, "")
    if not name:
        raise ConfigError(f.join(path, "name"), name, "every node entry needs a node name")
    mode = f.get_str(data, "operatingmode", path, "")
    if mode and mode not in OPERATING_MODES:
        raise ConfigError(
            f.join(path, "operatingmode"), mode, f"must be one of {', '.join(OPERATING_MODES)}"
        )
    return NodeConfigEntry(
        name=name,
        operating_mode=cast("OperatingMode", mode) if mode else None,
        device_split_count=f.get_opt_int(data, "devicesplitcount", path, minimum=1),
        device_memory_scaling=f.get_opt_positive_float(data, "devicememoryscaling", path),
        device_core_scaling=f.get_opt_positive_float(data, "devicecorescaling", path),
        preconfigured_device_memory=f.get_opt_int(
            data, "preconfigureddevicememory", path, maximum=f.INT64_MAX
        ),
        lib_cuda_log_level=f.get_choice(data, "libcudaloglevel", path, LIB_CUDA_LOG_LEVELS),
        enable_numa_topology=f.get_opt_bool(data, "enablenumatopology", path),
        mig_strategy=f.get_str(data, "migstrategy", path, "") or None,
        filter_devices=_parse_filter(data, path, warnings),
        enable_get_preferred_allocation=f.get_opt_bool(data, "enablegetpreferredallocation", path),
    )


def _parse_filter(
    data: Mapping[str, object], path: str, warnings: list[str]
) -> FilterDevices | None:
    raw = data.get("filterdevices")
    if raw is None:
        return None
    where = f.join(path, "filterdevices")
    filters = _lowered(f.as_mapping(raw, where))
    warnings += f.unknown_keys(filters, ("uuid", "index"), where)
    return FilterDevices(
        uuids=f.get_str_tuple(filters, "uuid", where),
        indexes=f.get_int_tuple(filters, "index", where),
    )


def effective_node_config(
    device_config: DeviceConfig,
    node_configs: Sequence[NodeConfigEntry],
    node_name: str,
) -> NodeSettings:
    """The ``nvidia`` node defaults with every entry named ``node_name`` applied in order."""
    base = device_config.nvidia.node_defaults
    settings = NodeSettings(
        device_split_count=base.device_split_count,
        device_memory_scaling=base.device_memory_scaling,
        device_core_scaling=base.device_core_scaling,
        preconfigured_device_memory=base.preconfigured_device_memory,
        lib_cuda_log_level=base.lib_cuda_log_level,
        enable_numa_topology=base.enable_numa_topology,
    )
    for entry in node_configs:
        if entry.name == node_name:
            settings = _apply(settings, entry)
    return settings


def _pick(new: T | None, old: T) -> T:
    return old if new is None else new


def _apply(settings: NodeSettings, entry: NodeConfigEntry) -> NodeSettings:
    pick = _pick
    return NodeSettings(
        operating_mode=pick(entry.operating_mode, settings.operating_mode),
        device_split_count=pick(entry.device_split_count, settings.device_split_count),
        device_memory_scaling=pick(entry.device_memory_scaling, settings.device_memory_scaling),
        device_core_scaling=pick(entry.device_core_scaling, settings.device_core_scaling),
        preconfigured_device_memory=pick(
            entry.preconfigured_device_memory, settings.preconfigured_device_memory
        ),
        lib_cuda_log_level=pick(entry.lib_cuda_log_level, settings.lib_cuda_log_level),
        enable_numa_topology=pick(entry.enable_numa_topology, settings.enable_numa_topology),
        mig_strategy=pick(entry.mig_strategy, settings.mig_strategy),
        filter_devices=pick(entry.filter_devices, settings.filter_devices),
        # mergo leaves a bool alone when the source holds false, so only true switches it on.
        enable_get_preferred_allocation=settings.enable_get_preferred_allocation
        or bool(entry.enable_get_preferred_allocation),
    )
