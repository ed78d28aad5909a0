"""The vendor table: contract rows, built from config, renamed resources flowing through."""

from __future__ import annotations

import pytest

from hami_protocol import keys
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import DeviceConfig, parse_device_config
from hami_protocol.errors import ConfigError
from hami_protocol.vendor.table import (
    DEFAULT_VENDORS,
    NVIDIA,
    Vendor,
    vendor_by_word,
    vendors_from_config,
)


def _row(word: str, vendors: tuple[Vendor, ...] = DEFAULT_VENDORS) -> Vendor:
    row = vendor_by_word(vendors, word)
    assert row is not None, word
    return row


def test_default_rows_in_order() -> None:
    assert [row.common_word for row in DEFAULT_VENDORS] == [
        "NVIDIA",
        "MLU",
        "DCU",
        "Mthreads",
        "Metax-GPU",
        "Metax-SGPU",
        "AMD",
    ]
    assert vendors_from_config(DeviceConfig()) == DEFAULT_VENDORS


def test_nvidia_row() -> None:
    assert _row(NVIDIA) == Vendor(
        common_word="NVIDIA",
        count_resource="nvidia.com/gpu",
        memory_resource="nvidia.com/gpumem",
        memory_percentage_resource="nvidia.com/gpumem-percentage",
        cores_resource="nvidia.com/gpucores",
        priority_resource="nvidia.com/priority",
        devices_to_allocate_key="hami.io/vgpu-devices-to-allocate",
        devices_allocated_key="hami.io/vgpu-devices-allocated",
        register_key="hami.io/node-nvidia-register",
        register_encoding="json",
        handshake_key="hami.io/node-handshake",
        node_lock_key="hami.io/mutex.lock",
        use_uuid_key="nvidia.com/use-gpuuuid",
        nouse_uuid_key="nvidia.com/nouse-gpuuuid",
        use_type_key="nvidia.com/use-gputype",
        nouse_type_key="nvidia.com/nouse-gputype",
        memory_unit_mib=1,
        memory_factor=1,
        default_memory=0,
        default_cores=0,
    )
    assert _row(NVIDIA).supports_percentage


# word, count, memory, cores, to-allocate, allocated, register, handshake, lock, unit, cores
_CONTRACT_ROWS = [
    (
        "MLU",
        "cambricon.com/vmlu",
        "cambricon.com/mlu.smlu.vmemory",
        "cambricon.com/mlu.smlu.vcore",
        "hami.io/cambricon-mlu-devices-to-allocate",
        "hami.io/cambricon-mlu-devices-allocated",
        None,
        None,
        "cambricon.com/dsmlu.lock",
        256,
        100,
    ),
    (
        "DCU",
        "hygon.com/dcunum",
        "hygon.com/dcumem",
        "hygon.com/dcucores",
        "hami.io/dcu-devices-to-allocate",
        "hami.io/dcu-devices-allocated",
        "hami.io/node-dcu-register",
        "hami.io/node-handshake-dcu",
        "hami.io/mutex.lock",
        1,
        100,
    ),
    (
        "Mthreads",
        "mthreads.com/vgpu",
        "mthreads.com/sgpu-memory",
        "mthreads.com/sgpu-core",
        None,
        "hami.io/mthreads-vgpu-devices-allocated",
        None,
        None,
        None,
        512,
        0,
    ),
    (
        "Metax-GPU",
        "metax-tech.com/gpu",
        None,
        None,
        "hami.io/metax-gpu-devices-to-allocate",
        "hami.io/metax-gpu-devices-allocated",
        None,
        None,
        None,
        1,
        100,
    ),
    (
        "Metax-SGPU",
        "metax-tech.com/sgpu",
        "metax-tech.com/vmemory",
        "metax-tech.com/vcore",
        "hami.io/metax-sgpu-devices-to-allocate",
        "hami.io/metax-sgpu-devices-allocated",
        "metax-tech.com/node-gpu-devices",
        None,
        "hami.io/mutex.lock",
        1024,
        0,
    ),
    (
        "AMD",
        "amd.com/gpu",
        "amd.com/gpumem",
        "amd.com/gpucores",
        "hami.io/amd-devices-to-allocate",
        "hami.io/amd-devices-allocated",
        "hami.io/node-amd-register",
        None,
        "hami.io/mutex.lock",
        1,
        100,
    ),
]


@pytest.mark.parametrize(
    ("word", "count", "memory", "cores", "to_allocate", "allocated", "register", "handshake",
     "lock", "unit", "default_cores"),
    _CONTRACT_ROWS,
)  # fmt: skip
def test_fixed_vendor_rows_match_the_contract(
    word: str,
    count: str,
    memory: str | None,
    cores: str | None,
    to_allocate: str | None,
    allocated: str | None,
    register: str | None,
    handshake: str | None,
    lock: str | None,
    unit: int,
    default_cores: int,
) -> None:
    row = _row(word)
    assert (row.count_resource, row.memory_resource, row.cores_resource) == (count, memory, cores)
    assert (row.devices_to_allocate_key, row.devices_allocated_key) == (to_allocate, allocated)
    assert (row.register_key, row.handshake_key, row.node_lock_key) == (register, handshake, lock)
    assert (row.memory_unit_mib, row.default_cores) == (unit, default_cores)
    assert not row.supports_percentage
    assert row.priority_resource is None


