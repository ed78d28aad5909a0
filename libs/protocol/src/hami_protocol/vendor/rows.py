"""One builder per vendor: its :class:`Vendor` row from its ``device-config.yaml`` section.

Every key spelling comes from :mod:`hami_protocol.keys`; every figure from the contract
(``contracts/hami-extensions.md`` §0–§1).
"""

from __future__ import annotations

from typing import Final

from hami_protocol import keys
from hami_protocol.config.device import DeviceConfig, NvidiaConfig
from hami_protocol.config.vendor_sections import AscendChipConfig, IluvatarChipConfig
from hami_protocol.vendor.model import CapacitySpec, Vendor

__all__ = [
    "AMD",
    "AWS_NEURON",
    "BIREN",
    "DCU",
    "ENFLAME_DRS",
    "ENFLAME_GCU",
    "KUNLUN",
    "KUNLUN_VXPU",
    "METAX_GPU",
    "METAX_SGPU",
    "MLU",
    "MTHREADS",
    "NVIDIA",
    "VASTAI",
    "ascend_vendor",
    "fixed_vendors",
    "iluvatar_vendor",
    "nvidia_vendor",
]

NVIDIA: Final = "NVIDIA"
MLU: Final = "MLU"
DCU: Final = "DCU"
MTHREADS: Final = "Mthreads"
METAX_GPU: Final = "Metax-GPU"
METAX_SGPU: Final = "Metax-SGPU"
AMD: Final = "AMD"
BIREN: Final = "Biren"
VASTAI: Final = "Vastai"
KUNLUN: Final = "kunlun"
KUNLUN_VXPU: Final = "XPU"
AWS_NEURON: Final = "AWSNeuron"
ENFLAME_GCU: Final = "GCU"
ENFLAME_DRS: Final = "Enflame"


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
        inventory="register-json",
        health="handshake",
        fit="nvidia",
    )


def _cambricon(config: DeviceConfig) -> Vendor:
    mlu = config.cambricon
    return Vendor(
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
        inventory="capacity",
        capacity=CapacitySpec(
            strategy="per-unit",
            id_infix="cambricon-mlu",
            device_type=MLU,
            units_resource=mlu.resource_core_name or "",
            memory_resource=mlu.resource_memory_name,
            units_per_device=100,
            count=100,
            devcore=100,
            memory_unit_mib=256,
        ),
        health="always",
        fit="standard",
    )


def _hygon(config: DeviceConfig) -> Vendor:
    dcu = config.hygon
    return Vendor(
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
        inventory="register-colon",
        health="handshake",
        fit="standard",
    )


def _mthreads(config: DeviceConfig) -> Vendor:
    mt = config.mthreads
    return Vendor(
        common_word=MTHREADS,
        count_resource=mt.resource_count_name,
        memory_resource=mt.resource_memory_name,
        cores_resource=mt.resource_core_name,
        # Moore Threads writes only the "allocated" list, under its own word.
        devices_allocated_key=keys.devices_allocated_key("mthreads-vgpu"),
        use_uuid_key=keys.MTHREADS_USE_UUID,
        nouse_uuid_key=keys.MTHREADS_NOUSE_UUID,
        memory_unit_mib=512,
        inventory="capacity",
        capacity=CapacitySpec(
            strategy="per-unit",
            id_infix="mthreads",
            device_type=MTHREADS,
            units_resource=mt.resource_core_name or "",
            memory_resource=mt.resource_memory_name,
            units_per_device=16,
            count=100,
            devcore=16,
            memory_unit_mib=512,
            device_vendor=MTHREADS,
        ),
        health="always",
        fit="standard",
    )


