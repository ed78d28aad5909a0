"""Every vendor section of ``device-config.yaml``: the chart's defaults, renamed values flowing
through, errors naming the field path, unknown keys as warnings."""

from __future__ import annotations

import pytest

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import DeviceConfig, parse_device_config
from hami_protocol.config.vendor_blocks import AwsNeuronConfig, EnflameConfig, KunlunConfig
from hami_protocol.errors import ConfigError


def test_chart_text_equals_the_built_in_defaults_for_every_block() -> None:
    parsed = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    built_in = DeviceConfig()
    for name in (
        "cambricon",
        "hygon",
        "metax",
        "mthreads",
        "amd",
        "awsneuron",
        "biren",
        "enflame",
        "kunlun",
        "vastai",
    ):
        assert getattr(parsed, name) == getattr(built_in, name), name
    assert parsed.warnings == ()


def test_chart_defaults_of_the_later_vendors() -> None:
    config = DeviceConfig()
    assert config.awsneuron == AwsNeuronConfig("aws.amazon.com/neuron", "aws.amazon.com/neuroncore")
    assert config.kunlun == KunlunConfig(
        "kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"
    )
    assert config.enflame == EnflameConfig(
        "enflame.com/gcu", "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core"
    )
    assert config.biren.resource_count_name == "birentech.com/gpu"
    assert config.vastai.resource_count_name == "vastaitech.com/va"
    assert config.mthreads.memory_per_card == (96,)
    assert config.metax.sgpu_topology_aware is False


def test_every_key_of_the_later_vendors_is_read() -> None:
    config = parse_device_config(
        """
awsneuron: {resourceCountName: a/n, resourceCoreName: a/c}
biren: {resourceCountName: b/g}
vastai: {resourceCountName: v/va}
kunlun: {resourceCountName: k/x, resourceVCountName: k/vx, resourceVMemoryName: k/vm}
enflame:
  resourceNameGCU: e/gcu
  resourceNameDRSGCU: e/drs
  resourceNameGCUMemory: e/mem
  resourceNameGCUCore: e/core
  resourceNameVGCU: e/vgcu
  resourceNameVGCUPercentage: e/pct
mthreads: {memoryPerCard: [96, 160]}
metax: {sgpuTopologyAware: true}
"""
    )
    assert config.awsneuron == AwsNeuronConfig("a/n", "a/c")
    assert config.biren.resource_count_name == "b/g"
    assert config.vastai.resource_count_name == "v/va"
    assert config.kunlun == KunlunConfig("k/x", "k/vx", "k/vm")
    assert config.enflame == EnflameConfig("e/gcu", "e/drs", "e/mem", "e/core", "e/vgcu", "e/pct")
    assert config.mthreads.memory_per_card == (96, 160)
    assert config.metax.sgpu_topology_aware is True
    assert config.warnings == ()


@pytest.mark.parametrize(
    ("text", "drs"),
    [
        ("enflame: {resourceNameVGCU: e/vgcu}", "e/vgcu"),
        ('enflame: {resourceNameDRSGCU: "", resourceNameVGCU: e/vgcu}', "e/vgcu"),
        ('enflame: {resourceNameDRSGCU: ""}', "enflame.com/drs-gcu"),
        ("enflame: {resourceNameDRSGCU: e/drs, resourceNameVGCU: e/vgcu}", "e/drs"),
    ],
)
def test_enflame_drs_name_falls_back_as_hami_does(text: str, drs: str) -> None:
    assert parse_device_config(text).enflame.resource_name_drs_gcu == drs


