"""The non-NVIDIA sections of ``device-config.yaml``: resource names and chip lists.

Each parser reads one top-level section of the decoded document, validates it (raising
:class:`ConfigError` with the field path) and appends warnings for keys it does not know.
Absent sections take the chart's defaults; ``iluvatars`` and ``vnpus`` default to no chips.
Ascend's ``vnpus`` lives in :mod:`hami_protocol.config.ascend` (re-exported here); the vendors
HAMi added later in :mod:`hami_protocol.config.vendor_blocks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from hami_protocol import _fields as f
from hami_protocol.config.ascend import AscendChipConfig, AscendConfig, AscendTemplate, parse_ascend
from hami_protocol.config.vendor_blocks import VIRTUAL_NAME_KEYS, virtual_names
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
    memory_per_card: tuple[int, ...] = ()
    """Moore Threads only: a card's memory in 512 MiB units, per card model (``[96]``; an
    MTT S5000 cluster sets ``[160]``)."""


CAMBRICON_DEFAULTS: Final = VendorResourceConfig(
    "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"
)
HYGON_DEFAULTS: Final = VendorResourceConfig(
    "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"
)
MTHREADS_DEFAULTS: Final = VendorResourceConfig(
    "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core", 1, (96,)
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


def _section(top: Mapping[str, object], name: str) -> Mapping[str, object]:
    return f.as_mapping(top.get(name), name)


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
        resource_count_name=f.get_required_str(
            data, "resourceCountName", name, defaults.resource_count_name
        ),
        resource_memory_name=f.get_name(
            data, "resourceMemoryName", name, defaults.resource_memory_name
        ),
        resource_core_name=f.get_name(data, "resourceCoreName", name, defaults.resource_core_name),
        memory_factor=factor,
        memory_per_card=_memory_per_card(data, name, defaults.memory_per_card),
    )


def _memory_per_card(
    data: Mapping[str, object], path: str, default: tuple[int, ...]
) -> tuple[int, ...]:
    """``memoryPerCard``: a list of positive integers; a legacy scalar is a one-item list."""
    raw = data.get("memoryPerCard")
    if raw is None or "memoryPerCard" not in _EXTRA_KEYS.get(path, ()):
        return default
    where = f.join(path, "memoryPerCard")
    if not isinstance(raw, list):
        return (f.get_int(data, "memoryPerCard", path, 0, minimum=1),)
    values = tuple(_positive(item, f.join(where, index)) for index, item in enumerate(raw))
    if not values:
        raise ConfigError(where, raw, "must list at least one card size")
    return values


def _positive(item: object, where: str) -> int:
    if isinstance(item, bool) or not isinstance(item, int):
        raise ConfigError(where, item, "expected an integer")
    if not 1 <= item <= f.INT32_MAX:
        raise ConfigError(where, item, f"must be between 1 and {f.INT32_MAX}")
    return item


def parse_metax(top: Mapping[str, object], warnings: list[str]) -> MetaxConfig:
    path = "metax"
    data = _section(top, path)
    keys = (*VIRTUAL_NAME_KEYS, "resourceVCoreName", "sgpuTopologyAware")
    warnings += f.unknown_keys(data, keys, path)
    base = MetaxConfig()
    count, vcount, vmemory = virtual_names(data, path, base)
    return MetaxConfig(
        resource_count_name=count,
        resource_vcount_name=vcount,
        resource_vmemory_name=vmemory,
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
                resource_count_name=f.get_required_str(
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
