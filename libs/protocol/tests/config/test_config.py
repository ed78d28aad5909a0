"""device-config.yaml and per-node config.json: defaults, validation, warnings, node overrides."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import (
    DeviceConfig,
    MigProfileAllow,
    NodeDefaults,
    NvidiaConfig,
    device_config_from_mapping,
    parse_device_config,
)
from hami_protocol.config.node import (
    FilterDevices,
    NodeConfigEntry,
    NodeSettings,
    effective_node_config,
    node_configs_from_mapping,
    parse_node_configs,
)
from hami_protocol.config.vendor_sections import AscendTemplate
from hami_protocol.errors import ConfigError

# --- device-config.yaml: defaults ------------------------------------------------------------


def test_empty_document_gives_chart_defaults() -> None:
    config = parse_device_config("")
    assert config == DeviceConfig()
    nvidia = config.nvidia
    assert nvidia.resource_count_name == "nvidia.com/gpu"
    assert nvidia.resource_memory_name == "nvidia.com/gpumem"
    assert nvidia.resource_memory_percentage_name == "nvidia.com/gpumem-percentage"
    assert nvidia.resource_core_name == "nvidia.com/gpucores"
    assert nvidia.resource_priority_name == "nvidia.com/priority"
    assert (nvidia.default_memory, nvidia.default_cores, nvidia.default_gpu_num) == (0, 0, 1)
    assert nvidia.memory_factor == 1
    assert nvidia.gpu_core_policy == "default"
    assert nvidia.overwrite_env is False
    assert nvidia.disable_core_limit is False
    assert nvidia.runtime_class_name == ""
    assert nvidia.node_defaults == NodeDefaults(
        device_split_count=10,
        device_memory_scaling=1.0,
        device_core_scaling=1.0,
        preconfigured_device_memory=0,
        lib_cuda_log_level="1",
        enable_numa_topology=False,
    )
    assert config.cambricon.resource_count_name == "cambricon.com/vmlu"
    assert config.hygon.resource_memory_name == "hygon.com/dcumem"
    assert config.metax.resource_vcount_name == "metax-tech.com/sgpu"
    assert config.iluvatars == ()
    assert config.vnpus.configs == ()
    assert config.warnings == ()


@pytest.mark.parametrize("text", ["", "# nothing\n", "~", "nvidia:\n", "nvidia: {}\n"])
def test_blank_documents_are_defaults(text: str) -> None:
    assert parse_device_config(text).nvidia == NvidiaConfig()


def test_chart_default_text_parses_cleanly() -> None:
    config = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    assert config.warnings == ()
    assert config.nvidia.node_defaults == NodeDefaults()
    assert config.nvidia.mig_profile_allowlist[0] == MigProfileAllow(
        models=("A30",), profiles=("1g.6gb", "2g.12gb", "4g.24gb")
    )
    assert len(config.nvidia.mig_profile_allowlist) == 9
    assert [chip.common_word for chip in config.iluvatars] == [
        "MR-V100",
        "MR-V50",
        "BI-V150",
        "BI-V100",
    ]
    words = [chip.common_word for chip in config.vnpus.configs]
    assert words == [
        "Ascend910A",
        "Ascend910B2",
        "Ascend910B3",
        "Ascend910B4-1",
        "Ascend910B4",
        "Ascend310P",
        "Ascend910C",
    ]
    assert [chip.super_pod for chip in config.vnpus.configs] == [False] * 6 + [True]
    assert config.vnpus.configs[2].resource_core_name == "huawei.com/Ascend910B3-core"
    assert config.vnpus.configs[0].templates[0] == AscendTemplate("vir02", 2184, 2, 0)
    # apart from the lists, the chart text says exactly what the built-in defaults say
    assert config.nvidia == NvidiaConfig(mig_profile_allowlist=config.nvidia.mig_profile_allowlist)


def test_every_nvidia_key_is_read() -> None:
    text = """
