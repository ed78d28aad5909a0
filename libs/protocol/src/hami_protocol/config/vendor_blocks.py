"""The ``device-config.yaml`` sections of the vendors HAMi added after the first six:
``awsneuron``, ``biren``, ``enflame``, ``kunlun`` and ``vastai``.

Same rules as :mod:`hami_protocol.config.vendor_sections`: each parser reads one top-level
section, raises :class:`ConfigError` with the field path on a bad value, appends a warning per
unknown key, and takes the chart's defaults (``charts/hami/values.yaml``) for absent keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from hami_protocol import _fields as f

__all__ = [
    "BIREN_DEFAULTS",
    "VASTAI_DEFAULTS",
    "AwsNeuronConfig",
    "EnflameConfig",
    "KunlunConfig",
    "SingleResourceConfig",
    "parse_awsneuron",
    "parse_enflame",
    "parse_kunlun",
    "parse_single_resource",
]


@dataclass(frozen=True, slots=True)
class SingleResourceConfig:
    """A vendor configured by its count resource only (Biren, Vastai)."""

    resource_count_name: str


BIREN_DEFAULTS: Final = SingleResourceConfig("birentech.com/gpu")
VASTAI_DEFAULTS: Final = SingleResourceConfig("vastaitech.com/va")


@dataclass(frozen=True, slots=True)
class AwsNeuronConfig:
    resource_count_name: str = "aws.amazon.com/neuron"
    resource_core_name: str | None = "aws.amazon.com/neuroncore"


@dataclass(frozen=True, slots=True)
class KunlunConfig:
    resource_count_name: str = "kunlunxin.com/xpu"
    """Whole XPUs (common word ``kunlun``, inventory from node capacity)."""
    resource_vcount_name: str = "kunlunxin.com/vxpu"
    """vXPUs (common word ``XPU``, JSON register)."""
    resource_vmemory_name: str | None = "kunlunxin.com/vxpu-memory"


@dataclass(frozen=True, slots=True)
class EnflameConfig:
    resource_name_gcu: str = "enflame.com/gcu"
    """Whole GCUs (common word ``GCU``, inventory from node capacity)."""
    resource_name_drs_gcu: str = "enflame.com/drs-gcu"
    """DRS slices (common word ``Enflame``); falls back to ``resourceNameVGCU`` as HAMi does."""
    resource_name_gcu_memory: str | None = "enflame.com/gcu-memory"
    resource_name_gcu_core: str | None = "enflame.com/gcu-core"
    resource_name_vgcu: str | None = None
    """Legacy slice-count name; only consulted when ``resourceNameDRSGCU`` is empty."""
    resource_name_vgcu_percentage: str | None = None
    """Legacy; read and kept, used by nothing (as in HAMi)."""


def parse_single_resource(
    top: Mapping[str, object],
    name: str,
    defaults: SingleResourceConfig,
    warnings: list[str],
) -> SingleResourceConfig:
    data = f.as_mapping(top.get(name), name)
    warnings += f.unknown_keys(data, ("resourceCountName",), name)
    return SingleResourceConfig(
        f.get_required_str(data, "resourceCountName", name, defaults.resource_count_name)
    )


def parse_awsneuron(top: Mapping[str, object], warnings: list[str]) -> AwsNeuronConfig:
    path = "awsneuron"
    data = f.as_mapping(top.get(path), path)
    warnings += f.unknown_keys(data, ("resourceCountName", "resourceCoreName"), path)
    base = AwsNeuronConfig()
    return AwsNeuronConfig(
        resource_count_name=f.get_required_str(
            data, "resourceCountName", path, base.resource_count_name
        ),
        resource_core_name=f.get_name(data, "resourceCoreName", path, base.resource_core_name),
    )


class _VirtualNames(Protocol):
    @property
    def resource_count_name(self) -> str: ...
    @property
    def resource_vcount_name(self) -> str: ...
    @property
    def resource_vmemory_name(self) -> str | None: ...


VIRTUAL_NAME_KEYS: Final = ("resourceCountName", "resourceVCountName", "resourceVMemoryName")
"""The names of a block whose whole devices and virtual slices are separate resources."""


def virtual_names(
    data: Mapping[str, object], path: str, base: _VirtualNames
) -> tuple[str, str, str | None]:
    """:data:`VIRTUAL_NAME_KEYS` of a block (Kunlunxin, MetaX): count, vcount, vmemory."""
    return (
        f.get_required_str(data, "resourceCountName", path, base.resource_count_name),
        f.get_required_str(data, "resourceVCountName", path, base.resource_vcount_name),
        f.get_name(data, "resourceVMemoryName", path, base.resource_vmemory_name),
    )


def parse_kunlun(top: Mapping[str, object], warnings: list[str]) -> KunlunConfig:
    path = "kunlun"
    data = f.as_mapping(top.get(path), path)
    warnings += f.unknown_keys(data, VIRTUAL_NAME_KEYS, path)
    count, vcount, vmemory = virtual_names(data, path, KunlunConfig())
    return KunlunConfig(
        resource_count_name=count, resource_vcount_name=vcount, resource_vmemory_name=vmemory
    )


_ENFLAME_KEYS: Final = (
    "resourceNameGCU",
    "resourceNameDRSGCU",
    "resourceNameGCUMemory",
    "resourceNameGCUCore",
    "resourceNameVGCU",
    "resourceNameVGCUPercentage",
)


def parse_enflame(top: Mapping[str, object], warnings: list[str]) -> EnflameConfig:
    """``enflame``; an empty ``resourceNameDRSGCU`` takes ``resourceNameVGCU``, then the
    default (HAMi's ``InitEnflameDevice`` order)."""
    path = "enflame"
    data = f.as_mapping(top.get(path), path)
    warnings += f.unknown_keys(data, _ENFLAME_KEYS, path)
    base = EnflameConfig()
    vgcu = f.get_name(data, "resourceNameVGCU", path, None)
    drs = f.get_name(data, "resourceNameDRSGCU", path, None)
    return EnflameConfig(
        resource_name_gcu=f.get_required_str(data, "resourceNameGCU", path, base.resource_name_gcu),
        resource_name_drs_gcu=drs or vgcu or base.resource_name_drs_gcu,
        resource_name_gcu_memory=f.get_name(
            data, "resourceNameGCUMemory", path, base.resource_name_gcu_memory
        )
        or base.resource_name_gcu_memory,
        resource_name_gcu_core=f.get_name(
            data, "resourceNameGCUCore", path, base.resource_name_gcu_core
        )
        or base.resource_name_gcu_core,
        resource_name_vgcu=vgcu,
        resource_name_vgcu_percentage=f.get_name(data, "resourceNameVGCUPercentage", path, None),
    )
