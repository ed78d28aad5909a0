"""Ascend's ``vnpus`` section of ``device-config.yaml``: ``hamiVnpuCore`` and one entry per chip
(common word, resource names, memory figures, runtime class, ``overwriteEnv``, ``superPod`` and
the vNPU templates requests round up to).

Invalid values raise :class:`ConfigError` with the field path (``vnpus.configs[2].templates[0]
.memory``); two chips with one common word, or two templates of a chip with one name, are
errors too (a request could not say which it means).  Figures HAMi accepts but that cannot be
what the operator meant (``memoryAllocatable`` above ``memoryCapacity``, a template larger than
the card) are warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from hami_protocol import _fields as f
from hami_protocol.errors import ConfigError

__all__ = ["AscendChipConfig", "AscendConfig", "AscendTemplate", "parse_ascend"]


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
        word = f.get_required_str(data, "commonWord", path, "")
        if any(chip.common_word == word for chip in chips):
            raise ConfigError(f.join(path, "commonWord"), word, "another chip has this common word")
        chip = AscendChipConfig(
            chip_name=f.get_str(data, "chipName", path, ""),
            common_word=word,
            resource_name=f.get_required_str(data, "resourceName", path, f"huawei.com/{word}"),
            resource_memory_name=f.get_required_str(
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
        warnings += _chip_warnings(chip, path)
        chips.append(chip)
    return tuple(chips)


def _chip_warnings(chip: AscendChipConfig, path: str) -> list[str]:
    notes: list[str] = []
    capacity = chip.memory_capacity
    if capacity and chip.memory_allocatable > capacity:
        notes.append(
            f"{f.join(path, 'memoryAllocatable')} {chip.memory_allocatable} exceeds "
            f"memoryCapacity {capacity}"
        )
    for template in chip.templates:
        if capacity and template.memory > capacity:
            notes.append(
                f"{f.join(path, 'templates')} {template.name} memory {template.memory} exceeds "
                f"memoryCapacity {capacity}"
            )
    return notes


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
        name = f.get_required_str(entry, "name", item_path, "")
        if any(template.name == name for template in templates):
            raise ConfigError(f.join(item_path, "name"), name, "another template has this name")
        templates.append(
            AscendTemplate(
                name=name,
                memory=_required_int(entry, "memory", item_path),
                ai_core=f.get_int(entry, "aiCore", item_path, 0),
                ai_cpu=f.get_int(entry, "aiCPU", item_path, 0),
            )
        )
    return tuple(sorted(templates, key=lambda template: template.memory))