nvidia:
  resourceCountName: example.com/vgpu
  resourceMemoryName: example.com/vmem
  resourceMemoryPercentageName: ""
  resourceCoreName: example.com/vcores
  resourcePriorityName: example.com/prio
  overwriteEnv: true
  defaultMemory: 512
  defaultCores: 30
  defaultGPUNum: 0
  memoryFactor: 4
  disableCoreLimit: true
  migProfileAllowlist: [{models: [A100], profiles: [1g.5gb]}]
  gpuCorePolicy: force
  runtimeClassName: nvidia
  deviceSplitCount: 4
  deviceMemoryScaling: 1.5
  deviceCoreScaling: 2
  preConfiguredDeviceMemory: 98304
  libCudaLogLevel: 4
  enableNumaTopology: true
"""
    nvidia = parse_device_config(text).nvidia
    assert nvidia == NvidiaConfig(
        resource_count_name="example.com/vgpu",
        resource_memory_name="example.com/vmem",
        resource_memory_percentage_name=None,
        resource_core_name="example.com/vcores",
        resource_priority_name="example.com/prio",
        overwrite_env=True,
        default_memory=512,
        default_cores=30,
        default_gpu_num=0,
        memory_factor=4,
        disable_core_limit=True,
        mig_profile_allowlist=(MigProfileAllow(("A100",), ("1g.5gb",)),),
        gpu_core_policy="force",
        runtime_class_name="nvidia",
        node_defaults=NodeDefaults(4, 1.5, 2.0, 98304, "4", True),
    )


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("nvidia: {gpuCorePolicy: ''}", lambda c: c.nvidia.gpu_core_policy == "default"),
        (
            "nvidia: {libCudaLogLevel: '0'}",
            lambda c: c.nvidia.node_defaults.lib_cuda_log_level == "0",
        ),
        (
            "nvidia: {deviceSplitCount: 10.0}",
            lambda c: c.nvidia.node_defaults.device_split_count == 10,
        ),
        ("nvidia: {memoryFactor: null}", lambda c: c.nvidia.memory_factor == 1),
        ("hygon: {memoryFactor: 2}", lambda c: c.hygon.memory_factor == 2),
        (
            "vnpus: [{commonWord: Ascend310P}]",
            lambda c: c.vnpus.configs[0].resource_name == "huawei.com/Ascend310P",
        ),
        ("vnpus: {hamiVnpuCore: true}", lambda c: c.vnpus.hami_vnpu_core is True),
        (
            "iluvatars: [{chipName: BI-V150}]",
            lambda c: c.iluvatars[0].resource_memory_name == "iluvatar.ai/BI-V150.vMem",
        ),
        ("metax: {sgpuTopologyAware: true}", lambda c: c.metax.sgpu_topology_aware is True),
    ],
)
def test_lenient_but_typed_values(text: str, check: Any) -> None:
    assert check(parse_device_config(text))


def test_ascend_templates_are_sorted_by_memory() -> None:
    text = """
vnpus:
  configs:
    - commonWord: Ascend310P
      templates: [{name: big, memory: 12288}, {name: small, memory: 3072}]