def _metax(config: DeviceConfig) -> tuple[Vendor, Vendor]:
    metax = config.metax
    whole = Vendor(
        common_word=METAX_GPU,
        count_resource=metax.resource_count_name,
        devices_to_allocate_key=keys.devices_to_allocate_key("metax-gpu"),
        devices_allocated_key=keys.devices_allocated_key("metax-gpu"),
        default_cores=100,
        inventory="capacity",
        capacity=CapacitySpec(
            strategy="per-device",
            id_infix="metax",
            device_type=METAX_GPU,
            units_resource=metax.resource_count_name,
            count=1,
            devmem=65536,
            devcore=100,
        ),
        health="capacity",
        fit="standard",
    )
    shared = Vendor(
        common_word=METAX_SGPU,
        count_resource=metax.resource_vcount_name,
        memory_resource=metax.resource_vmemory_name,
        cores_resource=metax.resource_vcore_name,
        devices_to_allocate_key=keys.devices_to_allocate_key("metax-sgpu"),
        devices_allocated_key=keys.devices_allocated_key("metax-sgpu"),
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.METAX_USE_UUID,
        nouse_uuid_key=keys.METAX_NOUSE_UUID,
        memory_unit_mib=1024,
        inventory="vendor-annotation",
        inventory_key=keys.METAX_SGPU_DEVICES,
        health="reported",
        fit="metax-sgpu",
    )
    return whole, shared


def _amd(config: DeviceConfig) -> Vendor:
    amd = config.amd
    return Vendor(
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
        inventory="register-json",
        health="capacity",
        fit="amd",
    )


def _biren(config: DeviceConfig) -> Vendor:
    return Vendor(
        common_word=BIREN,
        count_resource=config.biren.resource_count_name,
        devices_to_allocate_key=keys.BIREN_DEVICES_TO_ALLOCATE,
        devices_allocated_key=keys.BIREN_DEVICES_ALLOCATED,
        register_key=keys.BIREN_REGISTER,
        register_encoding="json",
        handshake_key=keys.BIREN_HANDSHAKE,
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.BIREN_USE_UUID,
        nouse_uuid_key=keys.BIREN_NOUSE_UUID,
        inventory="register-json",
        health="handshake",
        fit="count-only",
    )


def _vastai(config: DeviceConfig) -> Vendor:
    return Vendor(
        common_word=VASTAI,
        count_resource=config.vastai.resource_count_name,
        devices_to_allocate_key=keys.VASTAI_DEVICES_TO_ALLOCATE,
        devices_allocated_key=keys.VASTAI_DEVICES_ALLOCATED,
        register_key=keys.VASTAI_REGISTER,
        register_encoding="json",
        handshake_key=keys.VASTAI_HANDSHAKE,
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.VASTAI_USE_UUID,
        nouse_uuid_key=keys.VASTAI_NOUSE_UUID,
        inventory="register-json",
        health="handshake",
        fit="vastai",
    )


def _kunlun(config: DeviceConfig) -> tuple[Vendor, Vendor]:
    kunlun = config.kunlun
    whole = Vendor(
        common_word=KUNLUN,
        count_resource=kunlun.resource_count_name,
        devices_allocated_key=keys.KUNLUN_ALLOCATED,
        use_uuid_key=keys.KUNLUN_USE_UUID,
        nouse_uuid_key=keys.KUNLUN_NOUSE_UUID,
        legacy_use_uuid_key=keys.KUNLUN_LEGACY_USE_UUID,
        legacy_nouse_uuid_key=keys.KUNLUN_LEGACY_NOUSE_UUID,
        inventory="capacity",
        capacity=CapacitySpec(
            strategy="per-device",
            id_infix="kunlun",
            device_type=KUNLUN,
            units_resource=kunlun.resource_count_name,
            count=100,
            devmem=98304,
            devcore=100,
            split_numa=True,
            device_vendor=KUNLUN,
        ),
        health="always",
        fit="kunlun",
    )
    shared = Vendor(
        common_word=KUNLUN_VXPU,
        count_resource=kunlun.resource_vcount_name,
        memory_resource=kunlun.resource_vmemory_name,
        devices_to_allocate_key=keys.XPU_DEVICES_TO_ALLOCATE,
        devices_allocated_key=keys.XPU_DEVICES_ALLOCATED,
        register_key=keys.XPU_REGISTER,
        register_encoding="json",
        handshake_key=keys.XPU_HANDSHAKE,
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.KUNLUN_USE_UUID,
        nouse_uuid_key=keys.KUNLUN_NOUSE_UUID,
        inventory="register-json",
        health="handshake",
        fit="kunlun-vxpu",
    )
    return whole, shared


