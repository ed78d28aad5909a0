"""The device vendors as data: one frozen :class:`Vendor` row per common word.

A row says which container resources a vendor reads, how its memory resource converts to MiB,
its default cores, and which annotation keys carry its node registration, handshake, node lock,
pod device lists and device selectors (``None`` where the vendor has no such key).  Rows are
built from a :class:`~hami_protocol.config.device.DeviceConfig` by :func:`vendors_from_config`, so a
renamed resource in ``device-config.yaml`` flows into request parsing with no code change.

Rows exist for NVIDIA, Cambricon MLU, Hygon DCU, Moore Threads, MetaX (whole GPU and sGPU) and
AMD, plus one row per configured Iluvatar chip and Ascend ``commonWord`` when those vendors are
enabled (HAMi registers them only behind ``--enable-iluvatar`` / ``--enable-ascend``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from hami_protocol import keys
from hami_protocol.config.device import DeviceConfig, NvidiaConfig
from hami_protocol.config.vendor_sections import AscendChipConfig, IluvatarChipConfig
from hami_protocol.errors import ConfigError

__all__ = [
    "AMD",
    "DCU",
    "DEFAULT_VENDORS",
    "METAX_GPU",
    "METAX_SGPU",
    "MLU",
    "MTHREADS",
    "NVIDIA",
    "RegisterEncoding",
    "Vendor",
    "nvidia_vendor",
    "vendor_by_word",
    "vendors_from_config",
]

NVIDIA: Final = "NVIDIA"
MLU: Final = "MLU"
DCU: Final = "DCU"
MTHREADS: Final = "Mthreads"
METAX_GPU: Final = "Metax-GPU"
METAX_SGPU: Final = "Metax-SGPU"
AMD: Final = "AMD"

RegisterEncoding = Literal["json", "colon"]


@dataclass(frozen=True, slots=True)
class Vendor:
    """One device vendor (or one chip family sharing a common word)."""

    common_word: str
    """Registry key and the ``Type`` written in pod device lists (``NVIDIA``, ``MLU``, ...)."""
    count_resource: str
    memory_resource: str | None = None
    memory_percentage_resource: str | None = None
    cores_resource: str | None = None
    priority_resource: str | None = None
    devices_to_allocate_key: str | None = None
    devices_allocated_key: str | None = None
    register_key: str | None = None
    """``None`` when the scheduler synthesizes devices from node capacity instead."""
    register_encoding: RegisterEncoding | None = None
    handshake_key: str | None = None
    node_lock_key: str | None = None
    use_uuid_key: str | None = None
    nouse_uuid_key: str | None = None
    use_type_key: str | None = None
    nouse_type_key: str | None = None
    memory_unit_mib: int = 1
    """MiB per unit of ``memory_resource`` (MLU and Iluvatar 256, Mthreads 512, MetaX sGPU 1024)."""
    memory_factor: int = 1
    """Extra multiplier an operator sets so users may request memory in coarser units."""
    default_memory: int = 0
    """MiB assumed when a container names neither memory nor a percentage (NVIDIA only)."""
    default_cores: int = 0
    limits_only: bool = False
    """Read ``resources.limits`` only (AMD); others fall back to ``resources.requests``."""

    @property
    def supports_percentage(self) -> bool:
        return self.memory_percentage_resource is not None

    @property
    def managed_resources(self) -> tuple[str, ...]:
        """The resource names that make a container this vendor's (priority excluded)."""
        names = (
            self.count_resource,
            self.memory_resource,
            self.memory_percentage_resource,
            self.cores_resource,
        )
        return tuple(name for name in names if name)


