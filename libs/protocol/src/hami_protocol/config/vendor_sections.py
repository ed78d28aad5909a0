"""The non-NVIDIA sections of ``device-config.yaml``: resource names and chip lists.

Each parser reads one top-level section of the decoded document, validates it (raising
:class:`ConfigError` with the field path) and appends warnings for keys it does not know.
Absent sections take the chart's defaults; ``iluvatars`` and ``vnpus`` default to no chips.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from hami_protocol import _fields as f
from hami_protocol.errors import ConfigError

__all__ = [
    "AMD_DEFAULTS",
    "CAMBRICON_DEFAULTS",
    "HYGON_DEFAULTS",
    "MTHREADS_DEFAULTS",
    "AscendChipConfig",
    "AscendConfig",
    "AscendTemplate",
    "IluvatarChipConfig",
    "MetaxConfig",
    "VendorResourceConfig",
    "parse_ascend",
    "parse_iluvatars",
    "parse_metax",
    "parse_vendor_resources",
]


@dataclass(frozen=True, slots=True)
class VendorResourceConfig:
    """Resource names of a vendor with one count/memory/core triple (MLU, DCU, Mthreads, AMD)."""

    resource_count_name: str
    resource_memory_name: str | None
    resource_core_name: str | None
    memory_factor: int = 1


CAMBRICON_DEFAULTS: Final = VendorResourceConfig(
    "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"
)
HYGON_DEFAULTS: Final = VendorResourceConfig(
    "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"
)
MTHREADS_DEFAULTS: Final = VendorResourceConfig(
    "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
)
AMD_DEFAULTS: Final = VendorResourceConfig("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores")

_NAME_KEYS: Final = ("resourceCountName", "resourceMemoryName", "resourceCoreName")
# Keys HAMi reads in these sections besides the names; anything else is reported.
_EXTRA_KEYS: Final = {
    "cambricon": (),
    "hygon": ("memoryFactor",),
    "mthreads": ("memoryPerCard",),
    "amd": (),
}


@dataclass(frozen=True, slots=True)
class MetaxConfig:
    resource_count_name: str = "metax-tech.com/gpu"
    """Whole MetaX GPUs (common word ``Metax-GPU``)."""
    resource_vcount_name: str = "metax-tech.com/sgpu"
    resource_vmemory_name: str | None = "metax-tech.com/vmemory"
    resource_vcore_name: str | None = "metax-tech.com/vcore"
    sgpu_topology_aware: bool = False


@dataclass(frozen=True, slots=True)
class IluvatarChipConfig:
    chip_name: str
    common_word: str
    resource_count_name: str
    resource_memory_name: str | None
    resource_core_name: str | None


@dataclass(frozen=True, slots=True)
class AscendTemplate:
    name: str
    memory: int
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True, slots=True)
class AscendChipConfig:
    chip_name: str
    common_word: str
    resource_name: str
    resource_memory_name: str
    resource_core_name: str | None = None
    memory_allocatable: int = 0
    memory_capacity: int = 0
    memory_factor: int = 1
    ai_core: int = 0
    ai_cpu: int = 0
    runtime_class_name: str = ""
    overwrite_env: bool = False
    super_pod: bool = False
    templates: tuple[AscendTemplate, ...] = ()
    """Sorted by memory, smallest first (requests round up to the first that fits)."""


@dataclass(frozen=True, slots=True)
class AscendConfig:
    hami_vnpu_core: bool = False
    configs: tuple[AscendChipConfig, ...] = ()


def _section(top: Mapping[str, object], name: str) -> Mapping[str, object]:
    return f.as_mapping(top.get(name), name)


def _required_name(data: Mapping[str, object], key: str, path: str, default: str) -> str:
    value = f.get_str(data, key, path, default)
    if not value:
        raise ConfigError(f.join(path, key), value, "must not be empty")
    return value


def parse_vendor_resources(
    top: Mapping[str, object],
    name: str,
    defaults: VendorResourceConfig,
    warnings: list[str],
) -> VendorResourceConfig:
    data = _section(top, name)
    warnings += f.unknown_keys(data, (*_NAME_KEYS, *_EXTRA_KEYS.get(name, ())), name)
    factor = 1
    if "memoryFactor" in _EXTRA_KEYS.get(name, ()):
        factor = f.get_int(data, "memoryFactor", name, defaults.memory_factor, minimum=1)
    return VendorResourceConfig(
        resource_count_name=_required_name(
            data, "resourceCountName", name, defaults.resource_count_name
        ),
        resource_memory_name=f.get_name(
            data, "resourceMemoryName", name, defaults.resource_memory_name
        ),
        resource_core_name=f.get_name(data, "resourceCoreName", name, defaults.resource_core_name),
        memory_factor=factor,
    )


def parse_metax(top: Mapping[str, object], warnings: list[str]) -> MetaxConfig:
    path = "metax"
    data = _section(top, path)
    keys = (
        "resourceCountName",
        "resourceVCountName",
        "resourceVMemoryName",
        "resourceVCoreName",
        "sgpuTopologyAware",
    )
    warnings += f.unknown_keys(data, keys, path)
    base = MetaxConfig()
    return MetaxConfig(
        resource_count_name=_required_name(
            data, "resourceCountName", path, base.resource_count_name
        ),
        resource_vcount_name=_required_name(
            data, "resourceVCountName", path, base.resource_vcount_name
        ),
        resource_vmemory_name=f.get_name(
            data, "resourceVMemoryName", path, base.resource_vmemory_name
        ),
        resource_vcore_name=f.get_name(data, "resourceVCoreName", path, base.resource_vcore_name),
        sgpu_topology_aware=f.get_bool(data, "sgpuTopologyAware", path, False),
    )


_ILUVATAR_KEYS: Final = ("chipName", "commonWord", *_NAME_KEYS)


def parse_iluvatars(
    top: Mapping[str, object], warnings: list[str]
) -> tuple[IluvatarChipConfig, ...]:
    """``iluvatars``: one entry per chip; missing names follow ``iluvatar.ai/<chip>-vgpu``."""
    chips: list[IluvatarChipConfig] = []
    for index, item in enumerate(f.as_list(top.get("iluvatars"), "iluvatars")):
        path = f.join("iluvatars", index)
        data = f.as_mapping(item, path)
        warnings += f.unknown_keys(data, _ILUVATAR_KEYS, path)
        chip = f.get_str(data, "chipName", path, "")
        word = f.get_str(data, "commonWord", path, chip)
        if not word:
            raise ConfigError(f.join(path, "commonWord"), word, "chipName or commonWord required")
        chip = chip or word
        chips.append(
            IluvatarChipConfig(
                chip_name=chip,
                common_word=word,
                resource_count_name=_required_name(
                    data, "resourceCountName", path, f"iluvatar.ai/{chip}-vgpu"
                ),
                resource_memory_name=f.get_name(
                    data, "resourceMemoryName", path, f"iluvatar.ai/{chip}.vMem"
                ),
                resource_core_name=f.get_name(
                    data, "resourceCoreName", path, f"iluvatar.ai/{chip}.vCore"
                ),
            )
        )
    return tuple(chips)


_ASCEND_KEYS: Final = (
    "chipName",
    "commonWord",
    "resourceName",
    "resourceMemoryName",
    "resourceCoreName",
    "memoryAllocatable",
    "memoryCapacity",
    "memoryFactor",
    "aiCore",
    "aiCPU",
    "runtimeClassName",
    "overwriteEnv",
    "superPod",
    "templates",
)


def parse_ascend(top: Mapping[str, object], warnings: list[str]) -> AscendConfig:
    """``vnpus``: ``{hamiVnpuCore, configs: [...]}``, or the older bare list of chips."""
    raw = top.get("vnpus")
    if isinstance(raw, list):
        return AscendConfig(configs=_parse_ascend_chips(raw, "vnpus", warnings))
    data = f.as_mapping(raw, "vnpus")
    warnings += f.unknown_keys(data, ("hamiVnpuCore", "configs"), "vnpus")
    where = "vnpus.configs"
    return AscendConfig(
        hami_vnpu_core=f.get_bool(data, "hamiVnpuCore", "vnpus", False),
        configs=_parse_ascend_chips(f.as_list(data.get("configs"), where), where, warnings),
    )


def _parse_ascend_chips(
    items: list[object], where: str, warnings: list[str]
) -> tuple[AscendChipConfig, ...]:
    chips: list[AscendChipConfig] = []
    for index, item in enumerate(items):
        path = f.join(where, index)
        data = f.as_mapping(item, path)
        warnings += f.unknown_keys(data, _ASCEND_KEYS, path)
        word = _required_name(data, "commonWord", path, "")
        chips.append(
            AscendChipConfig(
                chip_name=f.get_str(data, "chipName", path, ""),
                common_word=word,
                resource_name=_required_name(data, "resourceName", path, f"huawei.com/{word}"),
                resource_memory_name=_required_name(
                    data, "resourceMemoryName", path, f"huawei.com/{word}-memory"
                ),
                resource_core_name=f.get_name(data, "resourceCoreName", path, None),
                memory_allocatable=f.get_int(data, "memoryAllocatable", path, 0),
                memory_capacity=f.get_int(data, "memoryCapacity", path, 0),
                memory_factor=f.get_int(data, "memoryFactor", path, 1, minimum=1),
                ai_core=f.get_int(data, "aiCore", path, 0),
                ai_cpu=f.get_int(data, "aiCPU", path, 0),
                runtime_class_name=f.get_str(data, "runtimeClassName", path, ""),
                overwrite_env=f.get_bool(data, "overwriteEnv", path, False),
                super_pod=f.get_bool(data, "superPod", path, False),
                templates=_parse_templates(data, path),
            )
        )
    return tuple(chips)


def _required_int(data: Mapping[str, object], key: str, path: str) -> int:
    value = f.get_opt_int(data, key, path, minimum=1)
    if value is None:
        raise ConfigError(f.join(path, key), value, "required")
    return value


def _parse_templates(data: Mapping[str, object], path: str) -> tuple[AscendTemplate, ...]:
    where = f.join(path, "templates")
    templates: list[AscendTemplate] = []
    for index, item in enumerate(f.as_list(data.get("templates"), where)):
        item_path = f.join(where, index)
        entry = f.as_mapping(item, item_path)
        templates.append(
            AscendTemplate(
                name=_required_name(entry, "name", item_path, ""),
                memory=_required_int(entry, "memory", item_path),
                ai_core=f.get_int(entry, "aiCore", item_path, 0),
                ai_cpu=f.get_int(entry, "aiCPU", item_path, 0),
            )
        )
    return tuple(sorted(templates, key=lambda template: template.memory))
