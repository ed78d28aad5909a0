"""Koordinator's device annotations: joint allocation, allocation hints, device-allocated."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.selectors import EVERYTHING, parse_selector_string
from hami_protocol.topology.koordinator import (
    TOPOLOGY_SCOPE_LEVEL,
    AllocatedVF,
    AllocateStrategy,
    DeviceAllocation,
    DeviceAllocationExtension,
    DeviceHint,
    DeviceJointAllocate,
    ExclusivePolicy,
    JointScope,
    TopologyScope,
    decode_device_allocated,
    encode_device_allocated,
    parse_device_allocate_hints,
    parse_device_joint_allocate,
)

# --- device-joint-allocate ------------------------------------------------------------------------
JOINT_EXAMPLES: list[tuple[str, DeviceJointAllocate]] = [
    # contract §1.2
    (
        '{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}',
        DeviceJointAllocate(("gpu", "rdma"), JointScope.SAME_PCIE),
    ),
    # proposal: joint allocation API example (YAML block scalar, so with newlines)
    ('{\n  "deviceTypes": ["gpu","rdma"]\n}', DeviceJointAllocate(("gpu", "rdma"), None)),
    # proposal: "forced be on the same PCIe"
    (
        '{\n  "deviceTypes": ["gpu","rdma"],\n  "requiredScope": "SamePCIe"\n}',
        DeviceJointAllocate(("gpu", "rdma"), JointScope.SAME_PCIE),
    ),
    (
        '{"deviceTypes":["rdma","gpu","fpga"],"requiredScope":""}',
        DeviceJointAllocate(("rdma", "gpu", "fpga")),
    ),
    ("{}", DeviceJointAllocate()),
    ('{"deviceTypes":null,"requiredScope":null}', DeviceJointAllocate()),
]


@pytest.mark.parametrize(("text", "expected"), JOINT_EXAMPLES)
def test_joint_allocate_examples(text: str, expected: DeviceJointAllocate) -> None:
    assert parse_device_joint_allocate(text) == expected


def test_joint_allocate_primary_and_secondaries() -> None:
    joint = parse_device_joint_allocate('{"deviceTypes":["gpu","rdma","fpga"]}')
    assert joint.primary == "gpu"
    assert joint.secondaries == ("rdma", "fpga")
    assert DeviceJointAllocate().primary is None


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("", DecodeError, "invalid JSON"),
        ('{"deviceTypes":["gpu"]', DecodeError, "invalid JSON"),
        ("[]", DecodeError, "must be a JSON object"),
        ("null", DecodeError, "must be a JSON object"),
        ('{"deviceTypes":"gpu"}', DecodeError, "deviceTypes must be a list"),
        ('{"deviceTypes":[1]}', DecodeError, "deviceTypes[0] must be a string"),
        ('{"deviceTypes":["npu"]}', ValidationError, "unknown device type"),
        ('{"deviceTypes":["GPU"]}', ValidationError, "unknown device type"),
        ('{"deviceTypes":["gpu","gpu"]}', ValidationError, "twice"),
        (
            '{"deviceTypes":["gpu"],"requiredScope":"SamePCIE"}',
            ValidationError,
            "requiredScope must be",
        ),
        (
            '{"deviceTypes":["gpu"],"requiredScope":"NUMANode"}',
            ValidationError,
            "requiredScope must be",
        ),
        (
            '{"deviceTypes":["gpu"],"requiredScope":true}',
            DecodeError,
            "requiredScope must be a string",
        ),
        ('{"DeviceTypes":["gpu"]}', ValidationError, "did you mean 'deviceTypes'"),
        ('{"deviceTypes":["gpu"],"scope":"SamePCIe"}', ValidationError, "unknown field 'scope'"),
        (
            '{"deviceTypes":["gpu"],"deviceTypes":["rdma"]}',
            DecodeError,
            "duplicate field 'deviceTypes'",
        ),
        ('{"deviceTypes":["gpu"],"x":NaN}', DecodeError, "invalid JSON"),
    ],
)
def test_joint_allocate_errors(text: str, error: type[ProtocolError], fragment: str) -> None:
    with pytest.raises(error) as info:
        parse_device_joint_allocate(text)
    assert info.value.key == keys.KOORD_DEVICE_JOINT_ALLOCATE
    assert keys.KOORD_DEVICE_JOINT_ALLOCATE in str(info.value)
    assert fragment in str(info.value)


# --- device-allocate-hint -------------------------------------------------------------------------
CONTRACT_HINT = (
    '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},"vfSelector":{"matchExpressions":'
    '[{"key":"type","operator":"In","values":["general","fakeG"]}]},"allocateStrategy":'
    '"RequestsAsCount","exclusivePolicy":"PCIeLevel"},\n'
    ' "gpu":{"requiredTopologyScope":"NUMANode"}}'
)

HINT_EXAMPLES: list[tuple[str, dict[str, DeviceHint]]] = [
    # contract §1.3
    (
        CONTRACT_HINT,
        {
            "rdma": DeviceHint(
                selector=parse_selector_string("type=fakeW"),
                vf_selector=parse_selector_string("type in (general,fakeG)"),
                allocate_strategy=AllocateStrategy.REQUESTS_AS_COUNT,
                exclusive_policy=ExclusivePolicy.PCIE_LEVEL,
            ),
            "gpu": DeviceHint(required_topology_scope=TopologyScope.NUMA_NODE),
        },
    ),
    # proposal: "same PCIe and exclusive"
    (
        '{\n  "rdma": {\n    "vfSelector": {},\n    "exclusivePolicy": "PCIeLevel"\n  }\n}',
        {"rdma": DeviceHint(vf_selector=EVERYTHING, exclusive_policy=ExclusivePolicy.PCIE_LEVEL)},
    ),
    # proposal: "apply for all NICs"
    (
        '{\n  "rdma": {\n    "allocateStrategy": "ApplyForAll"\n  }\n}',
        {"rdma": DeviceHint(allocate_strategy=AllocateStrategy.APPLY_FOR_ALL)},
    ),
    # proposal: "one VF from each of the two NICs"
    (
        '{"rdma": {"vfSelector": {}, "allocateStrategy": "RequestsAsCount"}}',
        {
            "rdma": DeviceHint(
                vf_selector=EVERYTHING, allocate_strategy=AllocateStrategy.REQUESTS_AS_COUNT
            )
        },
    ),
    # A7: PCIeLevel on both types
    (
        '{"gpu":{"exclusivePolicy":"PCIeLevel"},"rdma":{"exclusivePolicy":"PCIeLevel"}}',
        {
            "gpu": DeviceHint(exclusive_policy=ExclusivePolicy.PCIE_LEVEL),
            "rdma": DeviceHint(exclusive_policy=ExclusivePolicy.PCIE_LEVEL),
        },
    ),
    # A15: RequestsAsCount with DeviceLevel
    (
        '{"rdma":{"allocateStrategy":"RequestsAsCount","exclusivePolicy":"DeviceLevel"}}',
        {
            "rdma": DeviceHint(
                allocate_strategy=AllocateStrategy.REQUESTS_AS_COUNT,
                exclusive_policy=ExclusivePolicy.DEVICE_LEVEL,
            )
        },
    ),
    # A17: the GPU scopes
    (
        '{"gpu":{"requiredTopologyScope":"PCIe"}}',
        {"gpu": DeviceHint(required_topology_scope=TopologyScope.PCIE)},
    ),
    (
        '{"gpu":{"requiredTopologyScope":"Device"}}',
        {"gpu": DeviceHint(required_topology_scope=TopologyScope.DEVICE)},
    ),
    (
        '{"gpu":{"requiredTopologyScope":"Node"}}',
        {"gpu": DeviceHint(required_topology_scope=TopologyScope.NODE)},
    ),
    # A14: ApplyForAll with an Exists selector
    (
        '{"rdma":{"allocateStrategy":"ApplyForAll","selector":{"matchExpressions":[{"key":"type","operator":"Exists"}]}}}',
        {
            "rdma": DeviceHint(
                selector=parse_selector_string("type"),
                allocate_strategy=AllocateStrategy.APPLY_FOR_ALL,
            )
        },
    ),
    # Empty strings and nulls are "not set"; a null entry is no hint at all.
    (
        '{"fpga":{"allocateStrategy":"","exclusivePolicy":null,"selector":null}}',
        {"fpga": DeviceHint()},
    ),
    ('{"rdma":null}', {}),
    ("{}", {}),
]


@pytest.mark.parametrize(("text", "expected"), HINT_EXAMPLES)
def test_hint_examples(text: str, expected: dict[str, DeviceHint]) -> None:
    hints = parse_device_allocate_hints(text)
    assert dict(hints.hints) == expected
    assert [kind for kind, _ in hints.hints] == sorted(expected)
    for kind, hint in expected.items():
        assert hints.get(kind) == hint
        assert kind in hints


def test_any_vf_selector_means_a_vf_is_required() -> None:
    empty = parse_device_allocate_hints('{"rdma":{"vfSelector":{}}}').get("rdma")
    assert empty is not None
    assert empty.must_allocate_vf
    assert empty.vf_selector is not None
    assert empty.vf_selector.matches({})  # also matches groups without labels
    for text in ('{"rdma":{}}', '{"rdma":{"vfSelector":null}}', '{"rdma":{"selector":{}}}'):
        hint = parse_device_allocate_hints(text).get("rdma")
        assert hint is not None
        assert not hint.must_allocate_vf
    assert parse_device_allocate_hints("{}").get("rdma") is None


def test_topology_scope_levels_order_device_to_node() -> None:
    order = sorted(TopologyScope, key=lambda scope: -TOPOLOGY_SCOPE_LEVEL[scope])
    assert order == [
        TopologyScope.DEVICE,
        TopologyScope.PCIE,
        TopologyScope.NUMA_NODE,
        TopologyScope.NODE,
    ]


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("{", DecodeError, "invalid JSON"),
        ('"rdma"', DecodeError, "must be a JSON object"),
        ('{"nic":{}}', ValidationError, "unknown device type"),
        ('{"RDMA":{}}', ValidationError, "unknown device type"),
        ('{"rdma":[]}', DecodeError, "rdma must be a JSON object"),
        ('{"rdma":{"vfselector":{}}}', ValidationError, "did you mean 'vfSelector'"),
        ('{"rdma":{"count":2}}', ValidationError, "rdma: unknown field 'count'"),
        (
            '{"rdma":{"allocateStrategy":"applyForAll"}}',
            ValidationError,
            "rdma.allocateStrategy must be one of",
        ),
        ('{"rdma":{"allocateStrategy":1}}', DecodeError, "rdma.allocateStrategy must be a string"),
        (
            '{"rdma":{"exclusivePolicy":"Device"}}',
            ValidationError,
            "rdma.exclusivePolicy must be one of",
        ),
        (
            '{"gpu":{"requiredTopologyScope":"Socket"}}',
            ValidationError,
            "gpu.requiredTopologyScope",
        ),
        (
            '{"gpu":{"requiredTopologyScope":"SamePCIe"}}',
            ValidationError,
            "gpu.requiredTopologyScope",
        ),
        ('{"rdma":{"selector":"type=fakeW"}}', DecodeError, "rdma.selector"),
        ('{"rdma":{"selector":{"matchLabels":{"type":"a b"}}}}', ValidationError, "label value"),
        (
            '{"rdma":{"vfSelector":{"matchExpressions":[{"key":"type","operator":"In"}]}}}',
            ValidationError,
            "needs values",
        ),
        (
            '{"rdma":{"vfSelector":{"matchExpressions":[{"key":"type","operator":"Equals","values":["x"]}]}}}',
            ValidationError,
            "rdma.vfSelector.matchExpressions[0].operator",
        ),
        ('{"rdma":{"vfSelector":{"matchlabels":{}}}}', ValidationError, "rdma.vfSelector"),
        ('{"rdma":{},"rdma":{}}', DecodeError, "duplicate field 'rdma'"),
    ],
)
def test_hint_errors(text: str, error: type[ProtocolError], fragment: str) -> None:
    with pytest.raises(error) as info:
        parse_device_allocate_hints(text)
    assert info.value.key == keys.KOORD_DEVICE_ALLOCATE_HINT
    assert keys.KOORD_DEVICE_ALLOCATE_HINT in str(info.value)
    assert fragment in str(info.value)


# --- acceptance-case selectors against fixture F's NIC labels -------------------------------------
F_NIC_LABELS = [{"type": "fakeW"}] * 4 + [{"type": "fakeS"}]  # A14: F plus one fakeS NIC


@pytest.mark.parametrize(
    ("selector", "count"),
    [
        ({"matchLabels": {"type": "fakeW"}}, 4),
        ({"matchLabels": {"type": "fakeS"}}, 1),
        ({"matchExpressions": [{"key": "type", "operator": "Exists"}]}, 5),
        ({"matchExpressions": [{"key": "nonexistent", "operator": "Exists"}]}, 0),
    ],
)
def test_a14_apply_for_all_selectors_count_matching_nics(
    selector: dict[str, Any], count: int
) -> None:
    text = json.dumps({"rdma": {"allocateStrategy": "ApplyForAll", "selector": selector}})
    hint = parse_device_allocate_hints(text).get("rdma")
    assert hint is not None
    assert hint.selector is not None
    assert sum(hint.selector.matches(labels) for labels in F_NIC_LABELS) == count


def test_default_pod_hint_matches_fixture_f() -> None:
    text = (
        '{"rdma":{"selector":{"matchLabels":{"type":"fakeW"}},"vfSelector":{"matchExpressions":'
        '[{"key":"type","operator":"In","values":["general","fakeG"]}]}}}'
    )
    hint = parse_device_allocate_hints(text).get("rdma")
    assert hint is not None
    assert hint.selector is not None
    assert hint.vf_selector is not None
    assert hint.must_allocate_vf
    assert hint.selector.matches({"type": "fakeW"})
    assert not hint.selector.matches({"type": "fakeS"})
    assert hint.vf_selector.matches({"type": "general"})
    assert not hint.vf_selector.matches({})


# --- device-allocated -----------------------------------------------------------------------------
CONTRACT_ALLOCATED = (
    '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory":"80Gi",'
    '"koordinator.sh/gpu-memory-ratio":"100"},"id":"GPU-8c25..."}],'
    '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
    '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
)


def test_contract_allocation_example_decodes_and_reencodes() -> None:
    decoded = decode_device_allocated(CONTRACT_ALLOCATED)
    assert decoded == {
        "gpu": (
            DeviceAllocation(
                minor=0,
                resources={
                    "koordinator.sh/gpu-core": "100",
                    "koordinator.sh/gpu-memory": "80Gi",
                    "koordinator.sh/gpu-memory-ratio": "100",
                },
                id="GPU-8c25...",
            ),
        ),
        "rdma": (
            DeviceAllocation(
                minor=1,
                resources={"koordinator.sh/rdma": "1"},
                id="0000:1f:00.0",
                extension=DeviceAllocationExtension(vfs=(AllocatedVF(bus_id="0000:1f:00.2"),)),
            ),
        ),
    }
    assert encode_device_allocated(decoded) == CONTRACT_ALLOCATED


def test_a1_result_encodes_in_go_field_order_with_omitempty() -> None:
    result = {
        "rdma": [
            DeviceAllocation(
                minor=1,
                resources={"koordinator.sh/rdma": "1"},
                id="0000:1f:00.0",
                extension=DeviceAllocationExtension(
                    vfs=(AllocatedVF(bus_id="0000:1f:00.2", minor=0),)
                ),
            )
        ],
        "gpu": [
            DeviceAllocation(
                minor=0,
                resources={
                    "koordinator.sh/gpu-memory-ratio": "100",
                    "koordinator.sh/gpu-core": "100",
                },
            )
        ],
    }
    assert encode_device_allocated(result) == (
        '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"}}],'
        '"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"id":"0000:1f:00.0",'
        '"extension":{"vfs":[{"busID":"0000:1f:00.2"}]}}]}'
    )


@pytest.mark.parametrize(
    "text",
    [
        # A10: VF minor -1 is kept
        '{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"minor":-1,"busID":"0000:1f:00.2"}]}}]}',
        # A20: the designated VF's busID is passed through untouched
        '{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:c800:000e:270a"}]}}]}',
        # A11: exclusive NICs
        '{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"}},{"minor":3,"resources":{"koordinator.sh/rdma":"100"}}]}',
        '{"gpu":[{"minor":2,"resources":{},"extension":{}}]}',
        '{"gpu":[{"minor":2,"resources":{"x":"1"},"extension":{"gpuSharedResourceTemplate":"vir01"}}]}',
        '{"gpu":[]}',
        "{}",
        '{"gpu":[{"minor":0,"resources":{"a\\u0026b":"1"},"id":"\\u003cx\\u003e\\u0026"}]}',
    ],
)
def test_canonical_texts_round_trip_byte_for_byte(text: str) -> None:
    decoded = decode_device_allocated(text)
    assert encode_device_allocated(decoded) == text


def test_vf_minor_minus_one_is_decoded() -> None:
    decoded = decode_device_allocated(
        '{"rdma":[{"minor":0,"resources":{},"extension":{"vfs":[{"minor":-1,"busID":"0000:1f:00.2"}]}}]}'
    )
    ext = decoded["rdma"][0].extension
    assert ext is not None
    assert ext.vfs == (AllocatedVF(bus_id="0000:1f:00.2", minor=-1),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("null", {}),
        ('{"gpu":null}', {"gpu": ()}),
        # Go's Quantity accepts bare numbers; kept as their text.
        (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":100,"m":1.5e3}}]}',
            {"gpu": (DeviceAllocation(0, {"koordinator.sh/gpu-core": "100", "m": "1.5e3"}),)},
        ),
        # Go's rules for read-back state: unknown fields ignored, field names case-insensitive,
        # null leaves a field unset, and the last duplicate wins.
        (
            '{"gpu":[{"Minor":3,"resources":null,"future":1,"extension":null}]}',
            {"gpu": (DeviceAllocation(3),)},
        ),
        ('{"xpu":[{"minor":1,"minor":2,"id":"a"}]}', {"xpu": (DeviceAllocation(2, id="a"),)}),
        (
            '{"gpu":[{"minor":0,"resources":{"a":null}}]}',
            {"gpu": (DeviceAllocation(0, {"a": "0"}),)},
        ),
    ],
)
def test_device_allocated_go_decoding_rules(
    text: str, expected: dict[str, tuple[DeviceAllocation, ...]]
) -> None:
    assert decode_device_allocated(text) == expected


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("", DecodeError, "invalid JSON"),
        ("[]", DecodeError, "must be a JSON object"),
        ('{"gpu":{}}', DecodeError, "gpu must be a list"),
        ('{"gpu":[1]}', DecodeError, "gpu[0] must be a JSON object"),
        ('{"gpu":[{"minor":"1"}]}', DecodeError, "gpu[0].minor must be a 32-bit integer"),
        ('{"gpu":[{"minor":1.0}]}', DecodeError, "32-bit integer"),
        ('{"gpu":[{"minor":true}]}', DecodeError, "32-bit integer"),
        ('{"gpu":[{"minor":2147483648}]}', DecodeError, "32-bit integer"),
        ('{"gpu":[{"minor":0,"resources":[]}]}', DecodeError, "must be a JSON object"),
        ('{"gpu":[{"minor":0,"resources":{"a":"lots"}}]}', ValidationError, "gpu[0].resources.a"),
        ('{"gpu":[{"minor":0,"resources":{"a":true}}]}', DecodeError, "quantity"),
        ('{"gpu":[{"minor":0,"id":7}]}', DecodeError, "gpu[0].id must be a string"),
        ('{"rdma":[{"minor":0,"extension":{"vfs":{}}}]}', DecodeError, "vfs must be a list"),
        (
            '{"rdma":[{"minor":0,"extension":{"vfs":[{"busID":1}]}}]}',
            DecodeError,
            "busID must be a string",
        ),
        ('{"rdma":[{"minor":0,"extension":[]}]}', DecodeError, "extension must be a JSON object"),
    ],
)
def test_device_allocated_errors(text: str, error: type[ProtocolError], fragment: str) -> None:
    with pytest.raises(error) as info:
        decode_device_allocated(text)
    assert info.value.key == keys.KOORD_DEVICE_ALLOCATED
    assert fragment in str(info.value)


def test_allocation_resources_are_frozen_and_order_free() -> None:
    one = DeviceAllocation(1, {"b": "1", "a": "2"})
    two = DeviceAllocation(1, {"a": "2", "b": "1"})
    assert one == two
    assert hash(one) == hash(two)
    assert list(one.resources) == ["a", "b"]
    with pytest.raises(TypeError):
        one.resources["c"] = "3"  # type: ignore[index]


# --- properties ----------------------------------------------------------------------------------
_INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
_QUANTITIES = st.one_of(
    st.integers(min_value=0, max_value=10**6).map(str),
    st.builds(
        lambda n, s: f"{n}{s}", st.integers(0, 4096), st.sampled_from(["Ki", "Mi", "Gi", "m", "k"])
    ),
)
_TEXT = st.text(max_size=12)
_VFS = st.builds(AllocatedVF, bus_id=_TEXT, minor=_INT32)
_EXTENSIONS = st.builds(
    DeviceAllocationExtension,
    vfs=st.lists(_VFS, max_size=3).map(tuple),
    gpu_shared_resource_template=_TEXT,
)
_ALLOCATIONS = st.builds(
    DeviceAllocation,
    minor=_INT32,
    resources=st.dictionaries(st.text(min_size=1, max_size=20), _QUANTITIES, max_size=3),
    id=_TEXT,
    extension=st.one_of(st.none(), _EXTENSIONS),
)
_ALLOCATION_MAPS = st.dictionaries(
    st.sampled_from(["gpu", "rdma", "fpga", "xpu"]),
    st.lists(_ALLOCATIONS, max_size=3).map(tuple),
    max_size=3,
)


@given(_ALLOCATION_MAPS)
def test_device_allocated_round_trips(allocations: dict[str, tuple[DeviceAllocation, ...]]) -> None:
    text = encode_device_allocated(allocations)
    decoded = decode_device_allocated(text)
    assert decoded == allocations
    assert encode_device_allocated(decoded) == text


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=16,
)
_FIELD_NAMES = st.sampled_from(
    [
        "deviceTypes",
        "requiredScope",
        "gpu",
        "rdma",
        "fpga",
        "selector",
        "vfSelector",
        "allocateStrategy",
        "requiredTopologyScope",
        "exclusivePolicy",
        "matchLabels",
        "minor",
        "resources",
        "id",
        "extension",
        "vfs",
        "busID",
    ]
)
_STRUCTURED = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(["gpu", "rdma", "SamePCIe", "PCIe", "1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_FIELD_NAMES, inner, max_size=4),
    max_leaves=20,
)
DECODERS = [parse_device_joint_allocate, parse_device_allocate_hints, decode_device_allocated]


@pytest.mark.parametrize("decoder", DECODERS)
@given(text=st.text(max_size=80))
def test_arbitrary_text_raises_only_protocol_errors(decoder: Any, text: str) -> None:
    with contextlib.suppress(ProtocolError):
        assert decoder(text) is not None


@pytest.mark.parametrize("decoder", DECODERS)
@given(doc=st.one_of(_JSON, _STRUCTURED))
def test_arbitrary_json_raises_only_protocol_errors(decoder: Any, doc: object) -> None:
    with contextlib.suppress(ProtocolError):
        assert decoder(json.dumps(doc)) is not None


@pytest.mark.parametrize("decoder", DECODERS)
def test_deeply_nested_json_is_a_decode_error(decoder: Any) -> None:
    with pytest.raises(DecodeError):
        decoder("[" * 100_000 + "]" * 100_000)