def nvidia_vendor(config: NvidiaConfig) -> Vendor:
    return Vendor(
        common_word=NVIDIA,
        count_resource=config.resource_count_name,
        memory_resource=config.resource_memory_name,
        memory_percentage_resource=config.resource_memory_percentage_name,
        cores_resource=config.resource_core_name,
        priority_resource=config.resource_priority_name,
        devices_to_allocate_key=keys.NVIDIA_DEVICES_TO_ALLOCATE,
        devices_allocated_key=keys.NVIDIA_DEVICES_ALLOCATED,
        register_key=keys.NVIDIA_REGISTER,
        register_encoding="json",
        handshake_key=keys.NVIDIA_HANDSHAKE,
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.NVIDIA_USE_GPUUUID,
        nouse_uuid_key=keys.NVIDIA_NOUSE_GPUUUID,
        use_type_key=keys.NVIDIA_USE_GPUTYPE,
        nouse_type_key=keys.NVIDIA_NOUSE_GPUTYPE,
        memory_factor=config.memory_factor,
        default_memory=config.default_memory,
        default_cores=config.default_cores,
    )


def _fixed_vendors(config: DeviceConfig) -> tuple[Vendor, ...]:
    mlu, dcu, mthreads, amd, metax = (
        config.cambricon,
        config.hygon,
        config.mthreads,
        config.amd,
        config.metax,
    )
    return (
        Vendor(
            common_word=MLU,
            count_resource=mlu.resource_count_name,
            memory_resource=mlu.resource_memory_name,
            cores_resource=mlu.resource_core_name,
            devices_to_allocate_key=keys.devices_to_allocate_key("cambricon-mlu"),
            devices_allocated_key=keys.devices_allocated_key("cambricon-mlu"),
            node_lock_key=keys.CAMBRICON_DSMLU_LOCK,
            use_uuid_key=keys.CAMBRICON_USE_UUID,
            nouse_uuid_key=keys.CAMBRICON_NOUSE_UUID,
            use_type_key=keys.CAMBRICON_USE_TYPE,
            nouse_type_key=keys.CAMBRICON_NOUSE_TYPE,
            memory_unit_mib=256,
            default_cores=100,
        ),
        Vendor(
            common_word=DCU,
            count_resource=dcu.resource_count_name,
            memory_resource=dcu.resource_memory_name,
            cores_resource=dcu.resource_core_name,
            devices_to_allocate_key=keys.devices_to_allocate_key("dcu"),
            devices_allocated_key=keys.devices_allocated_key("dcu"),
            register_key=keys.node_register_key("dcu"),
            register_encoding="colon",
            handshake_key=keys.node_handshake_key("dcu"),
            node_lock_key=keys.NODE_LOCK,
            use_uuid_key=keys.HYGON_USE_UUID,
            nouse_uuid_key=keys.HYGON_NOUSE_UUID,
            use_type_key=keys.HYGON_USE_TYPE,
            nouse_type_key=keys.HYGON_NOUSE_TYPE,
            memory_factor=dcu.memory_factor,
            default_cores=100,
        ),
        Vendor(
            common_word=MTHREADS,
            count_resource=mthreads.resource_count_name,
            memory_resource=mthreads.resource_memory_name,
            cores_resource=mthreads.resource_core_name,
            # Moore Threads writes only the "allocated" list, under its own word.
            devices_allocated_key=keys.devices_allocated_key("mthreads-vgpu"),
            memory_unit_mib=512,
        ),
        Vendor(
            common_word=METAX_GPU,
            count_resource=metax.resource_count_name,
            devices_to_allocate_key=keys.devices_to_allocate_key("metax-gpu"),
            devices_allocated_key=keys.devices_allocated_key("metax-gpu"),
            default_cores=100,
        ),
        Vendor(
            common_word=METAX_SGPU,
            count_resource=metax.resource_vcount_name,
            memory_resource=metax.resource_vmemory_name,
            cores_resource=metax.resource_vcore_name,
            devices_to_allocate_key=keys.devices_to_allocate_key("metax-sgpu"),
            devices_allocated_key=keys.devices_allocated_key("metax-sgpu"),
            register_key=keys.METAX_SGPU_REGISTER,
            register_encoding="json",
            node_lock_key=keys.NODE_LOCK,
            use_uuid_key=keys.METAX_USE_UUID,
            nouse_uuid_key=keys.METAX_NOUSE_UUID,
            memory_unit_mib=1024,
        ),
        Vendor(
            common_word=AMD,
            count_resource=amd.resource_count_name,
            memory_resource=amd.resource_memory_name,
            cores_resource=amd.resource_core_name,
            devices_to_allocate_key=keys.devices_to_allocate_key("amd"),
            devices_allocated_key=keys.devices_allocated_key("amd"),
            register_key=keys.node_register_key("amd"),
            register_encoding="json",
            node_lock_key=keys.NODE_LOCK,
            use_uuid_key=keys.AMD_USE_GPU_UUID,
            nouse_uuid_key=keys.AMD_NOUSE_GPU_UUID,
            use_type_key=keys.AMD_USE_GPUTYPE,
            nouse_type_key=keys.AMD_NOUSE_GPUTYPE,
            # An omitted core limit gives the container every compute unit.
            default_cores=100,
            limits_only=True,
        ),
    )