"""
    templates = parse_device_config(text).vnpus.configs[0].templates
    assert [template.name for template in templates] == ["small", "big"]


# --- device-config.yaml: validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("nvidia: {memoryFactor: 0}", "nvidia.memoryFactor"),
        ("nvidia: {memoryFactor: -1}", "nvidia.memoryFactor"),
        ("nvidia: {memoryFactor: '2'}", "nvidia.memoryFactor"),
        ("nvidia: {memoryFactor: 1.5}", "nvidia.memoryFactor"),
        ("nvidia: {memoryFactor: true}", "nvidia.memoryFactor"),
        ("nvidia: {memoryFactor: 4294967296}", "nvidia.memoryFactor"),
        ("nvidia: {deviceSplitCount: 0}", "nvidia.deviceSplitCount"),
        ("nvidia: {deviceSplitCount: -3}", "nvidia.deviceSplitCount"),
        ("nvidia: {deviceSplitCount: ten}", "nvidia.deviceSplitCount"),
        ("nvidia: {deviceMemoryScaling: 0}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {deviceMemoryScaling: -1.5}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {deviceMemoryScaling: .nan}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {deviceMemoryScaling: .inf}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {deviceMemoryScaling: big}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {deviceMemoryScaling: true}", "nvidia.deviceMemoryScaling"),
        ("nvidia: {deviceCoreScaling: 0}", "nvidia.deviceCoreScaling"),
        ("nvidia: {gpuCorePolicy: sometimes}", "nvidia.gpuCorePolicy"),
        ("nvidia: {gpuCorePolicy: 1}", "nvidia.gpuCorePolicy"),
        ("nvidia: {libCudaLogLevel: 2}", "nvidia.libCudaLogLevel"),
        ("nvidia: {libCudaLogLevel: debug}", "nvidia.libCudaLogLevel"),
        ("nvidia: {libCudaLogLevel: true}", "nvidia.libCudaLogLevel"),
        ("nvidia: {defaultMemory: -1}", "nvidia.defaultMemory"),
        ("nvidia: {defaultCores: 101}", "nvidia.defaultCores"),
        ("nvidia: {defaultCores: -1}", "nvidia.defaultCores"),
        ("nvidia: {defaultGPUNum: -1}", "nvidia.defaultGPUNum"),
        ("nvidia: {preConfiguredDeviceMemory: -1}", "nvidia.preConfiguredDeviceMemory"),
        ("nvidia: {enableNumaTopology: 3}", "nvidia.enableNumaTopology"),
        ("nvidia: {overwriteEnv: sure}", "nvidia.overwriteEnv"),
        ("nvidia: {disableCoreLimit: 1}", "nvidia.disableCoreLimit"),
        ("nvidia: {resourceCountName: ''}", "nvidia.resourceCountName"),
        ("nvidia: {resourceCountName: 5}", "nvidia.resourceCountName"),
        ("nvidia: {resourceMemoryName: [a]}", "nvidia.resourceMemoryName"),
        ("nvidia: {runtimeClassName: 7}", "nvidia.runtimeClassName"),
        ("nvidia: {migProfileAllowlist: {a: 1}}", "nvidia.migProfileAllowlist"),
        ("nvidia: {migProfileAllowlist: [5]}", "nvidia.migProfileAllowlist[0]"),
        (
            "nvidia: {migProfileAllowlist: [{models: [A100]}]}",
            "nvidia.migProfileAllowlist[0].profiles",
        ),
        (
            "nvidia: {migProfileAllowlist: [{profiles: [1g.5gb]}]}",
            "nvidia.migProfileAllowlist[0].models",
        ),
        (
            "nvidia: {migProfileAllowlist: [{models: [A100, 3], profiles: [x]}]}",
            "nvidia.migProfileAllowlist[0].models[1]",
        ),
        (
            "nvidia: {migProfileAllowlist: [{models: [''], profiles: [x]}]}",
            "nvidia.migProfileAllowlist[0].models",
        ),
        ("nvidia: [1, 2]", "nvidia"),
        ("[1, 2]", "device-config.yaml"),
        ("42", "device-config.yaml"),
        ("{1: 2}", "device-config.yaml"),
        ("nvidia: [", "device-config.yaml"),
        ("a: 2020-99-99", "device-config.yaml"),
        ("a: *missing", "device-config.yaml"),
        ("hygon: {memoryFactor: 0}", "hygon.memoryFactor"),
        ("cambricon: {resourceCountName: ''}", "cambricon.resourceCountName"),
        ("cambricon: 5", "cambricon"),
        ("metax: {resourceVCountName: ''}", "metax.resourceVCountName"),
        ("metax: {sgpuTopologyAware: maybe}", "metax.sgpuTopologyAware"),
        ("iluvatars: {a: 1}", "iluvatars"),
        ("iluvatars: [{resourceCountName: x}]", "iluvatars[0].commonWord"),
        ("iluvatars: [{chipName: X, resourceCountName: ''}]", "iluvatars[0].resourceCountName"),
        ("vnpus: 5", "vnpus"),
        ("vnpus: {configs: [{chipName: 910B}]}", "vnpus.configs[0].commonWord"),
        ("vnpus: [{commonWord: A, memoryFactor: 0}]", "vnpus[0].memoryFactor"),
        ("vnpus: [{commonWord: A, templates: [{name: v}]}]", "vnpus[0].templates[0].memory"),
        ("vnpus: [{commonWord: A, templates: [{memory: 4}]}]", "vnpus[0].templates[0].name"),
        ("vnpus: [{commonWord: A, superPod: 2}]", "vnpus[0].superPod"),
    ],
)
def test_invalid_values_name_the_field(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_device_config(text)
    assert caught.value.key == path
    assert str(caught.value).startswith(f"{path}: ")


def test_error_message_quotes_the_value() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_device_config("nvidia: {gpuCorePolicy: sometimes}")
    assert caught.value.value == "sometimes"
    assert "'sometimes'" in str(caught.value)
    assert "default, force, disable" in str(caught.value)


def test_non_text_input_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_device_config(b"nvidia: {}")  # type: ignore[arg-type]


# --- device-config.yaml: warnings ------------------------------------------------------------


def test_unknown_keys_are_tolerated_and_reported() -> None:
    text = """
