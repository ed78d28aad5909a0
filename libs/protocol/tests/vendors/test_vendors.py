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
        "Biren",
        "Vastai",
        "kunlun",
        "XPU",
        "AWSNeuron",
        "GCU",
        "Enflame",
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
        inventory="register-json",
        health="handshake",
        fit="nvidia",
    )
    assert _row(NVIDIA).supports_percentage


# The contract's §1 rows: word, (count, memory, cores), (to-allocate, allocated),
# (register, encoding), handshake, lock, (memory unit, default cores), inventory source,
# inventory annotation, health rule, fit strategy, (use uuid, nouse uuid).
_CONTRACT_ROWS = [
    (
        "MLU",
        ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"),
        ("hami.io/cambricon-mlu-devices-to-allocate", "hami.io/cambricon-mlu-devices-allocated"),
        (None, None),
        None,
        "cambricon.com/dsmlu.lock",
        (256, 100),
        "capacity",
        None,
        "always",
        "standard",
        ("cambricon.com/use-gpuuuid", "cambricon.com/nouse-gpuuuid"),
    ),
    (
        "DCU",
        ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
        ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated"),
        ("hami.io/node-dcu-register", "colon"),
        "hami.io/node-handshake-dcu",
        "hami.io/mutex.lock",
        (1, 100),
        "register-colon",
        None,
        "handshake",
        "standard",
        ("hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid"),
    ),
    (
        "Mthreads",
        ("mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"),
        (None, "hami.io/mthreads-vgpu-devices-allocated"),
        (None, None),
        None,
        None,
        (512, 0),
        "capacity",
        None,
        "always",
        "standard",
        ("mthreads.ai/use-gpuuuid", "mthreads.ai/nouse-gpuuuid"),
    ),
    (
        "Metax-GPU",
        ("metax-tech.com/gpu", None, None),
        ("hami.io/metax-gpu-devices-to-allocate", "hami.io/metax-gpu-devices-allocated"),
        (None, None),
        None,
        None,
        (1, 100),
        "capacity",
        None,
        "capacity",
        "standard",
        (None, None),
    ),
    (
        "Metax-SGPU",
        ("metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore"),
        ("hami.io/metax-sgpu-devices-to-allocate", "hami.io/metax-sgpu-devices-allocated"),
        (None, None),
        None,
        "hami.io/mutex.lock",
        (1024, 0),
        "vendor-annotation",
        "metax-tech.com/node-gpu-devices",
        "reported",
        "metax-sgpu",
        ("metax-tech.com/use-gpuuuid", "metax-tech.com/nouse-gpuuuid"),
    ),
    (
        "AMD",
        ("amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores"),
        ("hami.io/amd-devices-to-allocate", "hami.io/amd-devices-allocated"),
        ("hami.io/node-amd-register", "json"),
        None,
        "hami.io/mutex.lock",
        (1, 100),
        "register-json",
        None,
        "capacity",
        "amd",
        ("amd.com/use-gpu-uuid", "amd.com/nouse-gpu-uuid"),
    ),
    (
        "Biren",
        ("birentech.com/gpu", None, None),
        ("hami.io/Biren-devices-to-allocate", "hami.io/Biren-devices-allocated"),
        ("hami.io/node-biren-register", "json"),
        "hami.io/node-handshake-biren",
        "hami.io/mutex.lock",
        (1, 0),
        "register-json",
        None,
        "handshake",
        "count-only",
        ("birentech.com/use-gpuuuid", "birentech.com/nouse-gpuuuid"),
    ),
    (
        "Vastai",
        ("vastaitech.com/va", None, None),
        ("hami.io/Vastai-devices-to-allocate", "hami.io/Vastai-devices-allocated"),
        ("hami.io/node-va-register", "json"),
        "hami.io/node-handshake-va",
        "hami.io/mutex.lock",
        (1, 0),
        "register-json",
        None,
        "handshake",
        "vastai",
        ("vastaitech.com/use-gpuuuid", "vastaitech.com/nouse-gpuuuid"),
    ),
    (
        "kunlun",
        ("kunlunxin.com/xpu", None, None),
        (None, "hami.io/kunlun-allocated"),
        (None, None),
        None,
        None,
        (1, 0),
        "capacity",
        None,
        "always",
        "kunlun",
        ("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
    ),
    (
        "XPU",
        ("kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory", None),
        ("hami.io/xpu-devices-to-allocate", "hami.io/xpu-devices-allocated"),
        ("hami.io/node-register-xpu", "json"),
        "hami.io/node-handshake-xpu",
        "hami.io/mutex.lock",
        (1, 0),
        "register-json",
        None,
        "handshake",
        "kunlun-vxpu",
        ("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
    ),
    (
        "AWSNeuron",
        ("aws.amazon.com/neuron", None, "aws.amazon.com/neuroncore"),
        (None, "hami.io/aws-neuron-devices-allocated"),
        (None, None),
        None,
        None,
        (1, 0),
        "capacity",
        None,
        "always",
        "awsneuron",
        ("aws.amazon.com/use-neuron-uuid", "aws.amazon.com/nouse-neuron-uuid"),
    ),
    (
        "GCU",
        ("enflame.com/gcu", None, None),
        ("hami.io/enflame-gcu-devices-to-allocate", "hami.io/enflame-gcu-devices-allocated"),
        (None, None),
        None,
        None,
        (1, 0),
        "capacity",
        None,
        "capacity",
        "exclusive",
        (None, None),
    ),
    (
        "Enflame",
        ("enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core"),
        (None, "hami.io/enflame-vgpu-devices-allocated"),
        (None, None),
        None,
        None,
        (1, 0),
        "vendor-annotation",
        "enflame.com/gcu-drs-capacity",
        "always",
        "enflame-drs",
        ("enflame.com/use-gpuuuid", "enflame.com/nouse-gpuuuid"),
    ),
]


@pytest.mark.parametrize("row", _CONTRACT_ROWS, ids=[row[0] for row in _CONTRACT_ROWS])
def test_vendor_rows_match_the_contract(row: tuple[object, ...]) -> None:
    (
        word,
        resources,
        pod_keys,
        register,
        handshake,
        lock,
        units,
        inventory,
        inv_key,
        health,
        fit,
        use,
    ) = row
    vendor = _row(str(word))
    assert (vendor.count_resource, vendor.memory_resource, vendor.cores_resource) == resources
    assert (vendor.devices_to_allocate_key, vendor.devices_allocated_key) == pod_keys
    assert (vendor.register_key, vendor.register_encoding) == register
    assert (vendor.handshake_key, vendor.node_lock_key) == (handshake, lock)
    assert (vendor.memory_unit_mib, vendor.default_cores) == units
    assert (vendor.inventory, vendor.inventory_key) == (inventory, inv_key)
    assert (vendor.capacity is not None) == (inventory == "capacity")
    assert (vendor.health, vendor.fit) == (health, fit)
    assert (vendor.use_uuid_key, vendor.nouse_uuid_key) == use
    assert not vendor.supports_percentage
    assert vendor.priority_resource is None


def test_every_row_is_in_the_contract_table() -> None:
    assert {row.common_word for row in DEFAULT_VENDORS} == {NVIDIA} | {
        str(row[0]) for row in _CONTRACT_ROWS
    }


def test_locks_follow_the_contract() -> None:
    # contract §0: HAMi's mutex for these, Cambricon its own key, none for the rest.
    hami_lock = {"NVIDIA", "AMD", "Biren", "DCU", "XPU", "Metax-SGPU", "Vastai"}
    vendors = vendors_from_config(
        parse_device_config(DEFAULT_DEVICE_CONFIG_YAML), enable_ascend=True, enable_iluvatar=True
    )
    for row in vendors:
        if row.common_word == "MLU":
            assert row.node_lock_key == keys.CAMBRICON_DSMLU_LOCK
        elif (
            row.common_word in hami_lock or row.fit == "ascend" or row.inventory == "register-colon"
        ):
            assert row.node_lock_key == keys.NODE_LOCK, row.common_word
        else:
            assert row.node_lock_key is None, row.common_word


def test_inventory_sources_are_consistent() -> None:
    for row in DEFAULT_VENDORS:
        has_register = row.register_key is not None
        assert has_register == row.inventory.startswith("register-"), row.common_word
        if has_register:
            assert f"register-{row.register_encoding}" == row.inventory
        assert (row.inventory_key is not None) == (row.inventory == "vendor-annotation")
        assert (row.handshake_key is not None) == (row.health == "handshake")


def test_capacity_specs() -> None:
    mlu = _row("MLU").capacity
    assert mlu is not None
    assert (mlu.strategy, mlu.id_infix, mlu.device_type) == ("per-unit", "cambricon-mlu", "MLU")
    assert (mlu.units_resource, mlu.memory_resource) == (
        "cambricon.com/mlu.smlu.vcore",
        "cambricon.com/mlu.smlu.vmemory",
    )
    assert (mlu.units_per_device, mlu.count, mlu.devcore, mlu.memory_unit_mib) == (
        100,
        100,
        100,
        256,
    )
    mt = _row("Mthreads").capacity
    assert mt is not None
    assert (mt.units_per_device, mt.count, mt.devcore, mt.memory_unit_mib) == (16, 100, 16, 512)
    metax = _row("Metax-GPU").capacity
    assert metax is not None
    assert (metax.id_infix, metax.count, metax.devmem, metax.devcore) == ("metax", 1, 65536, 100)
    kunlun = _row("kunlun").capacity
    assert kunlun is not None
    assert (kunlun.count, kunlun.devmem, kunlun.devcore, kunlun.split_numa) == (
        100,
        98304,
        100,
        True,
    )
    gcu = _row("GCU").capacity
    assert gcu is not None
    assert (gcu.id_infix, gcu.count, gcu.devmem, gcu.devcore) == ("GCU", 1, 100, 100)
    aws = _row("AWSNeuron").capacity
    assert aws is not None
    assert (aws.strategy, aws.id_infix, aws.cores_resource) == (
        "awsneuron",
        "AWSNeuron",
        "aws.amazon.com/neuroncore",
    )


def test_kunlun_also_honours_baidu_selectors() -> None:
    kunlun = _row("kunlun")
    assert (kunlun.legacy_use_uuid_key, kunlun.legacy_nouse_uuid_key) == (
        "baidu.com/use-gpuuuid",
        "baidu.com/nouse-gpuuuid",
    )


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
    assert len(vendors_from_config(config)) == 14
    vendors = vendors_from_config(config, enable_iluvatar=True, enable_ascend=True)
    assert len(vendors) == 14 + 4 + 7
    assert [row.common_word for row in vendors[14 + 4 :]] == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4-1",
        "Ascend910B4",
        "Ascend310P",
        "Ascend910C",
    ]
    bi = _row("BI-V150", vendors)
    assert (bi.count_resource, bi.memory_resource, bi.cores_resource) == (
        "iluvatar.ai/BI-V150-vgpu",
        "iluvatar.ai/BI-V150.vMem",
        "iluvatar.ai/BI-V150.vCore",
    )
    assert bi.devices_to_allocate_key == "hami.io/BI-V150-devices-to-allocate"
    assert bi.devices_allocated_key == "hami.io/BI-V150-devices-allocated"
    assert bi.handshake_key == "hami.io/node-handshake-BI-V150"
    assert bi.register_key == "hami.io/node-BI-V150-register"
    assert (bi.register_encoding, bi.inventory, bi.fit) == ("colon", "register-colon", "standard")
    assert (bi.use_uuid_key, bi.nouse_uuid_key) == (
        "hami.io/use-BI-V150-uuid",
        "hami.io/no-use-BI-V150-uuid",
    )
    assert (bi.memory_unit_mib, bi.default_cores) == (256, 0)
    ascend = _row("Ascend910B3", vendors)
    assert (ascend.count_resource, ascend.memory_resource, ascend.cores_resource) == (
        "huawei.com/Ascend910B3",
        "huawei.com/Ascend910B3-memory",
        "huawei.com/Ascend910B3-core",
    )
    assert ascend.register_key == "hami.io/node-register-Ascend910B3"
    assert (ascend.register_encoding, ascend.inventory, ascend.fit) == (
        "json",
        "register-json",
        "ascend",
    )
    assert ascend.handshake_key == "hami.io/node-handshake-Ascend910B3"
    assert ascend.devices_to_allocate_key == "hami.io/Ascend910B3-devices-to-allocate"
    assert ascend.devices_allocated_key == "hami.io/Ascend910B3-devices-allocated"
    assert (ascend.use_uuid_key, ascend.nouse_uuid_key) == (
        "hami.io/use-Ascend910B3-uuid",
        "hami.io/no-use-Ascend910B3-uuid",
    )
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
kunlun: {resourceCountName: example.com/xpu}
enflame:
  resourceNameGCU: example.com/gcu
  resourceNameDRSGCU: ""
  resourceNameVGCU: example.com/vgcu
awsneuron: {resourceCoreName: example.com/core}
biren: {resourceCountName: example.com/br}
vastai: {resourceCountName: example.com/va}
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
    kunlun = _row("kunlun", vendors)
    assert kunlun.count_resource == "example.com/xpu"
    assert kunlun.capacity is not None
    assert kunlun.capacity.units_resource == "example.com/xpu"
    gcu = _row("GCU", vendors)
    assert gcu.capacity is not None
    assert gcu.capacity.units_resource == "example.com/gcu"
    assert _row("Enflame", vendors).count_resource == "example.com/vgcu"
    aws = _row("AWSNeuron", vendors)
    assert aws.cores_resource == "example.com/core"
    assert aws.capacity is not None
    assert aws.capacity.cores_resource == "example.com/core"
    assert _row("Biren", vendors).count_resource == "example.com/br"
    assert _row("Vastai", vendors).count_resource == "example.com/va"


@pytest.mark.parametrize(
    "text",
    [
        "cambricon: {resourceCountName: nvidia.com/gpu}",
        "amd: {resourceMemoryName: nvidia.com/gpumem}",
        "iluvatars: [{commonWord: NVIDIA}]",
        "iluvatars: [{commonWord: A}, {commonWord: A}]",
        "iluvatars: [{commonWord: A, resourceCountName: amd.com/gpu}]",
        "kunlun: {resourceVCountName: kunlunxin.com/xpu}",
        "biren: {resourceCountName: vastaitech.com/va}",
        "enflame: {resourceNameGCU: enflame.com/drs-gcu}",
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
    assert keys.node_register_key("MR-V50") == "hami.io/node-MR-V50-register"
    assert keys.use_uuid_key("MR-V50") == "hami.io/use-MR-V50-uuid"
    assert keys.no_use_uuid_key("MR-V50") == "hami.io/no-use-MR-V50-uuid"