def _iluvatar_vendor(chip: IluvatarChipConfig) -> Vendor:
    word = chip.common_word
    return Vendor(
        common_word=word,
        count_resource=chip.resource_count_name,
        memory_resource=chip.resource_memory_name,
        cores_resource=chip.resource_core_name,
        devices_to_allocate_key=keys.devices_to_allocate_key(word),
        devices_allocated_key=keys.devices_allocated_key(word),
        register_key=keys.word_register_key(word),
        register_encoding="colon",
        handshake_key=keys.node_handshake_key(word),
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.use_uuid_key(word),
        nouse_uuid_key=keys.no_use_uuid_key(word),
        memory_unit_mib=256,
    )


def _ascend_vendor(chip: AscendChipConfig) -> Vendor:
    word = chip.common_word
    return Vendor(
        common_word=word,
        count_resource=chip.resource_name,
        memory_resource=chip.resource_memory_name,
        cores_resource=chip.resource_core_name,
        devices_to_allocate_key=keys.devices_to_allocate_key(word),
        devices_allocated_key=keys.devices_allocated_key(word),
        register_key=keys.word_register_key(word),
        register_encoding="json",
        handshake_key=keys.node_handshake_key(word),
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.use_uuid_key(word),
        nouse_uuid_key=keys.no_use_uuid_key(word),
        memory_factor=chip.memory_factor,
    )


def vendors_from_config(
    config: DeviceConfig,
    *,
    enable_ascend: bool = False,
    enable_iluvatar: bool = False,
) -> tuple[Vendor, ...]:
    """Every vendor row for ``config``, NVIDIA first.

    Raises :class:`ConfigError` when two rows share a common word or a resource name, since a
    container's request could then not be attributed to one vendor.
    """
    rows = [nvidia_vendor(config.nvidia), *_fixed_vendors(config)]
    if enable_iluvatar:
        rows += [_iluvatar_vendor(chip) for chip in config.iluvatars]
    if enable_ascend:
        rows += [_ascend_vendor(chip) for chip in config.vnpus.configs]
    _check_unique(rows)
    return tuple(rows)


def _check_unique(rows: Iterable[Vendor]) -> None:
    words: set[str] = set()
    owners: dict[str, str] = {}
    for row in rows:
        if row.common_word in words:
            raise ConfigError("commonWord", row.common_word, "two vendors share a common word")
        words.add(row.common_word)
        for name in (*row.managed_resources, row.priority_resource):
            if name is None:
                continue
            if name in owners and owners[name] != row.common_word:
                raise ConfigError(
                    "resource name", name, f"used by both {owners[name]} and {row.common_word}"
                )
            owners[name] = row.common_word


def vendor_by_word(vendors: Iterable[Vendor], word: str) -> Vendor | None:
    """The row whose common word is ``word`` (exact match), if any."""
    return next((row for row in vendors if row.common_word == word), None)


DEFAULT_VENDORS: Final = vendors_from_config(DeviceConfig())
"""The rows of a default configuration (Ascend and Iluvatar disabled, as HAMi's flags default)."""