def test_legacy_mthreads_scalar_card_size() -> None:
    assert parse_device_config("mthreads: {memoryPerCard: 160}").mthreads.memory_per_card == (160,)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("awsneuron: []", "awsneuron"),
        ('awsneuron: {resourceCountName: ""}', "awsneuron.resourceCountName"),
        ("awsneuron: {resourceCoreName: 5}", "awsneuron.resourceCoreName"),
        ('biren: {resourceCountName: ""}', "biren.resourceCountName"),
        ("vastai: {resourceCountName: [x]}", "vastai.resourceCountName"),
        ('kunlun: {resourceVCountName: ""}', "kunlun.resourceVCountName"),
        ("kunlun: {resourceVMemoryName: 1}", "kunlun.resourceVMemoryName"),
        ("kunlun: 3", "kunlun"),
        ('enflame: {resourceNameGCU: ""}', "enflame.resourceNameGCU"),
        ("enflame: {resourceNameGCUCore: {a: 1}}", "enflame.resourceNameGCUCore"),
        ("mthreads: {memoryPerCard: [96, x]}", "mthreads.memoryPerCard[1]"),
        ("mthreads: {memoryPerCard: [0]}", "mthreads.memoryPerCard[0]"),
        ("mthreads: {memoryPerCard: []}", "mthreads.memoryPerCard"),
        ("mthreads: {memoryPerCard: true}", "mthreads.memoryPerCard"),
        ('metax: {sgpuTopologyAware: "false"}', "metax.sgpuTopologyAware"),
        ('metax: {resourceVCountName: ""}', "metax.resourceVCountName"),
        ("hygon: {memoryFactor: 0}", "hygon.memoryFactor"),
        ("amd: {resourceCoreName: 1}", "amd.resourceCoreName"),
        ('cambricon: {resourceCountName: ""}', "cambricon.resourceCountName"),
        ("iluvatars: [{chipName: X, resourceMemoryName: 3}]", "iluvatars[0].resourceMemoryName"),
        ("vnpus: {hamiVnpuCore: maybe}", "vnpus.hamiVnpuCore"),
        ("vnpus: {configs: [{chipName: x}]}", "vnpus.configs[0].commonWord"),
        ("vnpus: {configs: [{commonWord: A, superPod: 1}]}", "vnpus.configs[0].superPod"),
        (
            'vnpus: {configs: [{commonWord: A, overwriteEnv: "no"}]}',
            "vnpus.configs[0].overwriteEnv",
        ),
        (
            "vnpus: {configs: [{commonWord: A, runtimeClassName: 1}]}",
            "vnpus.configs[0].runtimeClassName",
        ),
        (
            "vnpus: {configs: [{commonWord: A, memoryCapacity: -1}]}",
            "vnpus.configs[0].memoryCapacity",
        ),
        (
            "vnpus: {configs: [{commonWord: A, templates: [{name: t}]}]}",
            "vnpus.configs[0].templates[0].memory",
        ),
        (
            "vnpus: {configs: [{commonWord: A, templates: [{memory: 2}]}]}",
            "vnpus.configs[0].templates[0].name",
        ),
        (
            "vnpus: {configs: [{commonWord: A, "
            "templates: [{name: t, memory: 1}, {name: t, memory: 2}]}]}",
            "vnpus.configs[0].templates[1].name",
        ),
        ("vnpus: {configs: [{commonWord: A}, {commonWord: A}]}", "vnpus.configs[1].commonWord"),
        ("vnpus: [{commonWord: A, templates: 3}]", "vnpus[0].templates"),
    ],
)
def test_errors_name_the_field_path(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_device_config(text)
    assert caught.value.key == path


def test_unknown_keys_of_every_block_are_warnings() -> None:
    text = "\n".join(
        f"{name}: {{resourceCountName: x.com/{name}, oops: 1}}"
        for name in ("awsneuron", "biren", "vastai", "kunlun", "cambricon", "hygon", "amd")
    )
    text += "\nenflame: {oops: 1}\nmetax: {oops: 1}\nmthreads: {oops: 1}\n"
    text += "vnpus: {configs: [{commonWord: A, oops: 1}]}\niluvatars: [{chipName: X, oops: 1}]\n"
    warnings = set(parse_device_config(text).warnings)
    assert warnings == {
        "unknown key awsneuron.oops",
        "unknown key biren.oops",
        "unknown key vastai.oops",
        "unknown key kunlun.oops",
        "unknown key cambricon.oops",
        "unknown key hygon.oops",
        "unknown key amd.oops",
        "unknown key enflame.oops",
        "unknown key metax.oops",
        "unknown key mthreads.oops",
        "unknown key vnpus.configs[0].oops",
        "unknown key iluvatars[0].oops",
    }


def test_ascend_figures_that_cannot_be_meant_are_warnings() -> None:
    config = parse_device_config(
        """
vnpus:
  configs:
    - commonWord: A
      memoryAllocatable: 5000
      memoryCapacity: 4096
      templates: [{name: big, memory: 8192}, {name: small, memory: 1024}]
"""
    )
    assert [t.name for t in config.vnpus.configs[0].templates] == ["small", "big"]
    assert set(config.warnings) == {
        "vnpus.configs[0].memoryAllocatable 5000 exceeds memoryCapacity 4096",
        "vnpus.configs[0].templates big memory 8192 exceeds memoryCapacity 4096",
    }


def test_ascend_chip_keys() -> None:
    config = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    c = config.vnpus.configs[-1]
    assert (c.chip_name, c.common_word, c.super_pod, c.memory_allocatable, c.memory_capacity) == (
        "Ascend910",
        "Ascend910C",
        True,
        65536,
        65536,
    )
    assert (c.resource_name, c.resource_memory_name, c.resource_core_name) == (
        "huawei.com/Ascend910C",
        "huawei.com/Ascend910C-memory",
        "huawei.com/Ascend910C-core",
    )
    assert [(t.name, t.memory, t.ai_core, t.ai_cpu) for t in c.templates] == [
        ("vir05_1c_16g", 16384, 5, 1),
        ("vir10_3c_32g", 32768, 10, 3),
    ]
    p310 = config.vnpus.configs[5]
    assert (p310.common_word, p310.memory_allocatable, p310.memory_capacity) == (
        "Ascend310P",
        21527,
        24576,
    )
    assert not config.vnpus.hami_vnpu_core
    renamed = parse_device_config(
        "vnpus: {hamiVnpuCore: true, configs: [{commonWord: X, runtimeClassName: ascend, "
        "overwriteEnv: true, memoryFactor: 2}]}"
    )
    chip = renamed.vnpus.configs[0]
    assert renamed.vnpus.hami_vnpu_core
    assert (chip.runtime_class_name, chip.overwrite_env, chip.memory_factor) == ("ascend", True, 2)
    assert (chip.resource_name, chip.resource_memory_name) == (
        "huawei.com/X",
        "huawei.com/X-memory",
    )
