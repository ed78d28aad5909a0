"""Inventory the scheduler does not read from a HAMi register: devices synthesised from node
capacity, and the Enflame DRS / MetaX sGPU node annotations (contract §1 "I")."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.errors import DecodeError, ProtocolError
from hami_protocol.node.registry import DeviceInfo
from hami_protocol.vendor.annotations import (
    DrsCapacity,
    DrsDevice,
    MetaxSDevice,
    decode_drs_capacity,
    decode_inventory,
    decode_metax_sgpu,
    drs_devices,
    drs_profiles,
    encode_drs_capacity,
    encode_metax_sgpu,
    parse_drs_profile,
)
from hami_protocol.vendor.capacity import synthesize
from hami_protocol.vendor.table import DEFAULT_VENDORS, Vendor, vendor_by_word


def _row(word: str) -> Vendor:
    row = vendor_by_word(DEFAULT_VENDORS, word)
    assert row is not None
    return row


def _ids(devices: tuple[DeviceInfo, ...]) -> list[str]:
    return [device.id for device in devices]


# --- capacity -------------------------------------------------------------------------------


def test_cambricon_ceil_vcore_over_100() -> None:
    capacity = {"cambricon.com/mlu.smlu.vcore": "250", "cambricon.com/mlu.smlu.vmemory": "96"}
    devices = synthesize(_row("MLU"), "n1", capacity)
    assert _ids(devices) == ["n1-cambricon-mlu-0", "n1-cambricon-mlu-1", "n1-cambricon-mlu-2"]
    first = devices[0]
    assert (first.count, first.devcore, first.type, first.numa, first.health) == (
        100,
        100,
        "MLU",
        0,
        True,
    )
    assert first.devmem == 96 * 256 * 100 // 250  # 9830, integer division as HAMi


def test_mthreads_ceil_core_over_16() -> None:
    capacity = {"mthreads.com/sgpu-core": "32", "mthreads.com/sgpu-memory": "192"}
    devices = synthesize(_row("Mthreads"), "n1", capacity)
    assert _ids(devices) == ["n1-mthreads-0", "n1-mthreads-1"]
    assert {(d.count, d.devcore, d.devmem, d.type, d.device_vendor) for d in devices} == {
        (100, 16, 192 * 512 * 16 // 32, "Mthreads", "Mthreads")
    }


@pytest.mark.parametrize(
    ("word", "resource", "infix", "count", "devmem", "devcore"),
    [
        ("Metax-GPU", "metax-tech.com/gpu", "metax", 1, 65536, 100),
        ("GCU", "enflame.com/gcu", "GCU", 1, 100, 100),
        ("kunlun", "kunlunxin.com/xpu", "kunlun", 100, 98304, 100),
    ],
)
def test_one_device_per_unit(
    word: str, resource: str, infix: str, count: int, devmem: int, devcore: int
) -> None:
    devices = synthesize(_row(word), "gpu-7", {resource: 4})
    assert _ids(devices) == [f"gpu-7-{infix}-{i}" for i in range(4)]
    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert {(d.count, d.devmem, d.devcore, d.type, d.health) for d in devices} == {
        (count, devmem, devcore, word, True)
    }


def test_kunlun_upper_half_is_numa_1() -> None:
    devices = synthesize(_row("kunlun"), "k", {"kunlunxin.com/xpu": "8"})
    assert [d.numa for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert synthesize(_row("kunlun"), "k", {"kunlunxin.com/xpu": "3"})[1].numa == 1


def test_aws_neuron_cores_bitmask_and_instance_type() -> None:
    capacity = {"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"}
    labels = {"node.kubernetes.io/instance-type": "inf2.xlarge"}
    devices = synthesize(_row("AWSNeuron"), "a", capacity, labels)
    assert _ids(devices) == ["a-AWSNeuron-0", "a-AWSNeuron-1"]
    assert {(d.count, d.devcore, d.devmem, d.type) for d in devices} == {(2, 0b11, 0, "AWSNeuron")}
    assert dict(devices[0].custom_info) == {"AWSNodeType": "inf2.xlarge"}
    inf1_capacity = {"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "4"}
    inf1 = synthesize(_row("AWSNeuron"), "a", inf1_capacity)
    assert (inf1[0].count, inf1[0].devcore) == (4, 0b1111)
    no_cores = synthesize(_row("AWSNeuron"), "a", {"aws.amazon.com/neuron": "1"})
    assert (no_cores[0].count, no_cores[0].devcore) == (2, 0b11)
    assert dict(no_cores[0].custom_info) == {"AWSNodeType": ""}


@pytest.mark.parametrize("word", ["MLU", "Mthreads", "Metax-GPU", "GCU", "kunlun", "AWSNeuron"])
def test_no_capacity_no_devices(word: str) -> None:
    assert synthesize(_row(word), "n", {}) == ()
    assert synthesize(_row(word), "n", {_row(word).capacity.units_resource: "0"}) == ()  # type: ignore[union-attr]


@pytest.mark.parametrize("word", ["NVIDIA", "DCU", "AMD", "Metax-SGPU", "Enflame"])
def test_other_inventories_are_not_synthesised(word: str) -> None:
    assert synthesize(_row(word), "n", {"nvidia.com/gpu": "4", "hygon.com/dcunum": "4"}) == ()


@pytest.mark.parametrize(
    ("word", "capacity", "named"),
    [
        ("MLU", {"cambricon.com/mlu.smlu.vcore": "200"}, "cambricon.com/mlu.smlu.vmemory"),
        ("Mthreads", {"mthreads.com/sgpu-core": "16"}, "mthreads.com/sgpu-memory"),
        ("kunlun", {"kunlunxin.com/xpu": "1.5"}, "kunlunxin.com/xpu"),
        ("GCU", {"enflame.com/gcu": "lots"}, "enflame.com/gcu"),
        ("Metax-GPU", {"metax-tech.com/gpu": "-2"}, "metax-tech.com/gpu"),
        ("Metax-GPU", {"metax-tech.com/gpu": "1M"}, "metax-tech.com/gpu"),
        (
            "MLU",
            {"cambricon.com/mlu.smlu.vcore": "100", "cambricon.com/mlu.smlu.vmemory": "x"},
            "cambricon.com/mlu.smlu.vmemory",
        ),
    ],
)
def test_bad_capacity_names_the_resource(
    word: str, capacity: dict[str, object], named: str
) -> None:
    with pytest.raises(ProtocolError) as caught:
        synthesize(_row(word), "n", capacity)
    assert caught.value.key == named


@given(
    word=st.sampled_from(["MLU", "Mthreads", "Metax-GPU", "GCU", "kunlun", "AWSNeuron"]),
    capacity=st.dictionaries(
        st.sampled_from(
            [
                "cambricon.com/mlu.smlu.vcore",
                "cambricon.com/mlu.smlu.vmemory",
                "mthreads.com/sgpu-core",
                "mthreads.com/sgpu-memory",
                "metax-tech.com/gpu",
                "enflame.com/gcu",
                "kunlunxin.com/xpu",
                "aws.amazon.com/neuron",
                "aws.amazon.com/neuroncore",
            ]
        ),
        st.one_of(st.text(max_size=12), st.integers(-5, 10**12), st.floats(), st.none()),
    ),
)
def test_synthesis_raises_only_protocol_errors(word: str, capacity: dict[str, object]) -> None:
    try:
        devices = synthesize(_row(word), "n", capacity)
    except ProtocolError:
        return
    assert len({d.id for d in devices}) == len(devices)
    assert all(d.count >= 1 and d.devmem >= 0 for d in devices)


# --- Enflame DRS ----------------------------------------------------------------------------

_DRS = (
    '{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"","capacity":"6"}],'
    '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
)


def test_drs_devices_as_hami_builds_them() -> None:
    devices = decode_inventory(keys.ENFLAME_DRS_CAPACITY, "e1", _DRS)
    assert _ids(devices) == ["e1-enflame-drs-0", "e1-enflame-drs-1"]
    first = devices[0]
    assert (first.count, first.devmem, first.devcore, first.type, first.health) == (
        6,
        40 * 1024,
        100,
        "Enflame",
        True,
    )
    assert dict(first.custom_info) == {
        "minor": "0",
        "index": "0",
        "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
        "maxSlice": 6,
    }
    assert devices[1].custom_info["minor"] == "1"  # empty minor takes the index


def test_drs_profiles_sorted_with_core_percent() -> None:
    capacity = decode_drs_capacity(_DRS)
    profiles = drs_profiles(capacity.profiles, 6)
    assert [(p.name, p.id, p.slices, p.memory_gb, p.core_percent) for p in profiles] == [
        ("1g.6gb", "0", 1, 6, 17),
        ("3g.20gb", "1", 3, 20, 50),
        ("6g.40gb", "2", 6, 40, 100),
    ]
    assert parse_drs_profile(" 2G.10GB ") == (2, 10)
    assert parse_drs_profile("2g") == (0, 0)
    assert parse_drs_profile("2g.big") == (2, 0)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("{", "invalid JSON"),
        ("[]", "document"),
        ('{"devices":{},"profiles":{}}', "devices"),
        ('{"devices":[{"index":0,"capacity":1}],"profiles":{"1g.1gb":"0"}}', "index"),
        ('{"devices":[{"index":"0","capacity":0}],"profiles":{"1g.1gb":"0"}}', "capacity"),
        ('{"devices":[{"index":"0","capacity":true}],"profiles":{"1g.1gb":"0"}}', "capacity"),
        ('{"devices":[{"index":"0","capacity":2}],"profiles":{"big":"0"}}', "profiles"),
        ('{"devices":[{"index":"0","capacity":2}],"profiles":{"1g.1gb":0}}', "profiles"),
        ('{"devices":[],"profiles":{"1g.1gb":"0"}}', "devices"),
        (
            '{"devices":[{"index":"1","capacity":2},{"index":"1","capacity":2}],'
            '"profiles":{"1g.1gb":"0"}}',
            "repeated",
        ),
    ],
)
def test_bad_drs_annotation_names_key_and_field(value: str, field: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_inventory(keys.ENFLAME_DRS_CAPACITY, "e", value)
    assert caught.value.key == keys.ENFLAME_DRS_CAPACITY
    assert field in str(caught.value)


_drs_capacity = st.builds(
    DrsCapacity,
    devices=st.lists(
        st.builds(
            DrsDevice,
            index=st.integers(0, 64).map(str),
            minor=st.text(max_size=4),
            capacity=st.integers(1, 2**31 - 1),
        ),
        max_size=4,
    ).map(tuple),
    profiles=st.dictionaries(st.text(max_size=10), st.text(max_size=4), max_size=4),
)


@given(_drs_capacity)
def test_drs_round_trip(capacity: DrsCapacity) -> None:
    decoded = decode_drs_capacity(encode_drs_capacity(capacity))
    assert decoded.devices == capacity.devices
    assert dict(decoded.profiles) == dict(capacity.profiles)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["devices", "profiles", "index", "minor", "capacity", "x"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)


@given(st.one_of(st.text(), _json_values.map(json.dumps)))
def test_drs_decoder_raises_only_protocol_errors(value: str) -> None:
    with contextlib.suppress(ProtocolError):
        decode_inventory(keys.ENFLAME_DRS_CAPACITY, "e", value)


# --- MetaX sGPU -----------------------------------------------------------------------------

_METAX = (
    '[{"uuid":"GPU-a","bdf":"0000:01:00.0","model":"C500","totalDevCount":16,"totalCompute":100,'
    '"totalVRam":65536,"availableDevCount":16,"availableCompute":100,"availableVRam":65536,'
    '"numa":1,"healthy":true,"qosPolicy":"best-effort","linkZone":1},'
    '{"uuid":"GPU-b","totalDevCount":16,"totalCompute":100,"totalVRam":65536}]'
)


def test_metax_sgpu_devices_as_hami_builds_them() -> None:
    devices = decode_inventory(keys.METAX_SGPU_DEVICES, "m", _METAX)
    assert _ids(devices) == ["GPU-a", "GPU-b"]
    first, second = devices
    assert (first.index, first.count, first.devcore, first.devmem, first.numa) == (
        0,
        16,
        100,
        65536,
        1,
    )
    assert (first.type, first.mode, first.health, first.device_vendor) == (
        "Metax-SGPU",
        "",
        True,
        "Metax-SGPU",
    )
    assert dict(first.custom_info) == {"QosPolicy": "best-effort", "Model": "C500", "LinkZone": 1}
    assert (second.index, second.health) == (1, False)  # omitted healthy = false


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("{}", "document"),
        ('[{"totalDevCount":1,"totalCompute":100,"totalVRam":1}]', "uuid"),
        ('[{"uuid":"","totalDevCount":1,"totalCompute":100,"totalVRam":1}]', "uuid"),
        ('[{"uuid":"a","totalCompute":100,"totalVRam":1}]', "totalDevCount"),
        ('[{"uuid":"a","totalDevCount":1,"totalVRam":1}]', "totalCompute"),
        ('[{"uuid":"a","totalDevCount":1,"totalCompute":100}]', "totalVRam"),
        ('[{"uuid":"a","totalDevCount":1.5,"totalCompute":100,"totalVRam":1}]', "totalDevCount"),
        (
            '[{"uuid":"a","totalDevCount":1,"totalCompute":100,"totalVRam":1,"healthy":"yes"}]',
            "healthy",
        ),
        (
            '[{"uuid":"a","totalDevCount":1,"totalCompute":1,"totalVRam":1},'
            '{"uuid":"a","totalDevCount":1,"totalCompute":1,"totalVRam":1}]',
            "twice",
        ),
    ],
)
def test_bad_metax_annotation_names_key_and_field(value: str, field: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_metax_sgpu(value)
    assert caught.value.key == keys.METAX_SGPU_DEVICES
    assert field in str(caught.value)


_int32 = st.integers(-(2**31), 2**31 - 1)
_metax_device = st.builds(
    MetaxSDevice,
    uuid=st.text(min_size=1, max_size=8),
    total_dev_count=st.integers(1, 2**31 - 1),
    total_compute=st.integers(1, 2**31 - 1),
    total_vram=st.integers(1, 2**31 - 1),
    bdf=st.text(max_size=8),
    model=st.text(max_size=8),
    available_dev_count=_int32,
    available_compute=_int32,
    available_vram=_int32,
    numa=_int32,
    healthy=st.booleans(),
    qos_policy=st.sampled_from(["", *keys.METAX_QOS_POLICIES]),
    link_zone=_int32,
)


@given(st.lists(_metax_device, max_size=4, unique_by=lambda d: d.uuid))
def test_metax_round_trip(devices: list[MetaxSDevice]) -> None:
    assert decode_metax_sgpu(encode_metax_sgpu(devices)) == tuple(devices)


@given(st.text())
def test_metax_decoder_raises_only_protocol_errors(value: str) -> None:
    with contextlib.suppress(ProtocolError):
        decode_inventory(keys.METAX_SGPU_DEVICES, "m", value)


def test_unknown_inventory_key() -> None:
    with pytest.raises(DecodeError):
        decode_inventory("example.com/devices", "n", "[]")


def test_drs_devices_from_a_built_capacity() -> None:
    capacity = DrsCapacity((DrsDevice("3", "7", 4),), {"2g.16gb": "a", "4g.32gb": "b"})
    (device,) = drs_devices("x", capacity)
    assert (device.id, device.index, device.count) == ("x-enflame-drs-3", 3, 4)
    assert device.devmem == 32768
    assert device.custom_info["minor"] == "7"
