"""HAMi's ``device-config.yaml`` as frozen, validated dataclasses.

The document is the ConfigMap key ``device-config.yaml`` that the chart mounts into the scheduler
and the device plugin: one section per vendor (``nvidia``, ``cambricon``, ``hygon``, ``metax``,
``mthreads``, ``amd``, ``iluvatars``, ``vnpus``, ...).  :func:`parse_device_config` takes the
YAML *text* (no file I/O here) and returns a :class:`DeviceConfig`.

Defaults follow what the chart renders, not Go's zero values, so a document that leaves a key
out behaves like a stock installation: ``defaultGPUNum`` 1, ``memoryFactor`` 1, the standard
resource names, and ``deviceSplitCount`` **10**.  HAMi's device plugin also has a
``--device-split-count`` flag defaulting to 2, but that flag never reaches the effective
config (the YAML value is used), so 10 — the value every chart installation runs with — is the
default here.

Invalid values raise :class:`ConfigError` naming the field path (``nvidia.deviceSplitCount``).
Unknown keys are tolerated, as HAMi ignores them, and listed in ``DeviceConfig.warnings`` so a
service can log them.  Every vendor section HAMi reads is parsed and validated (``awsneuron``,
``biren``, ``enflame``, ``kunlun`` and ``vastai`` in :mod:`hami_protocol.config.vendor_blocks`).

An absent vendor section takes the chart's values: the chart renders every section, so that is
what a stock installation runs with (HAMi itself initialises an absent section with empty
resource names, which leaves that vendor inert; a vendor is switched off here by not enabling
Ascend/Iluvatar, or by naming a resource nobody requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, cast

import yaml

from hami_protocol import _fields as f
from hami_protocol.config.vendor_blocks import (
    BIREN_DEFAULTS,
    VASTAI_DEFAULTS,
    AwsNeuronConfig,
    EnflameConfig,
    KunlunConfig,
    SingleResourceConfig,
    parse_awsneuron,
    parse_enflame,
    parse_kunlun,
    parse_single_resource,
)
from hami_protocol.config.vendor_sections import (
    AMD_DEFAULTS,
    CAMBRICON_DEFAULTS,
    HYGON_DEFAULTS,
    MTHREADS_DEFAULTS,
    AscendChipConfig,
    AscendConfig,
    IluvatarChipConfig,
    MetaxConfig,
    VendorResourceConfig,
    parse_ascend,
    parse_iluvatars,
    parse_metax,
    parse_vendor_resources,
)
from hami_protocol.errors import ConfigError

__all__ = [
    "GPU_CORE_POLICIES",
    "LIB_CUDA_LOG_LEVELS",
    "AscendChipConfig",
    "AscendConfig",
    "AwsNeuronConfig",
    "DeviceConfig",
    "EnflameConfig",
    "GpuCorePolicy",
    "IluvatarChipConfig",
    "KunlunConfig",
    "MetaxConfig",
    "MigProfileAllow",
    "NodeDefaults",
    "NvidiaConfig",
    "SingleResourceConfig",
    "VendorResourceConfig",
    "device_config_from_mapping",
    "parse_device_config",
]

GpuCorePolicy = Literal["default", "force", "disable"]
GPU_CORE_POLICIES: Final = ("default", "force", "disable")
LIB_CUDA_LOG_LEVELS: Final = ("0", "1", "3", "4")
"""``LIBCUDA_LOG_LEVEL`` values HAMi-core knows: 0 error, 1 warning, 3 info, 4 debug."""


@dataclass(frozen=True, slots=True)
class NodeDefaults:
    """The NVIDIA settings a per-node ``config.json`` entry may override."""

    device_split_count: int = 10
    device_memory_scaling: float = 1.0
    device_core_scaling: float = 1.0
    preconfigured_device_memory: int = 0
    """MiB to register when NVML cannot report memory (unified-memory GPUs); 0 = unset."""
    lib_cuda_log_level: str | None = "1"
    enable_numa_topology: bool = False


@dataclass(frozen=True, slots=True)
class MigProfileAllow:
    """MIG profiles the scheduler may use on GPUs whose model contains one of ``models``."""

    models: tuple[str, ...]
    profiles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NvidiaConfig:
    resource_count_name: str = "nvidia.com/gpu"
    resource_memory_name: str | None = "nvidia.com/gpumem"
    resource_memory_percentage_name: str | None = "nvidia.com/gpumem-percentage"
    resource_core_name: str | None = "nvidia.com/gpucores"
    resource_priority_name: str | None = "nvidia.com/priority"
    overwrite_env: bool = False
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1
    disable_core_limit: bool = False
    mig_profile_allowlist: tuple[MigProfileAllow, ...] = ()
    gpu_core_policy: GpuCorePolicy = "default"
    runtime_class_name: str = ""
    node_defaults: NodeDefaults = field(default_factory=NodeDefaults)


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    cambricon: VendorResourceConfig = CAMBRICON_DEFAULTS
    hygon: VendorResourceConfig = HYGON_DEFAULTS
    metax: MetaxConfig = field(default_factory=MetaxConfig)
    mthreads: VendorResourceConfig = MTHREADS_DEFAULTS
    amd: VendorResourceConfig = AMD_DEFAULTS
    iluvatars: tuple[IluvatarChipConfig, ...] = ()
    vnpus: AscendConfig = field(default_factory=AscendConfig)
    awsneuron: AwsNeuronConfig = field(default_factory=AwsNeuronConfig)
    biren: SingleResourceConfig = BIREN_DEFAULTS
    enflame: EnflameConfig = field(default_factory=EnflameConfig)
    kunlun: KunlunConfig = field(default_factory=KunlunConfig)
    vastai: SingleResourceConfig = VASTAI_DEFAULTS
    warnings: tuple[str, ...] = ()
    """Unknown or legacy keys found while parsing (tolerated; worth a log line)."""


_NODE_KEYS: Final = (
    "deviceSplitCount",
    "deviceMemoryScaling",
    "deviceCoreScaling",
    "preConfiguredDeviceMemory",
    "libCudaLogLevel",
    "enableNumaTopology",
)
_NVIDIA_KEYS: Final = (
    "resourceCountName",
    "resourceMemoryName",
    "resourceMemoryPercentageName",
    "resourceCoreName",
    "resourcePriorityName",
    "overwriteEnv",
    "defaultMemory",
    "defaultCores",
    "defaultGPUNum",
    "memoryFactor",
    "disableCoreLimit",
    "migProfileAllowlist",
    "gpuCorePolicy",
    "runtimeClassName",
    *_NODE_KEYS,
)
_TOP_KEYS: Final = (
    "nvidia",
    "cambricon",
    "hygon",
    "metax",
    "mthreads",
    "amd",
    "iluvatars",
    "vnpus",
    "awsneuron",
    "biren",
    "enflame",
    "kunlun",
    "vastai",
)
_LEGACY_NOTES: Final = {
    "nvidia.knownMigGeometries": "legacy key nvidia.knownMigGeometries ignored; "
    "list profiles in nvidia.migProfileAllowlist instead",
    "iluvatar": "legacy section iluvatar ignored; list chips under iluvatars instead",
}


def parse_device_config(text: str) -> DeviceConfig:
    """Parse ``device-config.yaml`` text; an empty document yields every default."""
    if not isinstance(text, str):
        raise ConfigError("device-config.yaml", text, "expected YAML text")
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ConfigError("device-config.yaml", text, f"not valid YAML: {exc}") from None
    return device_config_from_mapping(data)


def device_config_from_mapping(data: object) -> DeviceConfig:
    """Build a :class:`DeviceConfig` from an already-decoded document (``None`` = empty)."""
    top = f.as_mapping(data, "device-config.yaml")
    warnings = _with_legacy_notes(f.unknown_keys(top, _TOP_KEYS, ""))
    nvidia_data = f.as_mapping(top.get("nvidia"), "nvidia")
    warnings += _with_legacy_notes(f.unknown_keys(nvidia_data, _NVIDIA_KEYS, "nvidia"))
    section_warnings: list[str] = []
    nvidia = parse_nvidia(nvidia_data)
    cambricon = parse_vendor_resources(top, "cambricon", CAMBRICON_DEFAULTS, section_warnings)
    hygon = parse_vendor_resources(top, "hygon", HYGON_DEFAULTS, section_warnings)
    metax = parse_metax(top, section_warnings)
    mthreads = parse_vendor_resources(top, "mthreads", MTHREADS_DEFAULTS, section_warnings)
    amd = parse_vendor_resources(top, "amd", AMD_DEFAULTS, section_warnings)
    iluvatars = parse_iluvatars(top, section_warnings)
    vnpus = parse_ascend(top, section_warnings)
    awsneuron = parse_awsneuron(top, section_warnings)
    biren = parse_single_resource(top, "biren", BIREN_DEFAULTS, section_warnings)
    enflame = parse_enflame(top, section_warnings)
    kunlun = parse_kunlun(top, section_warnings)
    vastai = parse_single_resource(top, "vastai", VASTAI_DEFAULTS, section_warnings)
    return DeviceConfig(
        nvidia=nvidia,
        cambricon=cambricon,
        hygon=hygon,
        metax=metax,
        mthreads=mthreads,
        amd=amd,
        iluvatars=iluvatars,
        vnpus=vnpus,
        awsneuron=awsneuron,
        biren=biren,
        enflame=enflame,
        kunlun=kunlun,
        vastai=vastai,
        warnings=tuple(warnings + section_warnings),
    )


def _with_legacy_notes(warnings: list[str]) -> list[str]:
    notes = []
    for warning in warnings:
        key = warning.removeprefix("unknown key ")
        notes.append(_LEGACY_NOTES.get(key, warning))
    return notes


def parse_nvidia(data: Mapping[str, object]) -> NvidiaConfig:
    """The ``nvidia`` section (already a mapping) as an :class:`NvidiaConfig`."""
    path = "nvidia"
    defaults = NvidiaConfig()
    count_name = f.get_str(data, "resourceCountName", path, defaults.resource_count_name)
    if not count_name:
        raise ConfigError(f.join(path, "resourceCountName"), count_name, "must not be empty")
    policy = f.get_str(data, "gpuCorePolicy", path, "default") or "default"
    if policy not in GPU_CORE_POLICIES:
        raise ConfigError(
            f.join(path, "gpuCorePolicy"), policy, f"must be one of {', '.join(GPU_CORE_POLICIES)}"
        )
    return NvidiaConfig(
        resource_count_name=count_name,
        resource_memory_name=f.get_name(
            data, "resourceMemoryName", path, defaults.resource_memory_name
        ),
        resource_memory_percentage_name=f.get_name(
            data, "resourceMemoryPercentageName", path, defaults.resource_memory_percentage_name
        ),
        resource_core_name=f.get_name(data, "resourceCoreName", path, defaults.resource_core_name),
        resource_priority_name=f.get_name(
            data, "resourcePriorityName", path, defaults.resource_priority_name
        ),
        overwrite_env=f.get_bool(data, "overwriteEnv", path, defaults.overwrite_env),
        default_memory=f.get_int(data, "defaultMemory", path, defaults.default_memory),
        default_cores=f.get_int(data, "defaultCores", path, defaults.default_cores, maximum=100),
        default_gpu_num=f.get_int(data, "defaultGPUNum", path, defaults.default_gpu_num),
        memory_factor=f.get_int(data, "memoryFactor", path, defaults.memory_factor, minimum=1),
        disable_core_limit=f.get_bool(data, "disableCoreLimit", path, False),
        mig_profile_allowlist=_parse_mig_allowlist(data, path),
        gpu_core_policy=cast("GpuCorePolicy", policy),
        runtime_class_name=f.get_str(data, "runtimeClassName", path, ""),
        node_defaults=parse_node_defaults(data, path),
    )


def parse_node_defaults(data: Mapping[str, object], path: str) -> NodeDefaults:
    """The node-overridable keys of the ``nvidia`` section."""
    base = NodeDefaults()
    split = f.get_opt_int(data, "deviceSplitCount", path, minimum=1)
    memory_scaling = f.get_opt_positive_float(data, "deviceMemoryScaling", path)
    core_scaling = f.get_opt_positive_float(data, "deviceCoreScaling", path)
    preconfigured = f.get_opt_int(data, "preConfiguredDeviceMemory", path, maximum=f.INT64_MAX)
    log_level = f.get_choice(data, "libCudaLogLevel", path, LIB_CUDA_LOG_LEVELS)
    numa = f.get_opt_bool(data, "enableNumaTopology", path)
    return NodeDefaults(
        device_split_count=base.device_split_count if split is None else split,
        device_memory_scaling=base.device_memory_scaling
        if memory_scaling is None
        else memory_scaling,
        device_core_scaling=base.device_core_scaling if core_scaling is None else core_scaling,
        preconfigured_device_memory=base.preconfigured_device_memory
        if preconfigured is None
        else preconfigured,
        lib_cuda_log_level=base.lib_cuda_log_level if log_level is None else log_level,
        enable_numa_topology=base.enable_numa_topology if numa is None else numa,
    )


def _parse_mig_allowlist(data: Mapping[str, object], path: str) -> tuple[MigProfileAllow, ...]:
    where = f.join(path, "migProfileAllowlist")
    entries: list[MigProfileAllow] = []
    for index, item in enumerate(f.as_list(data.get("migProfileAllowlist"), where)):
        item_path = f.join(where, index)
        entry = f.as_mapping(item, item_path)
        models = f.get_str_tuple(entry, "models", item_path)
        profiles = f.get_str_tuple(entry, "profiles", item_path)
        # HAMi refuses to start on an entry without profiles; an entry without models matches
        # nothing, which is just as surely a mistake.
        for name, values in (("models", models), ("profiles", profiles)):
            if not values or not all(values):
                raise ConfigError(f.join(item_path, name), list(values), "must list names")
        entries.append(MigProfileAllow(models=models, profiles=profiles))
    return tuple(entries)