def test_register_encodings_and_selectors() -> None:
    assert _row("DCU").register_encoding == "colon"
    assert _row("AMD").register_encoding == "json"
    assert _row("MLU").register_encoding is None
    assert _row("AMD").limits_only
    assert not _row(NVIDIA).limits_only
    assert _row("AMD").use_type_key == "amd.com/use-gputype"
    assert _row("AMD").nouse_uuid_key == "amd.com/nouse-gpu-uuid"
    assert _row("MLU").use_uuid_key == "cambricon.com/use-gpuuuid"
    assert _row("DCU").nouse_type_key == "hygon.com/nouse-dcutype"
    assert _row("Metax-SGPU").use_uuid_key == "metax-tech.com/use-gpuuuid"


def test_iluvatar_and_ascend_rows_only_when_enabled() -> None:
    config = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    assert len(vendors_from_config(config)) == 7
    vendors = vendors_from_config(config, enable_iluvatar=True, enable_ascend=True)
    assert len(vendors) == 7 + 4 + 5
    bi = _row("BI-V150", vendors)
    assert (bi.count_resource, bi.memory_resource, bi.cores_resource) == (
        "iluvatar.ai/BI-V150-vgpu",
        "iluvatar.ai/BI-V150.vMem",
        "iluvatar.ai/BI-V150.vCore",
    )
    assert bi.devices_to_allocate_key == "hami.io/BI-V150-devices-to-allocate"
    assert bi.devices_allocated_key == "hami.io/BI-V150-devices-allocated"
    assert bi.handshake_key == "hami.io/node-handshake-BI-V150"
    assert bi.register_key == "hami.io/node-register-BI-V150"
    assert (bi.use_uuid_key, bi.nouse_uuid_key) == (
        "hami.io/use-BI-V150-uuid",
        "hami.io/no-use-BI-V150-uuid",
    )
    assert (bi.memory_unit_mib, bi.default_cores) == (256, 0)
    ascend = _row("Ascend910B", vendors)
    assert (ascend.count_resource, ascend.memory_resource, ascend.cores_resource) == (
        "huawei.com/Ascend910B",
        "huawei.com/Ascend910B-memory",
        None,
    )
    assert ascend.register_key == "hami.io/node-register-Ascend910B"
    assert ascend.register_encoding == "json"
    assert ascend.handshake_key == "hami.io/node-handshake-Ascend910B"
    assert ascend.devices_to_allocate_key == "hami.io/Ascend910B-devices-to-allocate"
    assert (ascend.memory_unit_mib, ascend.default_cores) == (1, 0)


def test_renamed_resources_and_settings_flow_into_rows() -> None:
    config = parse_device_config(
        """
nvidia:
  resourceCountName: example.com/vgpu
  resourceMemoryName: example.com/vmem
  resourceMemoryPercentageName: ""
  memoryFactor: 2
  defaultMemory: 1024
  defaultCores: 20
cambricon: {resourceCountName: example.com/mlu}
hygon: {memoryFactor: 4}
metax: {resourceVCountName: example.com/sgpu}
"""
    )
    vendors = vendors_from_config(config)
    nvidia = _row(NVIDIA, vendors)
    assert nvidia.count_resource == "example.com/vgpu"
    assert nvidia.memory_resource == "example.com/vmem"
    assert not nvidia.supports_percentage
    assert (nvidia.memory_factor, nvidia.default_memory, nvidia.default_cores) == (2, 1024, 20)
    assert nvidia.managed_resources == (
        "example.com/vgpu",
        "example.com/vmem",
        "nvidia.com/gpucores",
    )
    assert _row("MLU", vendors).count_resource == "example.com/mlu"
    assert _row("DCU", vendors).memory_factor == 4
    assert _row("Metax-SGPU", vendors).count_resource == "example.com/sgpu"


@pytest.mark.parametrize(
    "text",
    [
        "cambricon: {resourceCountName: nvidia.com/gpu}",
        "amd: {resourceMemoryName: nvidia.com/gpumem}",
        "iluvatars: [{commonWord: NVIDIA}]",
        "iluvatars: [{commonWord: A}, {commonWord: A}]",
        "iluvatars: [{commonWord: A, resourceCountName: amd.com/gpu}]",
    ],
)
def test_clashing_rows_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        vendors_from_config(parse_device_config(text), enable_iluvatar=True)


def test_vendor_by_word_is_exact() -> None:
    assert vendor_by_word(DEFAULT_VENDORS, "nvidia") is None
    assert vendor_by_word(DEFAULT_VENDORS, "NVIDIA") is DEFAULT_VENDORS[0]


def test_key_helpers_used_by_rows() -> None:
    assert keys.word_register_key("Ascend310P") == "hami.io/node-register-Ascend310P"
    assert keys.use_uuid_key("MR-V50") == "hami.io/use-MR-V50-uuid"
    assert keys.no_use_uuid_key("MR-V50") == "hami.io/no-use-MR-V50-uuid"