def _awsneuron(config: DeviceConfig) -> Vendor:
    aws = config.awsneuron
    return Vendor(
        common_word=AWS_NEURON,
        count_resource=aws.resource_count_name,
        cores_resource=aws.resource_core_name,
        # AWS Neuron writes only the "allocated" list.
        devices_allocated_key=keys.AWS_NEURON_DEVICES_ALLOCATED,
        use_uuid_key=keys.AWS_NEURON_USE_UUID,
        nouse_uuid_key=keys.AWS_NEURON_NOUSE_UUID,
        inventory="capacity",
        capacity=CapacitySpec(
            strategy="awsneuron",
            id_infix=AWS_NEURON,
            device_type=AWS_NEURON,
            units_resource=aws.resource_count_name,
            cores_resource=aws.resource_core_name,
            devmem=0,
            device_vendor=AWS_NEURON,
        ),
        health="always",
        fit="awsneuron",
    )


def _enflame(config: DeviceConfig) -> tuple[Vendor, Vendor]:
    enflame = config.enflame
    whole = Vendor(
        common_word=ENFLAME_GCU,
        count_resource=enflame.resource_name_gcu,
        devices_to_allocate_key=keys.ENFLAME_GCU_DEVICES_TO_ALLOCATE,
        devices_allocated_key=keys.ENFLAME_GCU_DEVICES_ALLOCATED,
        inventory="capacity",
        capacity=CapacitySpec(
            strategy="per-device",
            id_infix=ENFLAME_GCU,
            device_type=ENFLAME_GCU,
            units_resource=enflame.resource_name_gcu,
            count=1,
            devmem=100,
            devcore=100,
        ),
        health="capacity",
        fit="exclusive",
    )
    drs = Vendor(
        common_word=ENFLAME_DRS,
        count_resource=enflame.resource_name_drs_gcu,
        memory_resource=enflame.resource_name_gcu_memory,
        cores_resource=enflame.resource_name_gcu_core,
        # Enflame DRS writes only the "allocated" list, under "enflame-vgpu".
        devices_allocated_key=keys.ENFLAME_VGPU_DEVICES_ALLOCATED,
        use_uuid_key=keys.ENFLAME_USE_UUID,
        nouse_uuid_key=keys.ENFLAME_NOUSE_UUID,
        inventory="vendor-annotation",
        inventory_key=keys.ENFLAME_DRS_CAPACITY,
        health="always",
        fit="enflame-drs",
    )
    return whole, drs


def fixed_vendors(config: DeviceConfig) -> tuple[Vendor, ...]:
    """Every vendor HAMi activates from its ``device-config.yaml`` section (all but NVIDIA,
    Iluvatar and Ascend), in a fixed order."""
    return (
        _cambricon(config),
        _hygon(config),
        _mthreads(config),
        *_metax(config),
        _amd(config),
        _biren(config),
        _vastai(config),
        *_kunlun(config),
        _awsneuron(config),
        *_enflame(config),
    )


def iluvatar_vendor(chip: IluvatarChipConfig) -> Vendor:
    word = chip.common_word
    return Vendor(
        common_word=word,
        count_resource=chip.resource_count_name,
        memory_resource=chip.resource_memory_name,
        cores_resource=chip.resource_core_name,
        devices_to_allocate_key=keys.devices_to_allocate_key(word),
        devices_allocated_key=keys.devices_allocated_key(word),
        register_key=keys.node_register_key(word),
        register_encoding="colon",
        handshake_key=keys.node_handshake_key(word),
        node_lock_key=keys.NODE_LOCK,
        use_uuid_key=keys.use_uuid_key(word),
        nouse_uuid_key=keys.no_use_uuid_key(word),
        memory_unit_mib=256,
        inventory="register-colon",
        health="handshake",
        fit="standard",
    )


def ascend_vendor(chip: AscendChipConfig) -> Vendor:
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
        inventory="register-json",
        health="handshake",
        fit="ascend",
    )
