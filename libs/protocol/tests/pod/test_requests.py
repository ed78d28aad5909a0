"""Container request parsing: HAMi's NVIDIA rules, the common vendor rule, pod slots, errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.errors import RequestError
from hami_protocol.request.containers import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    container_mentions_vendor,
    container_requests,
    pod_device_requests,
    pod_mentions_managed_resources,
    priority_value,
    vendor_request,
)
from hami_protocol.vendor.table import (
    DEFAULT_VENDORS,
    NVIDIA,
    Vendor,
    vendor_by_word,
    vendors_from_config,
)

INT32_MAX = 2**31 - 1


def _ctr(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "c"
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "resources": resources}


def _vendors(yaml_text: str = "", **flags: bool) -> tuple[Vendor, ...]:
    return vendors_from_config(parse_device_config(yaml_text), **flags)


def _nvidia(vendors: tuple[Vendor, ...] = DEFAULT_VENDORS) -> Vendor:
    row = vendor_by_word(vendors, NVIDIA)
    assert row is not None
    return row


def _req(
    nums: int, memreq: int, pct: int, cores: int, word: str = NVIDIA
) -> ContainerDeviceRequest:
    return ContainerDeviceRequest(
        nums=nums, type=word, memreq=memreq, mem_percentagereq=pct, coresreq=cores
    )


# --- contract §8 items 1-6 ----------------------------------------------------------------------

_GPU, _MEM, _PCT, _CORES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)


@pytest.mark.parametrize(
    ("config", "container", "expected"),
    [
        # 1. a bare count is a whole card by percentage
        ("", _ctr({_GPU: "1"}), _req(1, 0, 100, 0)),
        # 2. memory given: percentage stays unset
        ("", _ctr({_GPU: "2", _MEM: "4096"}), _req(2, 4096, PERCENTAGE_UNSET, 0)),
        # 3. percentage clamps above 100, <= 0 is unset
        ("", _ctr({_GPU: "1", _PCT: "50"}), _req(1, 0, 50, 0)),
        ("", _ctr({_GPU: "1", _PCT: "150"}), _req(1, 0, 100, 0)),
        ("", _ctr({_GPU: "1", _PCT: "101"}), _req(1, 0, 100, 0)),
        ("", _ctr({_GPU: "1", _PCT: "0"}), _req(1, 0, 100, 0)),
        ("", _ctr({_GPU: "1", _PCT: "-1"}), _req(1, 0, 100, 0)),
        ("", _ctr({_GPU: "1", _PCT: "0", _MEM: "2000"}), _req(1, 2000, PERCENTAGE_UNSET, 0)),
        # 4. a byte quantity in the MiB field drops the whole request
        ("", _ctr({_GPU: "1", _MEM: "16Gi"}), None),
        ("", _ctr({_GPU: "1", _MEM: "16.0Gi"}), None),
        # 5. memoryFactor multiplies; defaultMemory replaces the 100 % default
        (
            "nvidia: {memoryFactor: 2}",
            _ctr({_GPU: "1", _MEM: "1024"}),
            _req(1, 2048, PERCENTAGE_UNSET, 0),
        ),
        ("nvidia: {defaultMemory: 512}", _ctr({_GPU: "1"}), _req(1, 512, PERCENTAGE_UNSET, 0)),
        # 6. requests alone are honoured
        (
            "",
            _ctr(requests={_GPU: "1", _MEM: "3000", _CORES: "30"}),
            _req(1, 3000, PERCENTAGE_UNSET, 30),
        ),
    ],
)
def test_contract_examples(
    config: str, container: dict[str, Any], expected: ContainerDeviceRequest | None
) -> None:
    assert vendor_request(container, _nvidia(_vendors(config))) == expected


# --- NVIDIA edge cases --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (_ctr({_GPU: 1}), _req(1, 0, 100, 0)),  # numbers as well as strings
        (_ctr({_GPU: "2000m"}), _req(2, 0, 100, 0)),  # value, not spelling
        (_ctr({_GPU: "1", _MEM: "4k"}), _req(1, 4000, PERCENTAGE_UNSET, 0)),
        (_ctr({_GPU: "1", _MEM: str(INT32_MAX)}), _req(1, INT32_MAX, PERCENTAGE_UNSET, 0)),
        (_ctr({_GPU: "1", _MEM: "0"}), _req(1, 0, 100, 0)),
        (_ctr({_GPU: "1", _CORES: "120"}), _req(1, 0, 100, 120)),  # raw: the fit clamps
        (_ctr({_GPU: "1", _CORES: "50.5"}), _req(1, 0, 100, 0)),  # not whole: ignored
        (_ctr({_GPU: "1", _PCT: "50.5"}), _req(1, 0, 100, 0)),  # not whole: ignored
        (_ctr({_GPU: "1", _PCT: "2e9"}), _req(1, 0, 100, 0)),
        # limits win over requests, per resource
        (
            _ctr({_GPU: "1", _MEM: "1000"}, {_GPU: "3", _MEM: "2000", _CORES: "40"}),
            _req(1, 1000, PERCENTAGE_UNSET, 40),
        ),
        (_ctr({_MEM: "1000"}, {_GPU: "3"}), _req(3, 1000, PERCENTAGE_UNSET, 0)),
        # counts that are not a request at all
        (_ctr({_GPU: "0"}), None),
        (_ctr({_GPU: "-1"}), None),
        (_ctr({_GPU: "1.5"}), None),
        (_ctr({_GPU: "500m"}), None),
        (_ctr({_GPU: str(INT32_MAX + 1)}), None),
        (_ctr({_MEM: "1000"}), None),
        (_ctr({}), None),
        ({"name": "x"}, None),
        # memory that drops the request
        (_ctr({_GPU: "1", _MEM: "1.5"}), None),
        (_ctr({_GPU: "1", _MEM: "-1"}), None),
        (_ctr({_GPU: "1", _MEM: str(INT32_MAX + 1)}), None),
        (_ctr({_GPU: "1", _MEM: "1Gi"}), _req(1, 2**30, PERCENTAGE_UNSET, 0)),  # fits int32: kept
        # cores that drop the request
        (_ctr({_GPU: "1", _CORES: "-1"}), None),
        (_ctr({_GPU: "1", _CORES: str(INT32_MAX + 1)}), None),
    ],
)
def test_nvidia_edge_cases(
    container: dict[str, Any], expected: ContainerDeviceRequest | None
) -> None:
    assert vendor_request(container, _nvidia()) == expected


def test_memory_factor_overflow_drops_the_request() -> None:
    nvidia = _nvidia(_vendors("nvidia: {memoryFactor: 4}"))
    limit = INT32_MAX // 4
    assert vendor_request(_ctr({_GPU: "1", _MEM: str(limit)}), nvidia) == _req(
        1, limit * 4, PERCENTAGE_UNSET, 0
    )
    assert vendor_request(_ctr({_GPU: "1", _MEM: str(limit + 1)}), nvidia) is None


def test_default_cores_and_default_memory_is_not_multiplied() -> None:
    nvidia = _nvidia(_vendors("nvidia: {defaultCores: 25, defaultMemory: 100, memoryFactor: 3}"))
    assert vendor_request(_ctr({_GPU: "1"}), nvidia) == _req(1, 100, PERCENTAGE_UNSET, 25)
    assert vendor_request(_ctr({_GPU: "1", _PCT: "40"}), nvidia) == _req(1, 0, 40, 25)


def test_renamed_resources_flow_into_parsing() -> None:
    vendors = _vendors(
        "nvidia: {resourceCountName: example.com/vgpu, resourceMemoryName: example.com/vmem, "
        "resourceCoreName: example.com/vcores, resourceMemoryPercentageName: ''}"
    )
    nvidia = _nvidia(vendors)
    renamed = _ctr({"example.com/vgpu": "2", "example.com/vmem": "512", "example.com/vcores": "10"})
    assert vendor_request(renamed, nvidia) == _req(2, 512, PERCENTAGE_UNSET, 10)
    # the old names mean nothing now, and the percentage resource is switched off
    assert vendor_request(_ctr({_GPU: "1"}), nvidia) is None
    assert vendor_request(_ctr({"example.com/vgpu": "1", _PCT: "50"}), nvidia) == _req(1, 0, 100, 0)


# --- the common rule for other vendors ----------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "limits", "expected"),
    [
        ("MLU", {"cambricon.com/vmlu": "1"}, _req(1, 0, 100, 100, "MLU")),
        (
            "MLU",
            {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"},
            _req(1, 1024, PERCENTAGE_UNSET, 100, "MLU"),
        ),
        (
            "MLU",
            {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vcore": "20"},
            _req(1, 0, 100, 20, "MLU"),
        ),
        (
            "DCU",
            {"hygon.com/dcunum": "2", "hygon.com/dcumem": "2000"},
            _req(2, 2000, PERCENTAGE_UNSET, 100, "DCU"),
        ),
        (
            "Mthreads",
            {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8"},
            _req(1, 4096, PERCENTAGE_UNSET, 0, "Mthreads"),
        ),
        ("Mthreads", {"mthreads.com/vgpu": "1"}, _req(1, 0, 100, 0, "Mthreads")),
        ("Metax-GPU", {"metax-tech.com/gpu": "2"}, _req(2, 0, 100, 100, "Metax-GPU")),
        (
            "Metax-SGPU",
            {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4"},
            _req(1, 4096, PERCENTAGE_UNSET, 0, "Metax-SGPU"),
        ),
        (
            "AMD",
            {"amd.com/gpu": "1", "amd.com/gpumem": "8192"},
            _req(1, 8192, PERCENTAGE_UNSET, 100, "AMD"),
        ),
        ("AMD", {"amd.com/gpu": "1", "amd.com/gpucores": "30"}, _req(1, 0, 100, 30, "AMD")),
        (
            "MLU",
            {
                "cambricon.com/vmlu": "1",
                "cambricon.com/mlu.smlu.vmemory": str(INT32_MAX // 256 + 1),
            },
            None,
        ),
    ],
)
def test_common_vendor_rule(
    word: str, limits: dict[str, str], expected: ContainerDeviceRequest | None
) -> None:
    row = vendor_by_word(DEFAULT_VENDORS, word)
    assert row is not None
    assert vendor_request(_ctr(limits), row) == expected


def test_hygon_memory_factor() -> None:
    dcu = vendor_by_word(_vendors("hygon: {memoryFactor: 2}"), "DCU")
    assert dcu is not None
    assert vendor_request(_ctr({"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000"}), dcu) == _req(
        1, 2000, PERCENTAGE_UNSET, 100, "DCU"
    )


def test_amd_reads_limits_only() -> None:
    amd = vendor_by_word(DEFAULT_VENDORS, "AMD")
    assert amd is not None
    assert vendor_request(_ctr(requests={"amd.com/gpu": "1"}), amd) is None
    assert not container_mentions_vendor(_ctr(requests={"amd.com/gpu": "1"}), amd)
    assert container_mentions_vendor(_ctr({"amd.com/gpu": "1"}), amd)


def test_iluvatar_and_ascend_rules() -> None:
    vendors = _vendors(DEFAULT_DEVICE_CONFIG_YAML, enable_ascend=True, enable_iluvatar=True)
    container = _ctr(
        {
            "iluvatar.ai/BI-V150-vgpu": "1",
            "iluvatar.ai/BI-V150.vMem": "64",
            "huawei.com/Ascend310P": "1",
            "huawei.com/Ascend310P-memory": "3072",
        }
    )
    assert dict(container_requests(container, vendors=vendors)) == {
        "BI-V150": _req(1, 64 * 256, PERCENTAGE_UNSET, 0, "BI-V150"),
        "Ascend310P": _req(1, 3072, PERCENTAGE_UNSET, 0, "Ascend310P"),
    }
    assert dict(container_requests(_ctr({"huawei.com/Ascend910B3": "2"}), vendors=vendors)) == {
        "Ascend910B3": _req(2, 0, 100, 0, "Ascend910B3")
    }


# --- pods ---------------------------------------------------------------------------------------


def _pod() -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [
                _ctr({_GPU: "1", _MEM: "5000"}, name="init-a"),
                _ctr({"cpu": "1"}, name="init-b"),
            ],
            "containers": [
                _ctr({"cpu": "100m", "memory": "1Gi"}, name="sidecar"),
                _ctr({_GPU: "2", _MEM: "4000", "cambricon.com/vmlu": "1"}, name="main"),
                _ctr({_GPU: "0"}, name="zero"),
            ],
        },
    }


def test_pod_slots_are_init_first_in_spec_order() -> None:
    result = pod_device_requests(_pod(), vendors=DEFAULT_VENDORS)
    assert [(slot.name, slot.is_init) for slot in result.slots] == [
        ("init-a", True),
        ("init-b", True),
        ("sidecar", False),
        ("main", False),
        ("zero", False),
    ]
    assert result.init_count == 2
    assert result.has_requests
    assert result.vendors() == frozenset({"NVIDIA", "MLU"})
    assert result.for_vendor("NVIDIA") == (
        _req(1, 5000, PERCENTAGE_UNSET, 0),
        None,
        None,
        _req(2, 4000, PERCENTAGE_UNSET, 0),
        None,
    )
    assert dict(result.slots[3].requests) == {
        "NVIDIA": _req(2, 4000, PERCENTAGE_UNSET, 0),
        "MLU": _req(1, 0, 100, 100, "MLU"),
    }
    assert dict(result.slots[4].requests) == {}
    with pytest.raises(TypeError):
        result.slots[3].requests["AMD"] = _req(1, 0, 100, 0, "AMD")  # type: ignore[index]


@pytest.mark.parametrize("pod", [{}, {"spec": {}}, {"spec": {"containers": []}}, {"spec": None}])
def test_pods_without_containers_have_no_slots(pod: dict[str, Any]) -> None:
    result = pod_device_requests(pod, vendors=DEFAULT_VENDORS)
    assert result.slots == ()
    assert not result.has_requests


def test_absent_or_unmanaged_resources_never_raise() -> None:
    pod = {
        "spec": {
            "containers": [
                _ctr({"cpu": "not a quantity", _MEM: "also junk"}),
                {"name": "bare"},
                {"name": "nulls", "resources": {"limits": None, "requests": None}},
            ]
        }
    }
    result = pod_device_requests(pod, vendors=DEFAULT_VENDORS)
    assert not result.has_requests
    assert len(result.slots) == 3


@pytest.mark.parametrize(
    ("pod", "key"),
    [
        ([], "pod"),
        ({"spec": []}, "spec"),
        ({"spec": {"containers": {}}}, "spec.containers"),
        ({"spec": {"initContainers": "x"}}, "spec.initContainers"),
        ({"spec": {"containers": [5]}}, "container"),
        ({"spec": {"containers": [{"name": 5}]}}, "name"),
        ({"spec": {"containers": [{"resources": []}]}}, "resources"),
        ({"spec": {"containers": [{"resources": {"limits": [1]}}]}}, "limits"),
        ({"spec": {"containers": [{"resources": {"requests": "x"}}]}}, "requests"),
        ({"spec": {"containers": [_ctr({_GPU: "one"})]}}, _GPU),
        ({"spec": {"containers": [_ctr({_GPU: "1", _MEM: "16 Gi"})]}}, _MEM),
        ({"spec": {"containers": [_ctr({_GPU: "1", _CORES: "--1"})]}}, _CORES),
        ({"spec": {"containers": [_ctr({_GPU: "1", _PCT: "50%"})]}}, _PCT),
        ({"spec": {"containers": [_ctr({_GPU: [1]})]}}, _GPU),
        ({"spec": {"containers": [_ctr({_GPU: True})]}}, _GPU),
        ({"spec": {"containers": [_ctr({_GPU: float("nan")})]}}, _GPU),
    ],
)
def test_malformed_pods_raise_request_error(pod: Any, key: str) -> None:
    with pytest.raises(RequestError) as caught:
        pod_device_requests(pod, vendors=DEFAULT_VENDORS)
    assert caught.value.key == key


def test_quantity_errors_name_container_and_section() -> None:
    pod = {"spec": {"containers": [_ctr(requests={_GPU: "1", _MEM: "lots"}, name="trainer")]}}
    with pytest.raises(RequestError) as caught:
        pod_device_requests(pod, vendors=DEFAULT_VENDORS)
    message = str(caught.value)
    assert message.startswith("nvidia.com/gpumem: ")
    assert "'trainer'" in message
    assert "requests" in message
    assert "'lots'" in message


# --- webhook helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("containers", "expected"),
    [
        ([_ctr({"cpu": "1"})], False),
        ([_ctr({_CORES: "50"})], True),
        ([_ctr(requests={_PCT: "50"})], True),
        ([_ctr({"nvidia.com/priority": "1"})], False),
        ([_ctr({"cpu": "1"}), _ctr({"mthreads.com/vgpu": "1"})], True),
    ],
)
def test_pod_mentions_managed_resources(containers: list[dict[str, Any]], expected: bool) -> None:
    assert (
        pod_mentions_managed_resources(
            {"spec": {"containers": containers}}, vendors=DEFAULT_VENDORS
        )
        is expected
    )


def test_init_containers_count_for_mentions() -> None:
    pod = {"spec": {"initContainers": [_ctr({_GPU: "1"})], "containers": [_ctr({})]}}
    assert pod_mentions_managed_resources(pod, vendors=DEFAULT_VENDORS)


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (_ctr({"nvidia.com/priority": "1"}), 1),
        (_ctr({"nvidia.com/priority": "0"}), 0),
        (_ctr({"nvidia.com/priority": "500m"}), 1),
        (_ctr(requests={"nvidia.com/priority": "1"}), None),  # limits only
        (_ctr({}), None),
    ],
)
def test_priority_value(container: dict[str, Any], expected: int | None) -> None:
    assert priority_value(container, _nvidia()) == expected


def test_priority_switched_off_and_malformed() -> None:
    no_priority = _nvidia(_vendors("nvidia: {resourcePriorityName: ''}"))
    assert priority_value(_ctr({"nvidia.com/priority": "1"}), no_priority) is None
    with pytest.raises(RequestError):
        priority_value(_ctr({"nvidia.com/priority": "high"}), _nvidia())


# --- properties ---------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
_names = st.sampled_from([_GPU, _MEM, _PCT, _CORES, "cambricon.com/vmlu", "amd.com/gpu", "cpu"])
_values = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.from_regex(
        r"[+-]?[0-9]{0,12}(\.[0-9]{0,3})?([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,2})?",
        fullmatch=True,
    ),
    _json,
)
_resources = st.fixed_dictionaries(
    {},
    optional={
        "limits": st.dictionaries(_names, _values, max_size=4) | _json,
        "requests": st.dictionaries(_names, _values, max_size=4) | _json,
    },
)
_containers = st.lists(
    st.fixed_dictionaries(
        {}, optional={"name": st.text(max_size=5) | _json, "resources": _resources | _json}
    )
    | _json,
    max_size=3,
)
_pods = (
    st.fixed_dictionaries(
        {},
        optional={
            "spec": st.fixed_dictionaries(
                {}, optional={"initContainers": _containers, "containers": _containers}
            )
            | _json
        },
    )
    | _json
)


@given(_pods)
def test_arbitrary_pods_only_raise_request_errors(pod: Any) -> None:
    try:
        result = pod_device_requests(pod, vendors=DEFAULT_VENDORS)
    except RequestError:
        return
    for slot in result.slots:
        for word, request in slot.requests.items():
            assert request.type == word
            assert 0 < request.nums <= INT32_MAX
            assert 0 <= request.memreq <= INT32_MAX
            assert 0 <= request.coresreq <= INT32_MAX
            assert 1 <= request.mem_percentagereq <= PERCENTAGE_UNSET
            # a request always says how much memory: MiB or a percentage, never neither
            assert request.memreq > 0 or request.mem_percentagereq <= 100


@given(
    nums=st.integers(min_value=1, max_value=64),
    mem=st.none() | st.integers(min_value=0, max_value=100_000),
    pct=st.none() | st.integers(min_value=-5, max_value=300),
    cores=st.none() | st.integers(min_value=0, max_value=200),
    in_requests=st.booleans(),
)
def test_nvidia_rules_as_a_property(
    nums: int, mem: int | None, pct: int | None, cores: int | None, in_requests: bool
) -> None:
    resources = {_GPU: str(nums)}
    if mem is not None:
        resources[_MEM] = str(mem)
    if pct is not None:
        resources[_PCT] = str(pct)
    if cores is not None:
        resources[_CORES] = str(cores)
    container = _ctr(requests=resources) if in_requests else _ctr(limits=resources)
    request = vendor_request(container, _nvidia())
    assert request is not None
    assert request.nums == nums
    assert request.memreq == (mem or 0)
    assert request.coresreq == (cores or 0)
    given_pct = pct is not None and pct > 0
    if given_pct:
        assert request.mem_percentagereq == min(pct or 0, 100)
    elif mem:
        assert request.mem_percentagereq == PERCENTAGE_UNSET
    else:
        assert request.mem_percentagereq == 100


# --- vendors whose requests HAMi shapes differently -----------------------------------------


def _shaped(limits: dict[str, str]) -> dict[str, tuple[int, int, int, int]]:
    found = container_requests(
        {"name": "c", "resources": {"limits": limits}}, vendors=DEFAULT_VENDORS
    )
    return {w: (r.nums, r.memreq, r.mem_percentagereq, r.coresreq) for w, r in found.items()}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"aws.amazon.com/neuron": "2"}, (2, 0, 100, 0)),
        ({"aws.amazon.com/neuroncore": "1"}, (1, 0, 100, 1)),
        ({"aws.amazon.com/neuroncore": "2"}, (1, 0, 100, 2)),
        ({"aws.amazon.com/neuroncore": "3"}, (2, 0, 100, 0)),
        ({"aws.amazon.com/neuroncore": "8"}, (4, 0, 100, 0)),
        ({"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "1"}, (1, 0, 100, 0)),
    ],
)
def test_aws_neuron_requests_devices_or_cores(
    limits: dict[str, str], expected: tuple[int, int, int, int]
) -> None:
    assert _shaped(limits) == {"AWSNeuron": expected}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"enflame.com/drs-gcu": "3"}, (1, 3, 0, 0)),
        ({"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "50"}, (1, 20, -1, 50)),
        ({"enflame.com/gcu-memory": "20"}, (1, 20, -1, 0)),
    ],
)
def test_enflame_drs_requests_one_gcu_direct_or_by_spec(
    limits: dict[str, str], expected: tuple[int, int, int, int]
) -> None:
    assert _shaped(limits) == {"Enflame": expected}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"}, (1, 24576, 101, 25)),
        ({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "49152"}, (1, 49152, 101, 50)),
        ({"kunlunxin.com/vxpu": "2"}, (2, 98304, 101, 100)),
    ],
)
def test_kunlun_vxpu_cores_are_the_memory_share_of_a_whole_xpu(
    limits: dict[str, str], expected: tuple[int, int, int, int]
) -> None:
    assert _shaped(limits) == {"XPU": expected}


def test_a_core_or_memory_resource_alone_asks_nothing_of_other_vendors() -> None:
    assert _shaped({"hygon.com/dcumem": "1000"}) == {}
    assert _shaped({"enflame.com/gcu-core": "50"}) == {}