nvidia:
  fooBar: 1
  knownMigGeometries: []
cambricon: {resourceCountName: x.com/mlu, extra: true}
mystery: {}
iluvatar: {resourceCountName: old}
enflame: {resourceCountName: enflame.com/vgcu}
kunlun: {resourceCountName: kunlunxin.com/xpu}
vnpus: {configs: [{commonWord: A, color: blue}], other: 1}
"""
    config = parse_device_config(text)
    assert config.cambricon.resource_count_name == "x.com/mlu"
    assert set(config.warnings) == {
        "unknown key nvidia.fooBar",
        "legacy key nvidia.knownMigGeometries ignored; "
        "list profiles in nvidia.migProfileAllowlist instead",
        "unknown key cambricon.extra",
        "unknown key mystery",
        "legacy section iluvatar ignored; list chips under iluvatars instead",
        "unknown key vnpus.other",
        "unknown key vnpus.configs[0].color",
        "unknown key enflame.resourceCountName",
    }


# --- config.json: parsing --------------------------------------------------------------------

_EXAMPLE = {
    "nodeconfig": [
        {
            "name": "mig-node",
            "operatingmode": "mig",
            "devicesplitcount": 4,
            "devicememoryscaling": 1.5,
            "devicecorescaling": 2,
            "preconfigureddevicememory": 0,
            "libcudaloglevel": "3",
            "enablenumatopology": True,
            "migstrategy": "mixed",
            "filterdevices": {"uuid": ["GPU-a"], "index": [3]},
            "enablegetpreferredallocation": True,
        },
        {"name": "plain-node"},
    ]
}


def test_node_config_entries_parse() -> None:
    document = parse_node_configs(json.dumps(_EXAMPLE))
    assert document.warnings == ()
    assert document.entries == (
        NodeConfigEntry(
            name="mig-node",
            operating_mode="mig",
            device_split_count=4,
            device_memory_scaling=1.5,
            device_core_scaling=2.0,
            preconfigured_device_memory=0,
            lib_cuda_log_level="3",
            enable_numa_topology=True,
            mig_strategy="mixed",
            filter_devices=FilterDevices(uuids=("GPU-a",), indexes=(3,)),
            enable_get_preferred_allocation=True,
        ),
        NodeConfigEntry(name="plain-node"),
    )


def test_node_config_keys_are_case_insensitive_and_unknown_keys_warn() -> None:
    text = (
        '{"NodeConfig": [{"Name": "n1", "deviceSplitCount": 3,'
        ' "FilterDevices": {"UUID": ["g"]}, "x": 1}]}'
    )
    document = parse_node_configs(text)
    assert document.entries[0].device_split_count == 3
    assert document.entries[0].filter_devices == FilterDevices(uuids=("g",))
    assert document.warnings == ("unknown key nodeconfig[0].x",)


@pytest.mark.parametrize("text", ["", "  \n", "{}", "null", '{"nodeconfig": null}'])
def test_blank_node_config_has_no_entries(text: str) -> None:
    assert parse_node_configs(text).entries == ()


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ("{", "config.json"),
        ("[1]", "config.json"),
        ('{"nodeconfig": {}}', "nodeconfig"),
        ('{"nodeconfig": [1]}', "nodeconfig[0]"),
        ('{"nodeconfig": [{}]}', "nodeconfig[0].name"),
        ('{"nodeconfig": [{"name": 5}]}', "nodeconfig[0].name"),
        (
            '{"nodeconfig": [{"name": "n", "operatingmode": "turbo"}]}',
            "nodeconfig[0].operatingmode",
        ),
        (
            '{"nodeconfig": [{"name": "n", "devicesplitcount": 0}]}',
            "nodeconfig[0].devicesplitcount",
        ),
        (
            '{"nodeconfig": [{"name": "n", "devicesplitcount": "4"}]}',
            "nodeconfig[0].devicesplitcount",
        ),
        (
            '{"nodeconfig": [{"name": "n", "devicememoryscaling": -1}]}',
            "nodeconfig[0].devicememoryscaling",
        ),
        (
            '{"nodeconfig": [{"name": "n", "devicecorescaling": NaN}]}',
            "nodeconfig[0].devicecorescaling",
        ),
        (
            '{"nodeconfig": [{"name": "n", "preconfigureddevicememory": -5}]}',
            "nodeconfig[0].preconfigureddevicememory",
        ),
        (
            '{"nodeconfig": [{"name": "n", "libcudaloglevel": "9"}]}',
            "nodeconfig[0].libcudaloglevel",
        ),
        (
            '{"nodeconfig": [{"name": "n", "enablenumatopology": "yes"}]}',
            "nodeconfig[0].enablenumatopology",
        ),
        ('{"nodeconfig": [{"name": "n", "filterdevices": []}]}', "nodeconfig[0].filterdevices"),
        (
            '{"nodeconfig": [{"name": "n", "filterdevices": {"index": [-1]}}]}',
            "nodeconfig[0].filterdevices.index[0]",
        ),
        (
            '{"nodeconfig": [{"name": "n", "filterdevices": {"uuid": [1]}}]}',
            "nodeconfig[0].filterdevices.uuid[0]",
        ),
        (
            '{"nodeconfig": [{"name": "n", "enablegetpreferredallocation": 1}]}',
            "nodeconfig[0].enablegetpreferredallocation",
        ),
    ],
)
def test_invalid_node_config_names_the_field(document: str, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_node_configs(document)
    assert caught.value.key == path


# --- config.json: effective settings (mergo WithOverride) --------------------------------------


def _device_config() -> DeviceConfig:
    return parse_device_config(
        "nvidia: {deviceSplitCount: 8, deviceMemoryScaling: 2, libCudaLogLevel: 1, "
        "preConfiguredDeviceMemory: 4096, enableNumaTopology: true}"
    )


def test_node_without_entry_gets_the_yaml_defaults() -> None:
    entries = parse_node_configs(json.dumps(_EXAMPLE)).entries
    assert effective_node_config(_device_config(), entries, "other-node") == NodeSettings(
        operating_mode="hami-core",
        device_split_count=8,
        device_memory_scaling=2.0,
        device_core_scaling=1.0,
        preconfigured_device_memory=4096,
        lib_cuda_log_level="1",
        enable_numa_topology=True,
        mig_strategy=None,
        filter_devices=FilterDevices(),
        enable_get_preferred_allocation=False,
    )


def test_only_fields_present_in_the_entry_override() -> None:
    entries = (NodeConfigEntry(name="n1", device_split_count=3),)
    settings = effective_node_config(_device_config(), entries, "n1")
    assert settings.device_split_count == 3
    assert settings.device_memory_scaling == 2.0
    assert settings.preconfigured_device_memory == 4096
    assert settings.enable_numa_topology is True


def test_explicit_zero_and_false_override_but_empty_strings_do_not() -> None:
    document = node_configs_from_mapping(
        {
            "nodeconfig": [
                {
                    "name": "n1",
                    "preconfigureddevicememory": 0,
                    "enablenumatopology": False,
                    "operatingmode": "",
                    "migstrategy": "",
                    "enablegetpreferredallocation": False,
                }
            ]
        }
    )
    settings = effective_node_config(_device_config(), document.entries, "n1")
    assert settings.preconfigured_device_memory == 0
    assert settings.enable_numa_topology is False
    assert settings.operating_mode == "hami-core"
    assert settings.mig_strategy is None
    assert settings.enable_get_preferred_allocation is False


def test_full_entry_overrides_everything_it_sets() -> None:
    entries = parse_node_configs(json.dumps(_EXAMPLE)).entries
    settings = effective_node_config(_device_config(), entries, "mig-node")
    assert settings == NodeSettings(
        operating_mode="mig",
        device_split_count=4,
        device_memory_scaling=1.5,
        device_core_scaling=2.0,
        preconfigured_device_memory=0,
        lib_cuda_log_level="3",
        enable_numa_topology=True,
        mig_strategy="mixed",
        filter_devices=FilterDevices(uuids=("GPU-a",), indexes=(3,)),
        enable_get_preferred_allocation=True,
    )


def test_later_entries_for_the_same_node_win_field_by_field() -> None:
    entries = (
        NodeConfigEntry(name="n1", device_split_count=3, operating_mode="mps"),
        NodeConfigEntry(name="n2", device_split_count=99),
        NodeConfigEntry(name="n1", device_split_count=5),
    )
    settings = effective_node_config(_device_config(), entries, "n1")
    assert (settings.device_split_count, settings.operating_mode) == (5, "mps")


# --- properties: garbage in, only our errors out ----------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=12,
)
_nvidia_keys = st.sampled_from(
    [
        "resourceCountName",
        "memoryFactor",
        "deviceSplitCount",
        "deviceMemoryScaling",
        "gpuCorePolicy",
        "libCudaLogLevel",
        "migProfileAllowlist",
        "defaultCores",
        "overwriteEnv",
        "preConfiguredDeviceMemory",
    ]
)
_sections = st.sampled_from(["nvidia", "cambricon", "hygon", "metax", "iluvatars", "vnpus", "amd"])


def _only_config_errors(build: Any, data: Any) -> None:
    # Any other exception, including another ProtocolError, propagates and fails the test.
    try:
        result = build(data)
    except ConfigError:
        return
    assert result is not None


@given(st.text(max_size=60))
def test_device_config_text_garbage(text: str) -> None:
    _only_config_errors(parse_device_config, text)


@given(st.dictionaries(_sections, _json | st.dictionaries(_nvidia_keys, _json), max_size=3))
def test_device_config_structure_garbage(data: dict[str, Any]) -> None:
    _only_config_errors(device_config_from_mapping, data)


@given(st.text(max_size=60))
def test_node_config_text_garbage(text: str) -> None:
    _only_config_errors(parse_node_configs, text)


_entry_keys = st.sampled_from(
    [
        "name",
        "operatingmode",
        "devicesplitcount",
        "devicememoryscaling",
        "filterdevices",
        "libcudaloglevel",
    ]
)


@given(st.lists(st.dictionaries(_entry_keys, _json, max_size=4), max_size=3) | _json)
def test_node_config_structure_garbage(entries: Any) -> None:
    _only_config_errors(node_configs_from_mapping, {"nodeconfig": entries})
